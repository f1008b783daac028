"""`suitefit run` end to end: a first run without history, a planned second run, bad input."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from clihelp import assert_one_line_error, json_out, suitefit
from together import start_together
from venvs import OLDEST, PYTEST_92, make_venv

from suitefit.history import History

REC = """
import json, os, time
def record(name):
    with open(os.environ["WHERE_LOG"], "a") as f:
        f.write(json.dumps({"test": name, "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
                            "t": time.time()}) + "\\n")
"""


def project(root: Path, extra_toml: str = "") -> Path:
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "rec.py").write_text(REC)
    (root / "pyproject.toml").write_text(textwrap.dedent("""
        [tool.pytest.ini_options]
        testpaths = ["tests"]
        pythonpath = ["tests"]
        """) + extra_toml)
    for i in range(6):
        (root / "tests" / f"test_f{i}.py").write_text(textwrap.dedent(f"""
            import time, pytest
            from rec import record
            @pytest.mark.parametrize("i", range(3))
            def test_x(i):
                record("f{i}")
                time.sleep(0.05)
            """))
    return root


def test_first_run_then_a_planned_run_that_keeps_declared_groups(tmp_path: Path) -> None:
    project(tmp_path, '\n[tool.suitefit]\ngroups = { pair = ["tests/test_f4.py", "tests/test_f1.py"] }\n')
    env = {"WHERE_LOG": str(tmp_path / "where.jsonl")}
    first = suitefit("run", "--", "-q", cwd=tmp_path, env=env)
    assert first.returncode == 0, first.stderr
    assert "no measured runs in the history yet" in first.stderr
    second = suitefit("run", "--", "-q", cwd=tmp_path, env=env)
    assert second.returncode == 0, second.stderr
    assert "no measured runs" not in second.stderr
    assert "suitefit: plan:" in second.stderr and "predicted" in second.stderr
    with History(tmp_path / ".suitefit" / "history.sqlite") as h:
        runs = h.runs()
        assert [r.kind for r in runs] == ["run", "run"]
        plan = runs[0].plan_dict
        assert plan is not None and plan["workers"] >= 1
        assert any(u["files"] == ["tests/test_f4.py", "tests/test_f1.py"] for u in plan["units"])
        assert runs[0].collected == 18
    rows = [json.loads(x) for x in (tmp_path / "where.jsonl").read_text().splitlines()]
    second_rows = rows[18:]
    pair = sorted((r for r in second_rows if r["test"] in ("f4", "f1")), key=lambda r: r["t"])
    assert len({r["worker"] for r in pair}) == 1
    assert [r["test"] for r in pair] == ["f4"] * 3 + ["f1"] * 3


def test_a_run_of_part_of_the_suite_says_so_and_teaches_no_prediction_error(tmp_path: Path) -> None:
    # The plan predicts the files it plans; a run of `-k` picks ran less. Its closing line
    # says so, and its error against the prediction is not one the next plans' headroom
    # learns from (costs._wall_errors). Path arguments instead make the plan theirs.
    from suitefit.costs import build_cost_model

    project(tmp_path)
    env = {"WHERE_LOG": str(tmp_path / "where.jsonl")}
    for _ in range(2):
        assert suitefit("run", "--", "-q", cwd=tmp_path, env=env).returncode == 0
    with History(tmp_path / ".suitefit" / "history.sqlite") as h:
        errors = build_cost_model(h).wall_errors
    assert len(errors) == 1  # the second run, planned from the first
    some = suitefit("run", "--", "-q", "-k", "0", cwd=tmp_path, env=env)
    fewer = suitefit("run", "--", "-q", "-k", "not f2", cwd=tmp_path, env=env)
    assert some.returncode == 0 and fewer.returncode == 0, some.stderr + fewer.stderr
    # `-k 0`: all of test_f0.py (its name matches), the [0] test of the other five
    assert "; 5 file(s) ran only in part: the plan predicted it all" in some.stderr, some.stderr
    assert "; 5 of the plan's 6 files ran: the plan predicted it all" in fewer.stderr, fewer.stderr
    new = tmp_path / "tests" / "test_new.py"  # never measured: the run will find it
    new.write_text("def test_n():\n    pass\n")
    fresh = suitefit("plan", "--", "tests/test_new.py", cwd=tmp_path)
    new.unlink()
    assert fresh.returncode == 0 and ("suitefit: plan: the paths given select none of the 6 measured files: "
                                      "the whole suite is planned") in fresh.stderr, fresh.stderr
    gone = suitefit("plan", "--", "-q", "tests/test_gone.py", cwd=tmp_path)
    assert gone.returncode == 0 and ("suitefit: plan: no file or folder tests/test_gone.py here: the whole "
                                     "suite is planned") in gone.stderr, gone.stderr
    previewed = suitefit("plan", "--json", "--", "-q", "tests/test_f2.py", cwd=tmp_path)
    assert previewed.returncode == 0, previewed.stderr
    one = suitefit("run", "--", "-q", "tests/test_f2.py", cwd=tmp_path, env=env)
    assert one.returncode == 0, one.stderr
    selected = "suitefit: plan: the paths given select 1 of the 6 files (3 of 18 tests, 17%): the plan is theirs"
    assert selected in one.stderr and selected in previewed.stderr, previewed.stderr
    assert "suitefit: plan: 1 worker(s)" in one.stderr and "the plan predicted it all" not in one.stderr
    with History(tmp_path / ".suitefit" / "history.sqlite") as h:
        runs = h.runs()
        assert [bool(r.meta_dict.get("part_of_plan")) for r in runs] == [False, True, True, False, False]
        # it collected part of the suite: its start-up and end are not read as the suite's
        assert [bool(r.meta_dict.get("paths_given")) for r in runs] == [True, False, False, False, False]
        assert [u["files"] for u in runs[0].plan_dict["units"]] == [["tests/test_f2.py"]]
        # `suitefit plan` with the run's arguments shows the plan that run made
        shown = json.loads(previewed.stdout)
        assert (shown["units"], shown["workers"]) == (runs[0].plan_dict["units"], runs[0].plan_dict["workers"])
        assert build_cost_model(h).wall_errors == errors  # neither part's error is learned
        assert h.partial_files([r.id for r in runs]) == {(runs[2].id, f"tests/test_f{i}.py") for i in range(1, 6)}
    md = {i: suitefit("report", str(i), "--markdown", cwd=tmp_path).stdout for i in (2, 3)}
    assert "| plan: compared | no: this run ran part of the plan's files" in md[3], md[3]
    assert "plan: compared" not in md[2] and "| plan: wall |" in md[2], md[2]


def test_a_suite_always_run_with_the_same_selection_is_compared_with_its_predictions(tmp_path: Path) -> None:
    # A CI that always runs `-m "not slow"` (here `-k 0`) measures its files in part, and its
    # plans predict them so: each run is what its plan predicted, and the next plans learn
    # from its error. A run that selects otherwise than what the plan's files were measured
    # with is still part of it.
    from suitefit.costs import build_cost_model

    project(tmp_path)
    env = {"WHERE_LOG": str(tmp_path / "where.jsonl")}
    alike = [suitefit("run", "--", "-q", "-k", "0", cwd=tmp_path, env=env) for _ in range(3)]
    assert all(r.returncode == 0 for r in alike), [r.stderr for r in alike]
    assert not any("ran only in part" in r.stderr for r in alike), alike[-1].stderr
    other = suitefit("run", "--", "-q", "-k", "1", cwd=tmp_path, env=env)
    assert other.returncode == 0, other.stderr
    # test_f1.py now runs whole; test_f0.py, whole in every run before, in part
    assert "; 1 file(s) ran only in part: the plan predicted it all" in other.stderr, other.stderr
    with History(tmp_path / ".suitefit" / "history.sqlite") as h:
        runs = h.runs()  # newest first
        assert [bool(r.meta_dict.get("part_of_plan")) for r in runs] == [True, False, False, False]
        assert sorted(runs[1].plan_dict["measured"]["partial"]) == [f"tests/test_f{i}.py" for i in range(1, 6)]
        assert len(build_cost_model(h).wall_errors) == 2  # the two planned from measurements


HANDED_OVER = """
import json, os, subprocess, sys

