"""``suitefit compare``: interleaving, real processes, run-vs-run deltas, and bad input."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from suitefit import history as hist
from suitefit.diagnose.compare import compare_commands, compare_runs, interleave
from suitefit.diagnose.procs import run_measured
from suitefit.history import FileRecord, History

SUITEFIT = [sys.executable, "-m", "suitefit"]


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SUITEFIT, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_interleave_alternates_who_goes_first() -> None:
    s = interleave(runs=3, warmup=1)
    assert [(side, measured) for side, _, measured in s.steps] == [
        ("a", False), ("b", False),
        ("b", True), ("a", True),
        ("a", True), ("b", True),
        ("b", True), ("a", True),
    ]
    measured = [(side, i) for side, i, m in s.steps if m]
    assert sorted(measured) == [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1), ("b", 2)]


def test_cpu_time_covers_the_whole_process_tree() -> None:
    burn = f"{sys.executable} -c 'import time; t=time.process_time(); exec(\"while time.process_time()-t<0.15: pass\")'"
    m = run_measured(f"{burn} & {burn} & wait")
    assert m.exit_code == 0
    assert m.cpu_s >= 0.25  # two grandchildren's CPU, reaped by the shell
    assert m.wall_s >= 0.15


def test_a_known_ten_percent_difference_is_detected_with_enough_runs() -> None:
    """8 runs suffice on a quiet machine; on a loaded one the tool says how many more it needs,
    and with that many (capped at 40) it must find the difference."""
    res = compare_commands("sleep 0.22", "sleep 0.2", runs=8, warmup=1)
    assert res.wall is not None
    if res.wall.verdict != "b-faster":
        assert res.wall.verdict == "unclear", res.wall.sentence()
        need = res.wall.runs_needed or 40
        res = compare_commands("sleep 0.22", "sleep 0.2", runs=min(40, max(12, need * 3 // 2)), warmup=1)
        assert res.wall is not None
    assert res.wall.verdict == "b-faster", res.wall.sentence()
    assert res.wall.ci_low <= 1.10 * 1.03 and res.wall.ci_high >= 1.10 / 1.03
    # Process start-up adds the same few ms to both sides, so the ratio reads a little under 1.10.
    assert re.match(r"B is 1\.(0[5-9]|1[0-4])x faster \(95% CI 1\.\d\d-1\.\d\d\)$", res.wall.sentence())
    assert res.cpu is not None and res.cpu.verdict == "unmeasurable"  # sleep uses no CPU


def test_two_runs_cannot_tell() -> None:
    res = compare_commands("sleep 0.11", "sleep 0.1", runs=2, warmup=0)
    assert res.wall is not None and res.wall.verdict == "too-few"
    assert res.wall.sentence().startswith("cannot tell from 2 runs of each")


def test_cli_prints_medians_ranges_and_verdicts_for_wall_and_cpu() -> None:
    p = cli("compare", "--a", "sleep 0.05", "--b", "sleep 0.05", "--runs", "5", "--warmup", "0", "--json")
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert len(data["a"]["wall_s"]) == 5 and len(data["b"]["cpu_s"]) == 5
    assert data["wall"]["verdict"] not in ("b-faster", "b-slower")
    p = cli("compare", "--a", "sleep 0.05", "--b", "sleep 0.05", "--runs", "2", "--warmup", "0")
    assert p.returncode == 0, p.stderr
    assert "wall: cannot tell from 2 runs of each" in p.stdout
    assert "median" in p.stdout and "range" in p.stdout and "cpu time" in p.stdout


def test_a_failing_command_is_one_clear_line() -> None:
    p = cli("compare", "--a", "echo boom >&2; exit 3", "--b", "true", "--runs", "2", "--warmup", "0")
    assert p.returncode != 0
    lines = p.stderr.strip().splitlines()
    assert lines == ["suitefit: error: command A (echo boom >&2; exit 3) exited 3 on run 1: boom"]


@pytest.mark.parametrize("args", [
    ("--a", "true"),
    ("--a", "true", "--b", "true", "--runs", "0"),
    ("--a", "true", "--b", "true", "--confidence", "1.5"),
])
def test_bad_arguments_are_one_line(args: tuple[str, ...]) -> None:
    p = cli("compare", *args)
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1 and p.stderr.startswith("suitefit: error: ")


def _history(tmp_path: Path) -> Path:
    path = tmp_path / "h.sqlite"
    with History(path) as h:
        for run_no, scale, peak in ((1, 1.0, 100.0), (2, 1.5, 180.0)):
            rid = h.new_run("profile", started=1000.0 * run_no)
            h.update_run(rid, status="passed", wall_s=10 * scale, cpu_s=8 * scale, peak_rss_mb=peak * 3)
            h.add_files([
                FileRecord(rid, "tests/test_a.py", "gw0", 0, 1, 2.0 * scale, 1.5 * scale, 3, 50, peak, 50 + peak),
                FileRecord(rid, "tests/test_a.py", "gw1", 0, 1, 1.0, 1.0, 2, 50, 20, 70),
                FileRecord(rid, "tests/test_b.py", "gw1", 0, 1, 1.0, 0.9, 1, 50, 10, 60),
            ])
        rid = h.new_run("profile", started=5000.0)
        h.update_run(rid, status="passed")
        h.add_tests([hist.TestRecord(rid, "tests/test_c.py::t", "tests/test_c.py", "main", 0, 0, 0, 0.3, 0, 0.3, 0.2, "passed")])
    return path


def test_runs_of_gives_file_by_file_deltas(tmp_path: Path) -> None:
    path = _history(tmp_path)
    with History(path) as h:
        rc = compare_runs(h, 1, 2)
        mixed = compare_runs(h, 1, 3)
    a = next(f for f in rc.files if f.path == "tests/test_a.py")
    assert (a.wall_a, a.wall_b) == (3.0, 4.0)  # summed over workers
    assert (a.peak_a, a.peak_b) == (100.0, 180.0)  # max over workers
    assert rc.files[0].path == "tests/test_a.py"  # biggest delta first
    c = next(f for f in mixed.files if f.path == "tests/test_c.py")
    assert c.wall_a is None and c.wall_b == pytest.approx(0.3) and c.peak_b is None
    p = cli("compare", "--runs-of", "1", "2", "--history", str(path))
    assert p.returncode == 0, p.stderr
    assert "tests/test_a.py" in p.stdout and "+1.0 s" in p.stdout and "180 MiB" in p.stdout and "+80 MiB" in p.stdout


def test_runs_of_a_run_the_history_lacks(tmp_path: Path) -> None:
    path = _history(tmp_path)
    p = cli("compare", "--runs-of", "1", "9", "--history", str(path))
    assert p.returncode != 0
    assert p.stderr.strip() == f"suitefit: error: no run 9 in history {path}"
    p = cli("compare", "--runs-of", "1", "2", "--history", str(tmp_path / "none.sqlite"))
    assert p.returncode != 0 and p.stderr.startswith("suitefit: error: no history at ")
