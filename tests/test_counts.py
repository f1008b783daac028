"""suitefit counts what pytest counts: its recorded outcomes equal pytest's own summary line.

A throw-away suite with every kind of outcome pytest's line distinguishes (a module
skipped at collection, a skip in setup, xfail, xpass, errors in setup and in teardown, a
collection error, a deselected test), run by real pytest, serial and under xdist.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from clihelp import suitefit

from suitefit.history import History
from suitefit.summary import outcome_words, run_outcomes

SUITE = {
    "test_module_skip.py": """
import pytest
pytest.skip("this whole module is skipped", allow_module_level=True)
def test_never():
    pass
""",
    "test_kinds.py": """
import pytest

@pytest.fixture
def skips_in_setup():
    pytest.skip("no database here")

@pytest.fixture
def fails_in_setup():
    raise RuntimeError("setup broke")

@pytest.fixture
def fails_in_teardown():
    yield
    raise RuntimeError("teardown broke")

def test_pass():
    pass

def test_fail():
    assert False

def test_skip_in_setup(skips_in_setup):
    pass

@pytest.mark.skipif(True, reason="marked")
def test_skipif():
    pass

@pytest.mark.xfail(reason="known")
def test_xfail():
    assert False

@pytest.mark.xfail(reason="fixed already")
def test_xpass():
    pass

def test_setup_error(fails_in_setup):
    pass

def test_teardown_error(fails_in_teardown):
    pass

def test_fail_then_teardown_error(fails_in_teardown):
    assert False

def test_deselect_me():
    pass
""",
    "test_more.py": "def test_a():\n    pass\n\ndef test_b():\n    pass\n",
    "test_broken.py": "import no_such_module_in_this_suite\n",
}
WORDS = {"error": "error", "errors": "error", "warning": "warnings", "warnings": "warnings"}


def _suite(root: Path) -> Path:
    (root / "tests").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    for name, body in SUITE.items():
        (root / "tests" / name).write_text(body)
    return root


def pytest_line(out: str) -> tuple[str, dict[str, int]]:
    """pytest's own summary line, as text without the time, and as counts."""
    m = re.search(r"^=* ?((?:\d+ [a-z]+(?:, )?)+) in [\d.]+s.*$", out, re.M)
    assert m, out[-2000:]
    text = m.group(1).rstrip(", ")
    counts = {WORDS.get(w, w): int(n) for n, w in re.findall(r"(\d+) ([a-z]+)", text)}
    return text, counts


def _check(root: Path, out: str) -> dict[str, int]:
    text, counts = pytest_line(out)
    with History(root / ".suitefit" / "history.sqlite", create=False) as h:
        run = h.runs(limit=1)[0]
    assert run_outcomes(run) == counts
    assert outcome_words(counts) == text  # the same words, in the same order
    assert (run.passed, run.failed, run.skipped, run.errors) == (
        counts.get("passed", 0), counts.get("failed", 0), counts.get("skipped", 0), counts.get("error", 0))
    assert f"recorded outcomes: {text} (as pytest counts them" in out  # the terminal summary
    md = suitefit("report", "--markdown", cwd=root).stdout
    assert f"| tests | {text} (as pytest counts: reports, not tests) |" in md
    return counts


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_recorded_counts_equal_pytests_line(tmp_path: Path, workers: list[str]) -> None:
    root = _suite(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_ADDOPTS", "PYTEST_XDIST"))}
    res = subprocess.run([sys.executable, "-m", "pytest", "--suitefit", *workers, "-p", "no:cacheprovider",
                          "--continue-on-collection-errors", "-k", "not deselect_me", "-rN"],
                         cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 1, res.stdout + res.stderr
    counts = _check(root, res.stdout)
    # every kind is there, as pytest counts it: the module skip is one skip, a pass followed by a
    # teardown error is a pass and an error, the broken file one error. Under xdist the workers
    # deselect, and pytest's line (so ours) does not mention it.
    want = {"failed": 2, "passed": 4, "skipped": 3, "xfailed": 1, "xpassed": 1, "error": 4}
    assert counts == (want if workers else {**want, "deselected": 1})


def test_suitefit_run_counts_as_pytest_does(tmp_path: Path) -> None:
    root = _suite(tmp_path)
    res = suitefit("run", "--workers", "2", "--", "-p", "no:cacheprovider", "--continue-on-collection-errors",
                   cwd=root)
    assert res.returncode == 1, res.stdout + res.stderr
    counts = _check(root, res.stdout)
    assert counts["error"] == 4 and counts["skipped"] == 3 and counts["passed"] == 5


def test_an_interrupted_collection_counts_as_pytest_does(tmp_path: Path) -> None:
    root = _suite(tmp_path)
    res = subprocess.run([sys.executable, "-m", "pytest", "--suitefit", "-p", "no:cacheprovider"],
                         cwd=root, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2, res.stdout + res.stderr
    assert _check(root, res.stdout) == {"skipped": 1, "error": 1}


def test_an_interrupt_after_tests_ran_is_not_called_a_collection_failure() -> None:
    from suitefit.exits import explain_exit

    said = explain_exit(2, "interrupted")  # `-x` under xdist: tests ran, then pytest stopped
    assert said is not None and "collection failed" not in said and "interrupted" in said
    said = explain_exit(2, "collect-error")
    assert said is not None and "collection failed" in said