def test_what_pytest_sees():
    import helper  # the working directory first on sys.path, as `python -m pytest` puts it
    # another command reading the history now must find this run's owner alive (the plan was
    # made in a child process that has exited since)
    listed = subprocess.run([sys.executable, "-m", "suitefit", "history", "--json"], capture_output=True,
                            text=True, check=True)
    with open(os.environ["SEEN"], "w") as f:
        json.dump({"pid": os.getpid(), "argv0": sys.argv[0], "helper": helper.VALUE,
                   "stdin": os.readlink("/proc/self/fd/0"), "omp": os.environ.get("OMP_NUM_THREADS"),
                   "cli": "suitefit.cli.handover" in sys.modules, "click": "click" in sys.modules,
                   "planner": "suitefit.plan.planner" in sys.modules or "suitefit.costs" in sys.modules,
                   "status": json.loads(listed.stdout)[0]["status"]}, f)

def test_fails():
    assert os.environ.get("FAIL") != "1"
"""


def test_pytest_runs_in_the_commands_own_process_as_python_m_pytest(tmp_path: Path) -> None:
    """`suitefit run` hands its process to pytest (no second interpreter, no exec; the command
    line is parsed and the plan made in a child forked before click is imported): from the installed console script, a test sees what
    `python -m pytest` gives it, the run's owner is that process, pytest warns of nothing it
    imported first, and pytest's exit status is the command's."""

    script = Path(sys.executable).with_name("suitefit")
    assert script.exists(), script
    (tmp_path / "helper.py").write_text("VALUE = 7\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_env.py").write_text(HANDED_OVER)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "OMP_", "MKL_", "OPENBLAS_", "NUMEXPR_"))}
    env["SEEN"] = str(tmp_path / "seen.json")
    for fail, rc in (("0", 0), ("1", 1)):
        proc = subprocess.Popen([str(script), "run", "--workers", "1", "--", "-q", "-p", "no:cacheprovider"],
                                cwd=tmp_path, env={**env, "FAIL": fail}, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == rc, out + err
        seen = json.loads((tmp_path / "seen.json").read_text())
        assert seen["pid"] == proc.pid and seen["cli"], "pytest ran in another process or interpreter"
        assert seen["helper"] == 7 and seen["stdin"] == "/dev/null"
        assert seen["omp"] is None  # one worker: the thread pools as plain pytest has them
        assert seen["status"] == "running", seen  # not settled as crashed while it runs
        assert not seen["planner"], "the plan was made in this process, not beside it"
        assert not seen["click"], "the command line was parsed in this process, not in the planning child"
        assert seen["argv0"].endswith(os.path.join("pytest", "__main__.py"))
        assert "Warning" not in out, out  # e.g. PytestAssertRewriteWarning on suitefit's package
        assert "Traceback" not in err, err


POOLS = """
import json, os, time
import pytest
@pytest.mark.parametrize("i", range(2))
def test_pools(i):
    time.sleep(0.5)
    with open(os.environ["POOLS_LOG"], "a") as f:
        f.write(json.dumps({"worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
                            **{v: os.environ.get(v) for v in THREAD_VARS}}) + "\\n")
