"""``suitefit sweep``: classification, the budgeted pool, and a planted suite swept for real."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from diagnose_planted import DEPENDENTS, FLAKY, VICTIMS, write_planted_suite

from suitefit.diagnose.pytest_runs import PytestResult
from suitefit.diagnose.sweep import classify, run_pool
from suitefit.history import History

SUITEFIT = [sys.executable, "-m", "suitefit"]


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SUITEFIT, *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def test_classify_names_each_kind_and_ignores_the_rest() -> None:
    suite = {"a::v": "failed", "a::d": "passed", "a::f": "passed", "a::ok": "passed",
             "a::bad": "failed", "a::skip": "skipped", "a::gone": "passed", "b::x": "error"}
    alone = {"a::v": ["passed", "passed"], "a::d": ["error", "failed"], "a::f": ["passed", "failed"],
             "a::ok": ["passed"], "a::bad": ["failed"], "a::skip": ["skipped"], "b::x": ["xfailed"],
             "only::alone": ["failed"]}
    got = {(f.kind, f.nodeid) for f in classify(suite, alone)}
    assert got == {("victim", "a::v"), ("victim", "b::x"), ("dependent", "a::d"), ("flaky", "a::f")}


def test_pool_keeps_within_jobs_and_memory() -> None:
    lock = threading.Lock()
    now = {"n": 0, "mb": 0.0}
    peak = {"n": 0, "mb": 0.0}
    mem = {"big": 700.0, "f1": 300.0, "f2": 300.0, "f3": 300.0, "f4": 300.0}

    def run(file: str, rep: int) -> PytestResult:
        with lock:
            now["n"] += 1
            now["mb"] += mem[file]
            peak["n"] = max(peak["n"], now["n"])
            peak["mb"] = max(peak["mb"], now["mb"])
        time.sleep(0.05)
        with lock:
            now["n"] -= 1
            now["mb"] -= mem[file]
        return PytestResult([], 0, 0.0, 0.0, 0.0)

    tasks = [(f, 0) for f in mem]
    res = run_pool(tasks, run, jobs=3, budget_mb=1000.0, mem=mem)
    assert set(res) == set(tasks)
    assert peak["mb"] <= 1000.0 and peak["n"] <= 3
    assert peak["n"] >= 2  # it did run in parallel
    peak.update(n=0, mb=0.0)
    run_pool([("big", 0), ("f1", 0)], run, jobs=4, budget_mb=500.0, mem=mem)  # bigger than the budget
    assert peak["n"] == 1


@pytest.fixture(scope="module", autouse=True)
def _lean_child_pytest() -> Iterator[None]:
    """The planted suites use no hypothesis: not importing its plugin in each child pytest
    cuts their CPU time by two thirds on this shared 2-core machine."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTEST_ADDOPTS", "-p no:hypothesispytest")
        yield


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_planted_suite(tmp_path_factory.mktemp("planted"))


def test_sweep_finds_every_planted_case_and_nothing_else_three_times(planted: Path) -> None:
    history = planted / "h.sqlite"
    expected = ({("victim", n) for n in VICTIMS} | {("dependent", n) for n in DEPENDENTS}
                | {("flaky", n) for n in FLAKY})
    for attempt in range(3):
        p = cli("sweep", "--repeat", "2", "--jobs", "2", "--history", str(history), "--json", cwd=planted)
        assert p.returncode == 1, p.stderr
        data = json.loads(p.stdout)
        got = {(f["kind"], f["nodeid"]) for f in data["findings"]}
        assert got == expected, f"attempt {attempt + 1}"
        assert data["suite_made"] is (attempt == 0)
        assert data["files"] == 7 and len(data["alone_runs"]) == 14
    with History(history) as h:
        sweeps = h.runs(kind="sweep")
        assert len(sweeps) == 42
        one = sweeps[0]
        assert one.meta_dict["sweep_of"] == 1 and h.tests(one.id)
    p = cli("sweep", "--history", str(history), cwd=planted)
    assert p.returncode == 1
    assert "victim    test_e_env_victim.py::test_mode_is_normal: failed in the suite, passed alone" in p.stdout


def test_a_clean_suite_exits_zero(tmp_path: Path) -> None:
    (tmp_path / "test_one.py").write_text("def test_a():\n    pass\n")
    (tmp_path / "test_two.py").write_text("def test_b():\n    pass\n")
    p = cli("sweep", "--history", str(tmp_path / "h.sqlite"), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "no order dependencies or flaky tests found" in p.stdout


def test_sweep_bad_input_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "test_one.py").write_text("def test_a():\n    pass\n")
    h = tmp_path / "h.sqlite"
    p = cli("sweep", "--run-id", "4", "--history", str(h), cwd=tmp_path)
    assert p.returncode == 2 and p.stderr.strip() == f"suitefit: error: no history at {h}: run `suitefit profile` first"
    History(h).close()
    p = cli("sweep", "--run-id", "4", "--history", str(h), cwd=tmp_path)
    assert p.returncode != 0 and p.stderr.strip() == f"suitefit: error: no run 4 in history {h}"
    p = cli("sweep", "--history", str(h), "--", "--no-such-pytest-flag", cwd=tmp_path)
    assert p.returncode != 0 and "Traceback" not in p.stderr
    last = p.stderr.strip().splitlines()[-1]  # progress lines may precede it
    assert last.startswith("suitefit: error: pytest exited 4") and "--no-such-pytest-flag" in last


def test_a_file_that_only_imports_after_another_is_dependent(tmp_path: Path) -> None:
    """Collection order: a module-level setting made by an earlier file's import."""
    (tmp_path / "test_a_sets.py").write_text("import os\nos.environ['SF_URL'] = 'x'\n\ndef test_a():\n    pass\n")
    (tmp_path / "test_b_needs.py").write_text(
        "import os\nURL = os.environ['SF_URL']\n\ndef test_b1():\n    pass\n\ndef test_b2():\n    pass\n")
    p = cli("sweep", "--history", str(tmp_path / "h.sqlite"), "--json", cwd=tmp_path)
    assert p.returncode == 1, p.stderr
    got = {(f["kind"], f["nodeid"], tuple(f["alone"])) for f in json.loads(p.stdout)["findings"]}
    assert got == {("dependent", "test_b_needs.py::test_b1", ("error",)),
                   ("dependent", "test_b_needs.py::test_b2", ("error",))}
    p = cli("bisect", "test_b_needs.py::test_b1", "--history", str(tmp_path / "h.sqlite"), "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert (res["role"], res["culprit"], res["alone_outcome"]) == ("provider", "test_a_sets.py::test_a", "error")


def test_sweep_bisect_remembers_each_planted_pair_and_no_flaky_one(tmp_path: Path) -> None:
    root = write_planted_suite(tmp_path)
    history = root / "h.sqlite"
    p = cli("sweep", "--bisect", "--jobs", "2", "--history", str(history), "--json", cwd=root)
    assert p.returncode == 1, p.stderr
    data = json.loads(p.stdout)
    assert {f["nodeid"] for f in data["findings"] if f["kind"] == "flaky"} == FLAKY
    with History(history) as h:
        learned = {(c.test, c.kind, c.culprit) for c in h.constraints()}
    assert learned == ({(v, "polluter", c) for v, c in VICTIMS.items()}
                       | {(d, "provider", c) for d, c in DEPENDENTS.items()}), data["learned"]
    shown = cli("plan", "--constraints", "--history", str(history), cwd=root)
    assert shown.returncode == 0 and len(shown.stdout.splitlines()) == 4, shown.stdout + shown.stderr
