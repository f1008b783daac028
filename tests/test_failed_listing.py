"""Failed tests are listed by name, with their short reason, worker and file: terminal, Markdown, HTML.

A real suite run through real pytest (serial and under xdist), a real history, and the
HTML report read in real headless Chromium (``report_browser``).
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from clihelp import suitefit
from report_browser import Browser, NoChromium, ensure_chromium

from suitefit.summary import SHOWN_FAILURES

SUITE = {
    "test_mixed.py": """
import pytest

def test_passes():
    pass

def test_assert_fails():
    assert 1 + 1 == 3

def test_raises():
    raise ValueError("the widget count went negative")

@pytest.fixture
def broken_setup():
    raise RuntimeError("database not reachable")

def test_setup_error(broken_setup):
    pass

@pytest.fixture
def broken_teardown():
    yield
    raise OSError("cannot remove the scratch folder")

def test_teardown_error(broken_teardown):
    pass
""",
    "test_z_many.py": """
import time, pytest

@pytest.mark.parametrize("i", range(22))
def test_numbered(i):
    time.sleep(0.05)  # after test_mixed's four even when a second worker runs these beside them
    assert i < 0, f"case {i} is not negative"
""",
    "test_broken_import.py": "import no_such_module_for_suitefit\n",
}
REASONS = {
    "tests/test_mixed.py::test_assert_fails": "assert (1 + 1) == 3",
    "tests/test_mixed.py::test_raises": "ValueError: the widget count went negative",
    "tests/test_mixed.py::test_setup_error": "in setup: RuntimeError: database not reachable",
    "tests/test_mixed.py::test_teardown_error": "in teardown: OSError: cannot remove the scratch folder",
    "tests/test_broken_import.py": "ModuleNotFoundError: No module named 'no_such_module_for_suitefit'",
}
N_FAILED = 4 + 22 + 1  # the four in test_mixed, the 22 numbered, the file that does not collect


def _suite(root: Path) -> Path:
    (root / "tests").mkdir()
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    for name, body in SUITE.items():
        (root / "tests" / name).write_text(body)
    return root


@pytest.fixture(scope="module", params=["serial", "xdist"])
def recorded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One measured run of the suite (`--continue-on-collection-errors` so the tests run too)."""
    root = _suite(tmp_path_factory.mktemp(request.param))
    args = ["--", "-q", "-p", "no:randomly", "--continue-on-collection-errors"]
    xdist = ["-n", "2"] if request.param == "xdist" else []
    res = suitefit("profile", *xdist, *args, *(["--dist=loadfile"] if xdist else []), cwd=root)
    assert res.returncode == 1, res.stdout + res.stderr
    return root, res.stdout


def test_history_keeps_the_reason_of_failures_only(recorded: tuple[Path, str]) -> None:
    root, _ = recorded
    with sqlite3.connect(root / ".suitefit" / "history.sqlite") as db:
        rows = dict(db.execute("SELECT nodeid, reason FROM tests"))
    assert rows["tests/test_mixed.py::test_passes"] is None
    for nodeid, reason in REASONS.items():
        if "::" in nodeid:
            assert rows[nodeid] == reason, (nodeid, rows[nodeid])
    assert rows["tests/test_z_many.py::test_numbered[7]"].startswith("AssertionError: case 7 is not negative")


def test_terminal_summary_lists_the_first_twenty(recorded: tuple[Path, str]) -> None:
    _, out = recorded
    section = out[out.index("failed (27):"):]
    listed = re.findall(r"^  (tests/\S+) \[(\w+)\] (.*)$", section, re.M)
    assert len(listed) == SHOWN_FAILURES
    assert f"... and {N_FAILED - SHOWN_FAILURES} more" in section
    got = {n: (w, r) for n, w, r in listed}
    assert got["tests/test_broken_import.py"] == ("collection", REASONS["tests/test_broken_import.py"])
    for nodeid in ("tests/test_mixed.py::test_assert_fails", "tests/test_mixed.py::test_teardown_error"):
        assert got[nodeid][1] == REASONS[nodeid]
        assert got[nodeid][0] == "main" or got[nodeid][0].startswith("gw")


def test_markdown_lists_name_reason_worker_file(recorded: tuple[Path, str]) -> None:
    root, _ = recorded
    md = suitefit("report", "--markdown", cwd=root).stdout
    assert f"Failed ({N_FAILED}):" in md
    part = md[md.index(f"Failed ({N_FAILED}):"):]
    part = part[: part.index(" more")]
    failed_rows = [ln for ln in part.splitlines() if ln.startswith("| `tests/")]
    assert len(failed_rows) == SHOWN_FAILURES
    line = next(r for r in failed_rows if "test_raises" in r)
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[0] == "`tests/test_mixed.py::test_raises`"
    assert cells[1] == REASONS["tests/test_mixed.py::test_raises"]
    assert cells[2] in ("main", "gw0", "gw1")
    assert cells[3] == "`tests/test_mixed.py`"
    assert f"and {N_FAILED - SHOWN_FAILURES} more" in md


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    try:
        chromium = ensure_chromium()
    except NoChromium as e:
        pytest.skip(f"BROWSER TESTS NOT RUN: {e}")
    b = Browser(chromium, tmp_path_factory.mktemp("chromium-profile"))
    yield b
    b.close()


def test_html_report_shows_them_in_a_real_browser(recorded: tuple[Path, str], browser: Browser,
                                                   tmp_path: Path) -> None:
    root, _ = recorded
    page = tmp_path / "report.html"
    res = subprocess.run([sys.executable, "-m", "suitefit", "report", "-o", str(page)], cwd=root,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    load = browser.load(page)
    assert not load.errors, load.errors
    assert browser.text("#failed h2") == f"Failed ({N_FAILED})"
    rows = browser.table_rows("failed")
    assert len(rows) == SHOWN_FAILURES  # all visible: the listing is not folded
    by_name = {r[0]: r for r in rows}
    for nodeid, reason in REASONS.items():
        assert by_name[nodeid][1] == reason
        assert by_name[nodeid][3] == nodeid.split("::")[0]
    assert by_name["tests/test_broken_import.py"][2] == "collection"
    assert f"and {N_FAILED - SHOWN_FAILURES} more" in browser.text("#failed")
    # the section is reachable from the page's navigation
    assert "Failed" in browser.text("nav")
