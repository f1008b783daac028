"""Early release of fixtures, with real processes: a session fixture's helper processes
hold memory; the release instruction after its last user must end them and return that
memory before the next file runs, run its finalizer once, keep a fixture the next test
still needs, and report a failing teardown as a pytest error.

Each test runs pytest in a subprocess on a throw-away suite whose tests write what they
see (pids alive, the tree's RSS, finalizer runs) to a notes file; the outer test reads
the notes and the history, never what was asked for.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from venvs import OLDEST, make_venv

from suitefit.history import History
from suitefit.model import Budget, Plan, Unit
from suitefit.release import ReleaseBoard, board_folder

HOLD_MB = 60  # per helper process; two helpers: the drop must be unmistakable

CONFTEST = """
import json, os, subprocess, sys
from pathlib import Path

import psutil
import pytest

NOTES = Path(os.environ["RELEASE_NOTES"])
HOLD = ("import sys, time; b = b'x' * (int(sys.argv[1]) << 20); "
        "sys.stdout.write('ready\\\\n'); sys.stdout.flush(); time.sleep(600)")


def note(**kw):
    with open(NOTES, "a") as f:
        f.write(json.dumps({"worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), **kw}) + "\\n")


def notes(event):
    return [n for n in map(json.loads, NOTES.read_text().splitlines()) if n["event"] == event]


def tree_mb():
    me = psutil.Process()
    total = 0
    for p in [me, *me.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total / 2**20


def alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.fixture(scope="session")
def pool():
    procs = [subprocess.Popen([sys.executable, "-c", HOLD, "HOLD_MB"], stdout=subprocess.PIPE)
             for _ in range(2)]
    for p in procs:
        assert p.stdout.readline() == b"ready\\n"
    note(event="pool_up", pids=[p.pid for p in procs])
    yield [p.pid for p in procs]
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait()
        p.stdout.close()
    note(event="pool_finalized")


@pytest.fixture(scope="session")
def broken():
    yield
    note(event="broken_finalized")
    print("broken says goodbye")
    raise RuntimeError("the teardown of broken fails")


def pytest_configure(config):
    spec = os.environ.get("RELEASE_STATIC")
    if spec:  # the one-process static mode, fed directly
        from suitefit.release import FixtureRelease

        config.pluginmanager.register(FixtureRelease.static(json.loads(spec)), "static-release")
""".replace("HOLD_MB", str(HOLD_MB))

POOL_FILE = """
from conftest import alive, note, tree_mb

def test_first(pool):
    assert all(alive(p) for p in pool)

def test_last(pool):
    assert all(alive(p) for p in pool)
    note(event="pool_in_use", file=__name__, mb=tree_mb(), pids=pool)
"""

FILES = {
    "conftest.py": CONFTEST,
    "test_1_pool.py": POOL_FILE,
    "test_2_pool.py": POOL_FILE,
    "test_3_broken.py": """
        def test_broken(broken):
            pass
    """,
    "test_4_after.py": """
        from conftest import alive, note, notes, tree_mb

        def test_after():
            (up,) = notes("pool_up")
            note(event="after", mb=tree_mb(), alive=[p for p in up["pids"] if alive(p)],
                 finalized=len(notes("pool_finalized")))
    """,
    "test_5_other.py": """
        import time

        def test_other():
            time.sleep(0.2)
    """,
}

# "after this test, release these fixtures"
AFTER = {
    "tests/test_1_pool.py::test_last": ["pool"],  # the next test (test_2_pool) needs it: kept
    "tests/test_2_pool.py::test_last": ["pool"],  # its last user: released
    "tests/test_3_broken.py::test_broken": ["broken"],  # its teardown raises
}
GROUP = [f"tests/{n}" for n in sorted(FILES) if n.startswith("test_") and n != "test_5_other.py"]


def write_suite(root: Path) -> None:
    (root / "tests").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n'
                                         'pythonpath = ["tests"]\n')
    for name, body in FILES.items():
        (root / "tests" / name).write_text(textwrap.dedent(body))


def write_plan(root: Path) -> Path:
    # One unit holds the pool files and the files after them, in this order, on one worker.
    plan = Plan(workers=2, units=(Unit("pool", tuple(GROUP), 1.0, 10.0),
                                  Unit("tests/test_5_other.py", ("tests/test_5_other.py",), 0.2, 1.0)),
                budget=Budget(memory_mb=20000, cpus=2), predicted_wall_s=1.0, predicted_peak_mb=0.0,
                reasons=("hand-written for a test",))
    p = root / "plan.json"
    p.write_text(json.dumps(plan.to_json()))
    return p


def pytest_env(root: Path, **extra: str) -> dict[str, str]:
    e = {**os.environ, "RELEASE_NOTES": str(root / "notes.jsonl"), **extra}
    for v in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"):  # ours, if run by xdist
        e.pop(v, None)
    return e


def run_with_board(root: Path, workers: list[str], *extra: str,
                   python: str = sys.executable) -> tuple[subprocess.CompletedProcess[str], int]:
    """A run under a plan, with the release instructions posted on its board before it starts."""
    write_suite(root)
    plan = write_plan(root)
    hist = root / "h.sqlite"
    with History(hist) as h:
        run_id = h.new_run("run", started=time.time())
    board = ReleaseBoard(board_folder(hist, run_id))
    for w in workers:  # the worker that gets the unit acts; the other never meets these tests
        for nodeid, names in AFTER.items():
            board.post(w, nodeid, names)
    res = subprocess.run(
        [python, "-m", "pytest", "-p", "no:cacheprovider", "--suitefit", f"--suitefit-history={hist}",
         f"--suitefit-run-id={run_id}", f"--suitefit-plan={plan}", "-rE", *extra],
        cwd=root, env=pytest_env(root), text=True, capture_output=True, timeout=180)
    return res, run_id


def read_notes(root: Path) -> list[dict]:
    return [json.loads(x) for x in (root / "notes.jsonl").read_text().splitlines()]


def check_behaviour(root: Path, res: subprocess.CompletedProcess[str]) -> str:
    """What every mode must show; returns the worker that ran the pool."""
    out = res.stdout + res.stderr
    notes = read_notes(root)
    kinds = [n["event"] for n in notes]
    # set up once: the release instruction after test_1_pool was not carried out (test_2 needs it)
    assert kinds.count("pool_up") == 1, out
    (up,) = [n for n in notes if n["event"] == "pool_up"]
    in_use = [n for n in notes if n["event"] == "pool_in_use"]
    assert [n["file"] for n in in_use] == ["test_1_pool", "test_2_pool"], out
    assert all(n["pids"] == up["pids"] for n in in_use)
    # right after its last user, before the next file's first test: processes gone, memory back
    (after,) = [n for n in notes if n["event"] == "after"]
    assert after["worker"] == up["worker"]
    assert after["alive"] == [], out
    assert after["finalized"] == 1, out
    held = max(n["mb"] for n in in_use)
    assert held - after["mb"] > 1.5 * HOLD_MB, (held, after["mb"])
    # finalizers ran once in the whole run: not again at the session's end
    assert kinds.count("pool_finalized") == 1, out
    assert kinds.count("broken_finalized") == 1, out
    # a failing teardown is pytest's error at the teardown of the test it was released after
    assert res.returncode == 1, out
    assert "ERROR at teardown of test_broken" in res.stdout, out
    assert "the teardown of broken fails" in res.stdout, out
    # inside pytest's capture of that teardown, like any finalizer's output
    err = res.stdout[res.stdout.index("ERROR at teardown of test_broken"):]
    assert "Captured stdout teardown" in err and "broken says goodbye" in err, out
    assert "released session fixture 'broken' on " in err and "its teardown failed" in err, out
    assert "src/suitefit/release.py" not in err, out  # the report starts at the user's code
    assert "7 passed, 1 error" in res.stdout, out
    return str(up["worker"])


def check_history(root: Path, run_id: int, worker: str) -> None:
    with History(root / "h.sqlite") as h:
        released = [(e.worker, e.nodeid, e.detail_dict) for e in h.events(run_id, "fixture_released")]
        kept = [(e.worker, e.nodeid, e.detail_dict) for e in h.events(run_id, "fixture_kept")]
    assert [(w, n, d["fixture"], d["ok"]) for w, n, d in released] == [
        (worker, "tests/test_2_pool.py::test_last", "pool", True),
        (worker, "tests/test_3_broken.py::test_broken", "broken", False),
    ]
    assert "the teardown of broken fails" in released[1][2]["error"]
    assert [(w, n, d["fixture"]) for w, n, d in kept] == [(worker, "tests/test_1_pool.py::test_last", "pool")]
    assert kept[0][2]["reason"] == "the next test, tests/test_2_pool.py::test_first, uses it"
    assert not board_folder(root / "h.sqlite", run_id).exists()  # the run removes its board


def check_summary(res: subprocess.CompletedProcess[str], worker: str) -> None:
    assert f"released fixture pool on {worker} after tests/test_2_pool.py::test_last in " in res.stdout
    assert (f"kept fixture pool on {worker} after tests/test_1_pool.py::test_last: the next test, "
            "tests/test_2_pool.py::test_first, uses it") in res.stdout


def test_release_under_xdist(tmp_path: Path) -> None:
    res, run_id = run_with_board(tmp_path, ["gw0", "gw1"], "-n", "2")
    worker = check_behaviour(tmp_path, res)
    assert worker in ("gw0", "gw1")
    check_history(tmp_path, run_id, worker)
    check_summary(res, worker)


def test_release_in_one_process(tmp_path: Path) -> None:
    res, run_id = run_with_board(tmp_path, ["main"])
    assert check_behaviour(tmp_path, res) == "main"
    check_history(tmp_path, run_id, "main")
    check_summary(res, "main")


def test_release_static_mode_without_a_board(tmp_path: Path) -> None:
    # No suitefit run at all: the plugin fed directly, as a one-process run under a plan is.
    write_suite(tmp_path)
    res = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rE"], cwd=tmp_path,
                         env=pytest_env(tmp_path, RELEASE_STATIC=json.dumps(AFTER)), text=True,
                         capture_output=True, timeout=180)
    assert check_behaviour(tmp_path, res) == "main"


def test_without_instructions_nothing_is_released(tmp_path: Path) -> None:
    # The control: the same suite with an empty board keeps the pool to the session's end,
    # so the checks above can tell a release from pytest's own teardown.
    write_suite(tmp_path)
    res = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider"], cwd=tmp_path,
                         env=pytest_env(tmp_path), text=True, capture_output=True, timeout=180)
    (after,) = [n for n in read_notes(tmp_path) if n["event"] == "after"]
    assert len(after["alive"]) == 2 and after["finalized"] == 0, res.stdout
    with pytest.raises(AssertionError):
        check_behaviour(tmp_path, res)


@pytest.mark.slow
@pytest.mark.parametrize("xdist", [True, False], ids=["n2", "one-process"])
def test_release_on_the_oldest_supported_pytest(tmp_path: Path, xdist: bool) -> None:
    python = make_venv(OLDEST, with_suitefit=True)
    out = subprocess.run([str(python), "-c", "import pytest, xdist; print(pytest.__version__, xdist.__version__)"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["8.0.2", "3.5.0"]
    workers = ["gw0", "gw1"] if xdist else ["main"]
    res, run_id = run_with_board(tmp_path, workers, *(["-n", "2"] if xdist else []), python=str(python))
    worker = check_behaviour(tmp_path, res)
    check_history(tmp_path, run_id, worker)


def test_board_lines_are_read_once_and_only_when_whole(tmp_path: Path) -> None:
    from suitefit.release import _BoardReader

    board = ReleaseBoard(tmp_path / "b")
    reader = _BoardReader(board.path("gw0"))
    assert reader.read_new() == []  # nothing posted yet: no file, no error
    board.post("gw0", "t.py::a", ["pool"])
    with open(board.path("gw0"), "a") as f:
        f.write('{"after": "t.py::b", "fix')  # a line still being written
    assert reader.read_new() == [("t.py::a", ["pool"])]
    with open(board.path("gw0"), "a") as f:
        f.write('tures": ["db"]}\n')
    board.post("gw0", "t.py::c", ["pool", "db"])
    assert reader.read_new() == [("t.py::b", ["db"]), ("t.py::c", ["pool", "db"])]
    assert reader.read_new() == []
    board.remove()
    assert not (tmp_path / "b").exists()


def test_a_package_fixture_is_released_inside_its_package(tmp_path: Path) -> None:
    # Package scope: pytest would end it when the run leaves the package; released, it ends
    # after its last user, before the package's other files, and only once.
    pkg = tmp_path / "tests" / "pkg"
    pkg.mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    (tmp_path / "tests" / "__init__.py").write_text("")
    static = CONFTEST[CONFTEST.index("def pytest_configure"):]  # the static plugin, as above
    (tmp_path / "tests" / "conftest.py").write_text("import json, os\n\n" + static)
    (pkg / "__init__.py").write_text("")
    (pkg / "conftest.py").write_text(textwrap.dedent("""
        import os, pytest

        @pytest.fixture(scope="package")
        def pkgpool():
            yield
            with open(os.environ["RELEASE_NOTES"], "a") as f:
                f.write("finalized\\n")
    """))
    (pkg / "test_a.py").write_text("def test_a(pkgpool):\n    pass\n")
    (pkg / "test_b.py").write_text(textwrap.dedent("""
        import os

        def test_b():
            with open(os.environ["RELEASE_NOTES"]) as f:
                assert f.read() == "finalized\\n"
    """))
    after = {"tests/pkg/test_a.py::test_a": ["pkgpool"]}
    res = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider"], cwd=tmp_path,
                         env=pytest_env(tmp_path, RELEASE_STATIC=json.dumps(after)), text=True,
                         capture_output=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (tmp_path / "notes.jsonl").read_text() == "finalized\n"  # once: not again at the package's end


LONG_FILE = """
from conftest import alive, note, notes, tree_mb

def test_1(pool):
    note(event="pool_in_use", file="long", mb=tree_mb(), pids=pool)

def test_2(pool):
    pass

def test_3():
    (up,) = notes("pool_up")
    note(event="after", mb=tree_mb(), alive=[p for p in up["pids"] if alive(p)],
         finalized=len(notes("pool_finalized")))

def test_4():
    pass
"""


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "whole-file"])
def test_a_chunk_that_ends_mid_file_releases_there(tmp_path: Path, chunked: bool) -> None:
    # A plan that splits a long file into chunks may end a unit mid-file: the worker then
    # looks at its board after each test of that file. A plan that keeps the file whole
    # does not, which is the control: the same instruction is not seen mid-file.
    (tmp_path / "tests").mkdir()
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n'
                                             'pythonpath = ["tests"]\n')
    (tmp_path / "tests" / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (tmp_path / "tests" / "test_long.py").write_text(textwrap.dedent(LONG_FILE))
    unit = {"files": ["tests/test_long.py"], "wall_s": 1.0, "peak_mb": 1.0}
    units = ([{**unit, "name": "long[1/2]", "chunk": [1, 2]}, {**unit, "name": "long[2/2]", "chunk": [2, 2]}]
             if chunked else [{**unit, "name": "long"}])
    plan = {"workers": 1, "units": units, "budget": {"memory_mb": 20000, "cpus": 1},
            "predicted_wall_s": 1.0, "predicted_peak_mb": 0.0, "reasons": []}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    hist = tmp_path / "h.sqlite"
    with History(hist) as h:
        run_id = h.new_run("run", started=time.time())
    ReleaseBoard(board_folder(hist, run_id)).post("main", "tests/test_long.py::test_2", ["pool"])
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--suitefit", f"--suitefit-history={hist}",
         f"--suitefit-run-id={run_id}", f"--suitefit-plan={tmp_path / 'plan.json'}"],
        cwd=tmp_path, env=pytest_env(tmp_path), text=True, capture_output=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    notes = read_notes(tmp_path)
    (after,) = [n for n in notes if n["event"] == "after"]
    if chunked:
        assert after["alive"] == [] and after["finalized"] == 1, res.stdout
    else:
        assert len(after["alive"]) == 2 and after["finalized"] == 0, res.stdout
    assert [n["event"] for n in notes].count("pool_finalized") == 1  # once, either way


def test_suitefit_run_releases_the_pool_after_its_last_user(tmp_path: Path) -> None:
    # The whole path: a serial profile measures the pool (it starts processes: expensive),
    # the plan groups its users and marks it releasable, the core decides the release when it
    # hands that worker its next unit, the adapter posts it, the worker finalizes it.
    files = {"conftest.py": CONFTEST, "test_1_pool.py": POOL_FILE,
             "test_2_pool.py": POOL_FILE + "\nimport time\ndef test_slow(pool):\n    time.sleep(0.6)\n"}
    # two long files start first; the pool unit comes next, then short files: whichever
    # worker runs the pool has more to run after it
    for i, sleep in enumerate((1.6, 1.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4)):
        files[f"test_{i + 4}_after.py"] = f"""
            import json, os, time
            from pathlib import Path
            from conftest import alive, note

            def test_takes_time():
                time.sleep({sleep})

            def test_after():
                p = Path(os.environ["RELEASE_NOTES"])
                rows = [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []
                ups = [r for r in rows if r["event"] == "pool_up"]
                note(event="after", alive=[q for u in ups for q in u["pids"] if alive(q)], ups=len(ups),
                     finalized=sum(r["event"] == "pool_finalized" for r in rows))
        """
    (tmp_path / "tests").mkdir()
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n'
                                             'pythonpath = ["tests"]\n')
    for name, body in files.items():
        (tmp_path / "tests" / name).write_text(textwrap.dedent(body))
    env = pytest_env(tmp_path)
    base = [sys.executable, "-m", "suitefit"]
    prof = subprocess.run([*base, "profile", "--", "-p", "no:cacheprovider"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=180)
    assert prof.returncode == 0, prof.stdout + prof.stderr
    (tmp_path / "notes.jsonl").unlink()
    plan = subprocess.run([*base, "plan", "--workers", "2"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert "release pool on" in plan.stdout, plan.stdout
    res = subprocess.run([*base, "run", "--workers", "2", "--", "-p", "no:cacheprovider"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    notes = read_notes(tmp_path)
    ups = [n for n in notes if n["event"] == "pool_up"]
    assert len(ups) == 1 and len([n for n in notes if n["event"] == "pool_finalized"]) == 1
    w = ups[0]["worker"]
    # a test that ran after the release on that worker saw the pool's processes gone
    later = [n for n in notes if n["event"] == "after" and n["worker"] == w and n["ups"] == 1
             and n["finalized"] == 1]
    assert later and not later[0]["alive"], notes
    with History(tmp_path / ".suitefit" / "history.sqlite") as h:
        run = h.runs(limit=1)[0]
        assert [e.worker for e in h.events(run.id, "sched_release")] == [w]
        released = h.events(run.id, "fixture_released")
    assert len(released) == 1 and released[0].detail_dict.get("ok") is True