"""


def test_thread_pools_are_shared_out_among_workers_and_left_alone_for_one(tmp_path: Path) -> None:
    """BLAS/OpenMP pools: a one-worker plan runs its tests as plain pytest would (the variables
    unset, so the libraries size their pools to the machine); with workers each worker's pools get
    CPUs / workers threads (four threads on two CPUs made plain `pytest -n 2` on a torch suite
    take 1.7-2x as long); a variable the user set is theirs, in every case."""
    from suitefit.budget import detect_cpus
    from suitefit.threads import THREAD_VARS

    (tmp_path / "tests").mkdir()
    for name in ("a", "b"):  # two units: one a worker (one file of four tests was one unit, unless chunked)
        (tmp_path / "tests" / f"test_pools_{name}.py").write_text(f"THREAD_VARS = {THREAD_VARS!r}\n" + POOLS)
    start_together(tmp_path / "tests")  # each worker gets one file, however late the second starts
    log = tmp_path / "pools.jsonl"
    base = {k: v for k, v in os.environ.items()
            if k not in THREAD_VARS and not k.startswith(("PYTEST_XDIST", "PYTEST_ADDOPTS"))}
    share = str(max(1, detect_cpus()[0] // 2))

    def seen(workers: int, **env: str) -> list[dict[str, str | None]]:
        log.unlink(missing_ok=True)
        res = subprocess.run([sys.executable, "-m", "suitefit", "run", "--workers", str(workers), "--",
                              "-q", "-p", "no:cacheprovider"], cwd=tmp_path, text=True, capture_output=True,
                             env={**base, "POOLS_LOG": str(log), **env}, timeout=300)
        assert res.returncode == 0, res.stdout[-1500:] + res.stderr[-1500:]
        rows = [json.loads(x) for x in log.read_text().splitlines()]
        assert len(rows) == 4, rows
        return rows

    one = seen(1)
    assert {r["worker"] for r in one} == {"main"}
    assert all(r[v] is None for r in one for v in THREAD_VARS), one
    two = seen(2)
    assert {r["worker"] for r in two} == {"gw0", "gw1"}
    assert all(r[v] == share for r in two for v in THREAD_VARS), (share, two)
    mine = seen(2, OMP_NUM_THREADS="3")
    assert all(r["OMP_NUM_THREADS"] == "3" and r["OPENBLAS_NUM_THREADS"] == share for r in mine), mine
    assert all(r["OMP_NUM_THREADS"] == "3" and r["MKL_NUM_THREADS"] is None for r in seen(1, OMP_NUM_THREADS="3"))
    # xdist's controller's own CPU is recorded where there is one (costs.controller_per_test)
    with History(tmp_path / ".suitefit" / "history.sqlite") as h:
        cpu = {r.id: (r.workers, r.meta_dict.get("controller_cpu_s")) for r in h.runs()}
    assert sorted(w for w, _ in cpu.values()) == [1, 1, 2, 2], cpu
    assert all((c is None) if w == 1 else (isinstance(c, float) and c > 0) for w, c in cpu.values()), cpu


def test_threads_per_worker_share_the_cpus_out() -> None:
    from suitefit.threads import pin_threads, threads_per_worker

    assert [threads_per_worker(16, w) for w in (1, 2, 4, 16, 32)] == [None, 8, 4, 1, 1]
    assert threads_per_worker(2, 3) == 1 and threads_per_worker(3, 2) == 1
    env = {"MKL_NUM_THREADS": "6"}
    assert pin_threads(env, 4) == ["OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS"]
    assert env == {"MKL_NUM_THREADS": "6", "OMP_NUM_THREADS": "4", "OPENBLAS_NUM_THREADS": "4",
                   "NUMEXPR_NUM_THREADS": "4"}
    assert pin_threads(env := {}, None) == [] and env == {}


def test_a_long_pytest_command_line_comes_back_whole_from_the_planning_child(tmp_path: Path) -> None:
    """The plan's child hands pytest's arguments back through a pipe: 200 KiB of them (more
    than a pipe holds) arrive whole, the last one included."""
    project(tmp_path)
    many = [f"--deselect=tests/test_nope_{i:05d}_{'x' * 40}.py::t" for i in range(3000)]
    res = suitefit("run", "--workers", "1", "--", "-q", *many, "--deselect=tests/test_f5.py",
                   cwd=tmp_path, env={"WHERE_LOG": str(tmp_path / "where.jsonl")})
    assert res.returncode == 0, res.stderr[-2000:]
    assert "15 passed" in res.stdout and "3 deselected" in res.stdout, res.stdout[-500:]


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    project(tmp_path)
    assert_one_line_error(suitefit("run", "--", "-n", "3", cwd=tmp_path), "conflicts with the plan")
    assert_one_line_error(suitefit("run", "--", "--dist=load", cwd=tmp_path), "conflicts with the plan")
    assert_one_line_error(suitefit("run", "--workers", "0", cwd=tmp_path), "positive integer")
    assert_one_line_error(suitefit("run", "--memory-budget", "lots", cwd=tmp_path), "not a size")
    assert_one_line_error(suitefit("run", "--grace", "-1", cwd=tmp_path), "--grace")
    ok = suitefit("run", "--", "-q", cwd=tmp_path, env={"WHERE_LOG": str(tmp_path / "w")})
    assert ok.returncode == 0, ok.stderr
    # now the history knows a worker's baseline: a budget below it cannot be met
    assert_one_line_error(suitefit("run", "--memory-budget", "20MB", cwd=tmp_path), "below one worker")
    with History(tmp_path / ".suitefit" / "history.sqlite") as h:
        assert len(h.runs()) == 1  # the refused runs recorded nothing and lost nothing


def test_no_tests_is_an_error_not_a_pass(tmp_path: Path) -> None:
    project(tmp_path)
    res = suitefit("run", "--", "-k", "nothing_matches", cwd=tmp_path, env={"WHERE_LOG": str(tmp_path / "w")})
    assert_one_line_error(res, "no tests")
    assert res.returncode == 5


def test_a_dead_worker_is_named_by_the_cli(tmp_path: Path) -> None:
    project(tmp_path)
    (tmp_path / "tests" / "test_die.py").write_text(
        "import os, signal, time\ndef test_dies():\n    time.sleep(0.3)\n    os.kill(os.getpid(), signal.SIGKILL)\n")
    res = suitefit("run", "--workers", "2", "--", "-q", cwd=tmp_path, env={"WHERE_LOG": str(tmp_path / "w")})
    line = assert_one_line_error(res, "worker gw", "died (signal 9 SIGKILL)", "tests/test_die.py::test_dies")
    assert "last measured memory" in line


def test_a_run_whose_pytest_was_killed_is_settled_not_left_running(tmp_path: Path) -> None:
    # `suitefit run` becomes pytest, so nothing is left to record a SIGKILL of that process:
    # the next command that reads the history closes the run as crashed.
    project(tmp_path)
    (tmp_path / "tests" / "test_kill.py").write_text(
        "import os, signal\ndef test_kills_its_own_process():\n    os.kill(os.getpid(), signal.SIGKILL)\n")
    res = suitefit("run", "--workers", "1", "--", "-q", cwd=tmp_path, env={"WHERE_LOG": str(tmp_path / "w")})
    assert res.returncode == -9
    with History(tmp_path / ".suitefit" / "history.sqlite") as h:
        assert h.runs()[0].status == "running"  # what the kill left
    listed = suitefit("history", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    with History(tmp_path / ".suitefit" / "history.sqlite") as h:
        run = h.runs()[0]
    assert run.status == "crashed" and "ended without recording an end" in run.meta_dict["ended_unrecorded"]
    again = suitefit("run", "--workers", "1", "--", "-q", "-k", "not kills", cwd=tmp_path,
                     env={"WHERE_LOG": str(tmp_path / "w")})
    assert again.returncode == 0, again.stderr
    with History(tmp_path / ".suitefit" / "history.sqlite") as h:
        assert [r.status for r in h.runs()] == ["passed", "crashed"]  # a live run is never settled


def test_pytest_rejecting_its_arguments_closes_the_run_with_one_line(tmp_path: Path) -> None:
    # pytest stops before any plugin is configured; suitefit's run (opened before the exec)
    # is closed at exit, with one line after pytest's own usage error.
    project(tmp_path)
    res = suitefit("run", "--", "--no-such-pytest-flag", cwd=tmp_path, env={"WHERE_LOG": str(tmp_path / "w")})
    assert res.returncode == 4
    assert "unrecognized arguments: --no-such-pytest-flag" in res.stderr
    assert_one_line_error(res, "pytest stopped before its session started")
    with History(tmp_path / ".suitefit" / "history.sqlite") as h:
        (run,) = h.runs()
    assert run.status == "error"


KILLED_SUITE = {
    # First in the first plan's order: its worker queues the next file behind it, which
    # is put back when the worker dies; the other worker is mid-file when that happens.
    "test_a_killed.py": "import os, signal, time\ndef test_gets_oom_killed():\n"
                        "    time.sleep(0.5)\n    os.kill(os.getpid(), signal.SIGKILL)\n",
    **{f"test_f{i}.py": "import time, pytest\n@pytest.mark.parametrize('i', range(20))\n"
                        "def test_x(i):\n    time.sleep(0.05)\n" for i in range(3)},
}


def check_killed_run(res: subprocess.CompletedProcess[str]) -> None:
    out = res.stdout + res.stderr
    assert "INTERNALERROR" not in out and "Traceback" not in out, out
    assert res.returncode == 1, out  # the dead worker's test failed; not pytest's internal error (3)
    line = assert_one_line_error(res, "worker gw", "died (signal 9 SIGKILL)",
                                 "tests/test_a_killed.py::test_gets_oom_killed")
    assert res.stderr.strip().splitlines()[-1] == line  # suitefit's lines close the run


def killed_project(root: Path) -> Path:
    (root / "tests").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    for name, body in KILLED_SUITE.items():
        (root / "tests" / name).write_text(body)
    return root


def test_a_sigkilled_worker_ends_with_suitefits_lines_only(tmp_path: Path) -> None:
    killed_project(tmp_path)
    check_killed_run(suitefit("run", "--workers", "2", "--", "-p", "no:cacheprovider", cwd=tmp_path))


@pytest.mark.slow
def test_a_sigkilled_worker_ends_with_suitefits_lines_only_on_the_oldest_pair(tmp_path: Path) -> None:
    python = make_venv(OLDEST, with_suitefit=True)
    killed_project(tmp_path)
    e = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SUITEFIT_"))}
    res = subprocess.run([str(python.parent / "suitefit"), "run", "--workers", "2", "--", "-p", "no:cacheprovider"],
                         cwd=tmp_path, env=e, text=True, capture_output=True, timeout=180)
    assert "pytest-8.0.2" in res.stdout and "xdist-3.5.0" in res.stdout, res.stdout
    check_killed_run(res)


@pytest.mark.slow
@pytest.mark.parametrize("rerunfailures", ["16.1", "16.7"])
def test_a_test_rerun_by_pytest_rerunfailures_counts_once(tmp_path: Path, rerunfailures: str) -> None:
    # Each try of a rerun test sends its reports: 16.7 a teardown for every try, 16.1 none for
    # the tries it reran. The count of tests done read 40/38 under 16.7.
    python = make_venv((*PYTEST_92, f"pytest-rerunfailures=={rerunfailures}"), with_suitefit=True)
    project(tmp_path)
    (tmp_path / "tests" / "test_flaky.py").write_text(textwrap.dedent("""
        import os, pathlib
        def test_flaky():
            mark = pathlib.Path(os.environ["FLAKY_MARK"])
            first = not mark.exists()
            mark.touch()
            assert not first, "fails on its first try"
        """))
    env = {"WHERE_LOG": str(tmp_path / "where.jsonl"), "FLAKY_MARK": str(tmp_path / "tried")}
    res = suitefit("run", "--workers", "2", "--", "-q", "--reruns", "2", "-p", "no:cacheprovider", cwd=tmp_path,
                   env=env, python=str(python))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "19 passed, 1 rerun" in res.stdout, res.stdout
    assert "suitefit: done 19/19 collected tests" in res.stderr, res.stderr


def test_stopping_at_the_first_failure_under_xdist_is_no_internal_error(tmp_path: Path) -> None:
    # `-x`: xdist shuts every worker down at the first failure; work the scheduler sent after
    # that was never run and made xdist's `workerfinished` assert (exit 3, INTERNALERROR).
    killed_project(tmp_path)
    (tmp_path / "tests" / "test_a_killed.py").write_text("import time\ndef test_fails():\n"
                                                         "    time.sleep(0.5)\n    assert 0\n")
    res = suitefit("run", "--workers", "2", "--", "-x", "-p", "no:cacheprovider", cwd=tmp_path)
    out = res.stdout + res.stderr
    assert "INTERNALERROR" not in out and "Traceback" not in out, out
    assert res.returncode == 2 and "stopping after 1 failures" in out, out  # xdist's own stop


def test_a_crash_in_a_one_worker_plan_is_named_afterwards(tmp_path: Path) -> None:
    # The tests run in the pytest process itself: its SIGKILL leaves only the journal. The
    # killed test starts right after a quick one, well inside the journal's write interval.
    project(tmp_path)
    (tmp_path / "tests" / "test_z_kill.py").write_text(
        "import os, signal, time\n"
        "def test_quick():\n    pass\n"
        "def test_kills_its_own_process():\n    ballast = bytearray(64 * 2**20)\n"
        "    ballast[::4096] = b'x' * len(ballast[::4096])\n    time.sleep(0.6)  # measured, then killed\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n")
    res = suitefit("run", "--workers", "1", "--", "-q", cwd=tmp_path, env={"WHERE_LOG": str(tmp_path / "w")})
    assert res.returncode == -9
    killed = "tests/test_z_kill.py::test_kills_its_own_process"
    # said at once, by the sampler process: the part of the run that outlives pytest's (a
    # job's log may be all that survives a runner killed for memory)
    said = [line for line in res.stderr.splitlines() if "ended before its session did" in line]
    assert len(said) == 1 and f"while running {killed};" in said[0], res.stderr
    held = re.search(r"the tree held (\d+) MiB at the last reading", said[0])
    assert held and int(held.group(1)) > 64, said  # the ballast included
    kept = tmp_path / ".suitefit"
    assert sorted(p.name for p in kept.glob("*.json")) == ["inflight-1.json", "plan-1.json"]  # nobody ended it
    listed = suitefit("history", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert list(kept.glob("*.json")) == []  # settled: what the journal named is in the history now
    assert re.search(rf"run 1 crashed while running {re.escape(killed)} \(main, \d+ MiB", listed.stdout), listed.stdout
    (run,) = json_out(suitefit("history", "--json", cwd=tmp_path))
    assert run["status"] == "crashed"
    assert [(x["worker"], x["nodeid"]) for x in run["crashed_in"]] == [("main", killed)]
    assert run["crashed_in"][0]["mb"] > 64  # its last measured memory, the ballast included
    md = suitefit("report", "--markdown", "-o", "-", cwd=tmp_path)
    assert md.returncode == 0, md.stderr
    assert "**The run crashed.**" in md.stdout and f"`{killed}` on main (" in md.stdout, md.stdout
    html = suitefit("report", "-o", "-", cwd=tmp_path)
    assert html.returncode == 0, html.stderr
    assert killed in html.stdout and "the journal named no test in flight" not in html.stdout


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_job_terminated_as_a_whole_is_named_with_what_it_was_running(tmp_path: Path, workers: str) -> None:
    # A runner's cancel or timeout (GNU timeout, CI) sends SIGTERM to the whole process group:
    # pytest's process has no handler and ends at once, and nobody said in what. The sampler
    # process, terminated with it, says so (a one-worker plan's journal names the test)
    project(tmp_path)
    started = tmp_path / "started"
    (tmp_path / "tests" / "test_z_hangs.py").write_text(
        "import time\n"
        f"def test_hangs():\n    open({str(started)!r}, 'w').close()\n    time.sleep(60)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER",
                                                             "PYTEST_XDIST_WORKER_COUNT")}
    job = subprocess.Popen([sys.executable, "-m", "suitefit", "run", "--workers", workers, "--", "-q"],
                           cwd=tmp_path, env={**env, "WHERE_LOG": str(tmp_path / "w")}, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        end = time.monotonic() + 60
        while not started.exists() and time.monotonic() < end and job.poll() is None:
            time.sleep(0.05)
        assert started.exists(), job.communicate(timeout=5)
        os.killpg(job.pid, 15)
        _, err = job.communicate(timeout=60)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, 9)
    said = [line for line in err.splitlines() if "ended before its session did" in line]
    assert len(said) == 1 and "a SIGTERM to the whole job" in said[0], err
    named = "tests/test_z_hangs.py::test_hangs" if workers == "1" else "tests/test_z_hangs.py ("
    assert f"while running {named}" in said[0], said


def test_a_run_leaves_no_files_beside_the_history(tmp_path: Path) -> None:
    # `suitefit run` hands its plan to pytest in a file and keeps a journal for a run killed
    # mid-test; both are in the history once the run ends. Kept, a CI cache of .suitefit
    # gained two files a run, for good.
    project(tmp_path)
    env = {"WHERE_LOG": str(tmp_path / "w")}
    for workers in ("1", "2"):
        res = suitefit("run", "--workers", workers, "--", "-q", cwd=tmp_path, env=env)
        assert res.returncode == 0, res.stderr
        assert "ended before its session did" not in res.stderr  # the session ended it: nothing to say
    assert sorted(p.name for p in (tmp_path / ".suitefit").iterdir()) == ["history.sqlite"]
    (run, *_) = json_out(suitefit("history", "--json", cwd=tmp_path))
    assert run["id"] == 2 and run["status"] == "passed"


def test_a_killed_run_leaves_nothing_in_the_temp_dir(tmp_path: Path) -> None:
    # The sampler's FIFO and page live in a directory of their own; the session removes it at
    # its end, which a SIGKILL (a runner's memory limit) never reaches. The sampler process
    # outlives it by a moment and removes them. Before, each killed run left one behind.
    project(tmp_path)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {"WHERE_LOG": str(tmp_path / "w"), "TMPDIR": str(tmp)}
    ok = suitefit("run", "--workers", "1", "--", "-q", cwd=tmp_path, env=env)
    assert ok.returncode == 0, ok.stderr
    assert list(tmp.glob("suitefit-*")) == []
    (tmp_path / "tests" / "test_z_kill.py").write_text(
        "import os, signal\ndef test_kills_its_own_process():\n    os.kill(os.getpid(), signal.SIGKILL)\n")
    for workers in ("1", "2"):  # the tests in the pytest process; in xdist workers
        res = suitefit("run", "--workers", workers, "--", "-q", cwd=tmp_path, env=env)
        assert res.returncode != 0, res.stdout
    deadline = time.monotonic() + 10  # the sampler ends within its interval of the kill
    while list(tmp.glob("suitefit-*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(tmp.glob("suitefit-*")) == []


def test_a_test_killed_at_once_is_the_one_named(tmp_path: Path) -> None:
    # Killed within the journal's write interval of the test before it: the journal must
    # already name it, not the test before.
    project(tmp_path)
    (tmp_path / "tests" / "test_z_kill.py").write_text(
        "import os, signal\ndef test_quick():\n    pass\n"
        "def test_killed_at_once():\n    os.kill(os.getpid(), signal.SIGKILL)\n")
    res = suitefit("run", "--workers", "1", "--", "-q", cwd=tmp_path, env={"WHERE_LOG": str(tmp_path / "w")})
    assert res.returncode == -9
    (run,) = json_out(suitefit("history", "--json", cwd=tmp_path))
    assert [x["nodeid"] for x in run["crashed_in"]] == ["tests/test_z_kill.py::test_killed_at_once"]


def test_after_a_crash_a_one_worker_plan_runs_in_a_separate_worker_that_names_the_next(tmp_path: Path) -> None:
    project(tmp_path)
    (tmp_path / "tests" / "test_z_kill.py").write_text(
        "import os, signal\ndef test_kills_its_own_process():\n    os.kill(os.getpid(), signal.SIGKILL)\n")
    env = {"WHERE_LOG": str(tmp_path / "w")}
    first = suitefit("run", "--workers", "1", "--", "-q", cwd=tmp_path, env=env)
    assert first.returncode == -9 and "separate xdist worker" not in first.stderr  # nothing crashed before
    second = suitefit("run", "--workers", "1", "--", "-q", cwd=tmp_path, env=env)
    assert "suitefit: run 1 crashed while running tests/test_z_kill.py::test_kills_its_own_process (main, " \
        in second.stderr, second.stderr  # settled as it starts: what the journal named
    assert "one worker, run in a separate xdist worker: run 1 crashed" in second.stderr, second.stderr
    check_named = assert_one_line_error(second, "worker gw0 died (signal 9 SIGKILL)",
                                        "tests/test_z_kill.py::test_kills_its_own_process")
    assert check_named and second.returncode == 1
    assert "INTERNALERROR" not in second.stdout + second.stderr
    never = suitefit("run", "--workers", "1", "--separate-worker", "never", "--", "-q", cwd=tmp_path, env=env)
    assert never.returncode == -9 and "separate xdist worker" not in never.stderr


def test_a_peak_near_the_budget_alone_keeps_one_worker_in_pytests_process(tmp_path: Path) -> None:
    # A controller costs a start-up and a baseline: paid after a crash, not for a peak near
    # the budget (there its memory brings the kill closer, and the budget case ran 1.37x
    # slower than serial pytest with it).
    from dataclasses import replace

    from suitefit.cli.run import choose_separate_worker
    from suitefit.model import Budget, Plan, WorkerCost

    worker = WorkerCost(startup_s=1.0, baseline_mb=80.0)
    plan = Plan(workers=1, units=(), budget=Budget(1000.0, 2), predicted_wall_s=1.0, predicted_peak_mb=900.0,
                reasons=(), headroom_mb=50.0)
    with History(tmp_path / "h.sqlite") as h:
        assert choose_separate_worker("auto", plan, worker, h) == (False, "")
        rid = h.new_run("run", started=1.0)
        h.update_run(rid, status="crashed")
        sep, why = choose_separate_worker("auto", replace(plan, predicted_peak_mb=500.0), worker, h)
        assert sep and f"run {rid} crashed" in why
        sep, why = choose_separate_worker("auto", plan, worker, h)  # 900 + 80 > 1000 - 50
        assert not sep and "would not fit" in why
        # a controller measured at its peak counts as measured, not as a worker's baseline
        low = replace(plan, predicted_peak_mb=500.0)
        sep, why = choose_separate_worker("auto", low, worker, h, controller_mb=300.0)
        assert sep and "~300 MiB" in why  # 500 + 300 <= 1000 - 50
        sep, why = choose_separate_worker("auto", low, worker, h, controller_mb=460.0)
        assert not sep and "(~460 MiB) would not fit" in why  # 500 + 460 > 1000 - 50
