"""``suitefit bisect``: the pure search, then planted polluters/providers found for real."""

from __future__ import annotations

import json
import math
import os
import shlex
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from diagnose_planted import DEPENDENTS, VICTIMS, write_planted_suite
from hypothesis import given
from hypothesis import strategies as st

from suitefit import history as history_mod
from suitefit.diagnose.bisect import choose_split, find_culprit
from suitefit.diagnose.pytest_runs import run_recorded
from suitefit.history import History

SUITEFIT = [sys.executable, "-m", "suitefit"]


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SUITEFIT, *args], capture_output=True, text=True, cwd=cwd, timeout=300)


@st.composite
def prefixes(draw: st.DrawFn) -> tuple[list[str], int]:
    sizes = draw(st.lists(st.integers(min_value=1, max_value=12), min_size=1, max_size=15))
    tests = [f"f{i}.py::t{j}" for i, size in enumerate(sizes) for j in range(size)]
    return tests, draw(st.integers(min_value=0, max_value=len(tests) - 1))


@given(prefixes())
def test_find_culprit_within_log2_steps_keeping_order(case: tuple[list[str], int]) -> None:
    tests, at = case
    culprit = tests[at]
    runs: list[list[str]] = []

    def flips(subset: list[str]) -> bool:
        runs.append(list(subset))
        return culprit in subset

    s = find_culprit(tests, flips)
    assert s.culprit == culprit
    n = len(tests)
    assert len(runs) <= (math.ceil(math.log2(n)) if n > 1 else 0)
    for r in runs:  # every subset is in the original order
        assert r == sorted(r, key=tests.index)
    assert s.confirmed == (bool(runs) and runs[-1] == [culprit])


@given(prefixes(), st.integers(min_value=1, max_value=8))
def test_split_prefers_a_file_boundary_when_it_costs_nothing(case: tuple[list[str], int], steps: int) -> None:
    tests, _ = case
    n = len(tests)
    if n < 2 or n > 2**steps:
        return
    k = choose_split(tests, steps)
    assert 1 <= k < n and max(k, n - k) <= 2 ** (steps - 1)
    def file(i: int) -> str:
        return tests[i].split("::")[0]

    boundaries = [b for b in range(1, n) if file(b - 1) != file(b) and max(b, n - b) <= 2 ** (steps - 1)]
    if boundaries:
        assert k in boundaries


@pytest.fixture(scope="module", autouse=True)
def _lean_child_pytest() -> Iterator[None]:
    """The planted suites use no hypothesis: not importing its plugin in each child pytest
    cuts their CPU time by two thirds on this shared 2-core machine."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTEST_ADDOPTS", "-p no:hypothesispytest")
        yield


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = write_planted_suite(tmp_path_factory.mktemp("planted"))
    history = root / "h.sqlite"
    with History(history) as h:
        rid, _ = run_recorded(h, [], kind="pytest", cwd=root, single_process=False)
        assert [t.worker for t in h.tests(rid)] == ["main"] * 20
    return root, history


CASES = [(v, p, "polluter") for v, p in VICTIMS.items()] + [
    ("test_b_jwt_client.py::test_admin_token", DEPENDENTS["test_b_jwt_client.py::test_admin_token"], "provider")
]


@pytest.mark.parametrize(("test", "culprit", "role"), CASES)
def test_bisect_finds_the_planted_culprit_and_its_command_reproduces(
        planted: tuple[Path, Path], test: str, culprit: str, role: str) -> None:
    root, history = planted
    p = cli("bisect", test, "--history", str(history), "--json", cwd=root)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert (res["culprit"], res["role"]) == (culprit, role)
    n = res["prefix_len"]
    assert n >= 3
    assert res["pytest_runs"] <= math.ceil(math.log2(n)) + 2, res
    with History(history) as h:  # remembered, for the next plan to honour
        assert (test, culprit, role) in {(c.test, c.culprit, c.kind) for c in h.constraints()}
    # The printed command, pasted into a shell, reproduces the suite outcome.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    cmd = res["command"]
    assert cmd.startswith("pytest -p no:randomly")
    assert shlex.split(cmd)[-2:] == [culprit, test]
    repro = subprocess.run(cmd, shell=True, cwd=root, env=env, capture_output=True, text=True, timeout=120)
    alone = subprocess.run(f"pytest -p no:randomly {shlex.quote(test)}", shell=True, cwd=root, env=env,
                           capture_output=True, text=True, timeout=120)
    if role == "polluter":
        assert repro.returncode == 1 and "1 failed, 1 passed" in repro.stdout, repro.stdout
        assert alone.returncode == 0
    else:
        assert repro.returncode == 0 and "2 passed" in repro.stdout, repro.stdout
        assert alone.returncode == 1 and "1 error" in alone.stdout


def test_bisect_bad_input_is_one_line(planted: tuple[Path, Path], tmp_path: Path) -> None:
    root, history = planted

    def err(*args: str) -> str:
        p = cli("bisect", *args, cwd=root)
        assert p.returncode != 0 and "Traceback" not in p.stderr, p.stderr
        errors = [ln for ln in p.stderr.splitlines() if ln.startswith("suitefit: error: ")]
        assert len(errors) == 1 and p.stderr.strip().splitlines()[-1] == errors[0]
        return errors[0].removeprefix("suitefit: error: ")

    h = str(history)
    assert err("test_c_env_polluter.py::test_nope", "--history", h).startswith("unknown test test_c_env_polluter.py::test_nope")
    assert err("test_nofile.py::test_x", "--history", h).startswith("unknown test test_nofile.py::test_x")
    (root / "test_zz_new.py").write_text("def test_late():\n    pass\n")
    try:
        assert err("test_zz_new.py::test_late", "--history", h).startswith(
            "test test_zz_new.py::test_late never ran in a recorded suite run")
    finally:
        (root / "test_zz_new.py").unlink()
    victim = next(iter(VICTIMS))
    assert err(victim, "--history", h, "--run-id", "77") == f"no run 77 in history {history}"
    missing = tmp_path / "none.sqlite"
    assert err(victim, "--history", str(missing)).startswith(f"no history at {missing}")
    assert err("test_a_jwt_setup.py::test_setup_secret", "--history", h) == (
        "test_a_jwt_setup.py::test_setup_secret is passed alone and passed in all 1 recorded run(s) "
        "that ran it: no order to blame; nothing to bisect")
    assert "nothing to bisect" in err("test_f_state_polluter.py::test_fill_1", "--history", h)
    copy = tmp_path / "copy.sqlite"  # leave the shared history as the other tests expect it
    with sqlite3.connect(history) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)
    h = str(copy)
    with History(copy) as hist:  # a run where the consumer passed as the first test of its worker
        rid = hist.new_run("pytest", started=1.0)
        hist.update_run(rid, status="passed")
        consumer = "test_b_jwt_client.py::test_admin_token"
        hist.add_tests([history_mod.TestRecord(rid, consumer, "test_b_jwt_client.py", "gw3", 0, 1.0, 0, 0, 0, 0, 0, "passed")])
    assert err(consumer, "--history", h, "--run-id", str(rid)) == (
        f"{consumer} is passed in run {rid} but ran first in its worker (gw3): nothing ran before it to bisect")
