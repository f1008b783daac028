"""`suitefit report` as a user runs it: real processes, a real history, one clear line on bad input."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from suitefit.history import History
from suitefit.report.synthetic import Shape, make_run


def suitefit(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    e = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "suitefit", "report", *args], cwd=cwd, env=e,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def hist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A history with a planned crashed run (1) and a plain one (2)."""
    path = tmp_path_factory.mktemp("hist") / "history.sqlite"
    with History(path) as h:
        make_run(h, Shape(tests=120, files=12, workers=3, planned=True, crash=True, seed=3))
        make_run(h, Shape(tests=150, files=14, workers=2, seed=4), started=1_790_000_600.0)
    return path


def one_error_line(p: subprocess.CompletedProcess[str]) -> str:
    assert p.returncode != 0, p.stdout
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("suitefit: error: ")
    return lines[0]


def test_writes_the_newest_run_by_default(tmp_path: Path, hist: Path) -> None:
    p = suitefit(tmp_path, "--history", str(hist))
    assert p.returncode == 0, p.stderr
    out = tmp_path / "suitefit-report-2.html"
    assert re.match(r"suitefit: report of run 2 written to suitefit-report-2\.html \(\d+ KiB\)", p.stdout)
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "run 2 (profile)" in page
    assert "<svg" in page and "http://" not in page and "https://" not in page


def test_named_run_and_output_folder_is_created(tmp_path: Path, hist: Path) -> None:
    out = tmp_path / "deep" / "er" / "r1.html"
    p = suitefit(tmp_path, "1", "-o", str(out), "--history", str(hist))
    assert p.returncode == 0, p.stderr
    page = out.read_text()
    assert 'id="crash"' in page and 'id="plan"' in page  # crashed and planned: both sections


def test_history_from_pyproject(tmp_path: Path, hist: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(f'[tool.suitefit]\nhistory = "{hist}"\n'
                                             '[tool.suitefit.report]\noutput = "out/latest.html"\n')
    p = suitefit(tmp_path)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "out" / "latest.html").exists()
    (tmp_path / "pyproject.toml").write_text('[tool.suitefit.report]\noutptu = "x.html"\n')
    assert "[tool.suitefit.report]: unknown key(s) outptu" in one_error_line(suitefit(tmp_path))


def test_unknown_run(tmp_path: Path, hist: Path) -> None:
    line = one_error_line(suitefit(tmp_path, "42", "--history", str(hist)))
    assert line == f"suitefit: error: no run 42 in history {hist}"
    assert "no run 7 in history" in one_error_line(suitefit(tmp_path, "--compare", "1", "7", "--history", str(hist)))


def test_empty_and_missing_history(tmp_path: Path) -> None:
    empty = tmp_path / "empty.sqlite"
    History(empty).close()
    line = one_error_line(suitefit(tmp_path, "--history", str(empty)))
    assert f"history {empty} holds no runs" in line
    line = one_error_line(suitefit(tmp_path, "3", "--history", str(empty)))
    assert "holds no runs" in line
    line = one_error_line(suitefit(tmp_path, "--history", str(tmp_path / "nope.sqlite")))
    assert "no history at" in line and not (tmp_path / "nope.sqlite").exists()
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not a database, just text " * 100)
    assert "corrupt" in one_error_line(suitefit(tmp_path, "--history", str(junk)))


def test_unwritable_output(tmp_path: Path, hist: Path) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    line = one_error_line(suitefit(tmp_path, "-o", str(blocker / "r.html"), "--history", str(hist)))
    assert line == f"suitefit: error: cannot write the report to {blocker / 'r.html'}: {blocker} is a file, not a folder"
    line = one_error_line(suitefit(tmp_path, "-o", str(tmp_path), "--history", str(hist)))
    assert "it is a folder" in line
    line = one_error_line(suitefit(tmp_path, "-o", "/proc/version", "--history", str(hist)))
    assert line.startswith("suitefit: error: cannot write the report to /proc/version: cannot create a file in /proc")
    assert not list(tmp_path.glob(".suitefit-report-*"))  # no half-written temp file left behind


def test_bad_arguments(tmp_path: Path, hist: Path) -> None:
    assert "not both" in one_error_line(suitefit(tmp_path, "1", "--compare", "1", "2", "--history", str(hist)))
    assert "not a valid integer" in one_error_line(suitefit(tmp_path, "latest", "--history", str(hist)))


def test_markdown_to_stdout(tmp_path: Path, hist: Path) -> None:
    p = suitefit(tmp_path, "--markdown", "1", "--history", str(hist))
    assert p.returncode == 0, p.stderr
    md = p.stdout
    assert md.startswith("### suitefit: run 1 (run) crashed, session ")
    assert "**Worker died: gw2" in md and "In flight: `tests/" in md
    assert "| peak tree memory |" in md and "plan: wall" in md
    with History(hist) as h:
        peak = h.run(1).peak_rss_mb
    from suitefit.units import fmt_mb

    assert f"| peak tree memory | {fmt_mb(peak)} RSS" in md
    assert len(md.splitlines()) < 60  # a summary, not the report


def test_the_plan_is_checked_against_the_command_it_predicts(tmp_path: Path, hist: Path) -> None:
    # The plan predicts the whole command (`suitefit run` to its exit, recorded at exit),
    # not the session inside it: the report compares like with like.
    from suitefit.units import fmt_s

    with History(hist) as h:
        session = h.run(1).wall_s
        h.merge_run_meta(1, command_wall_s=(session or 0.0) + 7.25)
    md = suitefit(tmp_path, "--markdown", "1", "--history", str(hist)).stdout
    row = next(ln for ln in md.splitlines() if ln.startswith("| plan: wall |"))
    assert row.endswith(f"measured {fmt_s((session or 0.0) + 7.25)} |"), row


def test_markdown_appends_to_the_step_summary(tmp_path: Path, hist: Path) -> None:
    summary = tmp_path / "step_summary.md"
    summary.write_text("# earlier step\n")
    env = {"GITHUB_STEP_SUMMARY": str(summary)}
    p = suitefit(tmp_path, "--markdown", "--history", str(hist), env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout == ""
    assert "summary appended to $GITHUB_STEP_SUMMARY" in p.stderr
    p = suitefit(tmp_path, "--markdown", "--compare", "1", "2", "--history", str(hist), env=env)
    assert p.returncode == 0, p.stderr
    text = summary.read_text()
    assert text.startswith("# earlier step\n### suitefit: run 2 (profile)")
    assert "### suitefit: run 1 against run 2" in text


def test_compare_page(tmp_path: Path, hist: Path) -> None:
    p = suitefit(tmp_path, "--compare", "1", "2", "--history", str(hist))
    assert p.returncode == 0, p.stderr
    page = (tmp_path / "suitefit-compare-1-2.html").read_text()
    assert "run 1 against run 2" in page and 'id="deltas"' in page
    assert page.count('<polyline class="rss') == 2  # both runs' memory lines
