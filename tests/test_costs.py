"""The cost model read from a real SQLite history written through the History API."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from plan_synth import SynthFile, SynthFixture, SynthRun, pool_suite, write_history, write_run

from suitefit.config import load_config
from suitefit.costs import build_cost_model, load_cost_model
from suitefit.history import History
from suitefit.model import CostModel


def _one_worker(files: dict[str, SynthFile]) -> dict[str, list[str]]:
    return {"main": list(files)}


def test_median_of_last_runs_and_max_peak(tmp_path: Path) -> None:
    files = {"tests/test_a.py": SynthFile("tests/test_a.py", 1.0, peak_mb=10.0)}
    runs = [SynthRun(_one_worker(files), files, scale=s) for s in (1.0, 9.0, 2.0, 3.0)]
    write_history(tmp_path / "h.sqlite", runs)
    with History(tmp_path / "h.sqlite") as h:
        cm = build_cost_model(h, last=3)
    (fc,) = cm.files
    assert fc.wall_s == pytest.approx(3.0)  # median of the last 3 runs: 9, 2, 3
    assert fc.peak_mb == pytest.approx(10.0)
    assert fc.measured and cm.runs_used == 3
    assert cm.worker.startup_s == pytest.approx(1.5)
    assert cm.worker.baseline_mb == pytest.approx(120.0)


def test_split_file_sums_workers_and_fixture_charged_once(tmp_path: Path) -> None:
    files, fixtures = pool_suite(n_files=6, pool_files=3)
    a, b, c = "tests/test_00.py", "tests/test_01.py", "tests/test_02.py"
    placement = {"gw0": [a, b, "tests/test_03.py"], "gw1": [c, "tests/test_04.py", "tests/test_05.py"]}
    write_history(tmp_path / "h.sqlite", [SynthRun(placement, files, fixtures, peak_rss_mb=2000.0)])
    with History(tmp_path / "h.sqlite") as h:
        cm = build_cost_model(h)
    by = {f.path: f for f in cm.files}
    # the first pool user on each worker paid setup and memory: charged to the fixture instead
    assert by[a].wall_s == pytest.approx(files[a].wall_s)
    assert by[a].peak_mb == pytest.approx(files[a].peak_mb)
    assert by[c].wall_s == pytest.approx(files[c].wall_s)
    assert by[a].fixtures == ("pool",)
    (fx,) = cm.fixtures
    assert (fx.name, fx.scope, fx.procs) == ("pool", "session", 3)
    assert fx.setup_s == pytest.approx(2.0) and fx.mb == pytest.approx(300.0)
    assert set(fx.files) == {a, b, c}
    assert cm.serial_peak_mb is None  # that run had 2 workers


def test_serial_peak_and_defaults_for_unseen_files(tmp_path: Path) -> None:
    files = {p: SynthFile(p, w, peak_mb=m) for p, w, m in
             (("t/test_a.py", 1.0, 10.0), ("t/test_b.py", 3.0, 30.0), ("t/test_c.py", 5.0, 50.0))}
    write_history(tmp_path / "h.sqlite", [SynthRun(_one_worker(files), files, peak_rss_mb=777.0)])
    with History(tmp_path / "h.sqlite") as h:
        cm = build_cost_model(h, files=["t/test_new.py"], groups={"g": ["t/test_a.py", "t/test_other.py"]})
    by = {f.path: f for f in cm.files}
    assert cm.serial_peak_mb == pytest.approx(777.0)
    for p in ("t/test_new.py", "t/test_other.py"):
        assert not by[p].measured
        assert by[p].wall_s == pytest.approx(3.0) and by[p].peak_mb == pytest.approx(30.0)
    assert any("2 file(s) never measured" in n and "median of measured files" in n for n in cm.notes)
    assert cm.declared_groups == {"g": ("t/test_a.py", "t/test_other.py")}


def test_no_history_defaults_stated(tmp_path: Path) -> None:
    cm = build_cost_model(None, files=["tests/test_x.py"])
    assert cm.runs_used == 0
    assert cm.files[0].wall_s == 1.0 and cm.files[0].peak_mb == 50.0
    assert any("nothing measured yet" in n for n in cm.notes)
    assert any("assumed" in n for n in cm.notes)


def test_running_and_compare_runs_ignored(tmp_path: Path) -> None:
    files = {"t/test_a.py": SynthFile("t/test_a.py", 2.0)}
    write_history(tmp_path / "h.sqlite", [SynthRun(_one_worker(files), files),
                                          SynthRun(_one_worker(files), files, scale=50.0, kind="compare")])
    with History(tmp_path / "h.sqlite") as h:
        h.new_run("run", started=5.0)  # still running, no rows
        cm = build_cost_model(h)
    assert cm.runs_used == 1 and cm.files[0].wall_s == pytest.approx(2.0)


def test_load_cost_model_from_config(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.suitefit]\nhistory = "h.sqlite"\ndefault_file_s = 4.0\ndefault_file_mb = "64MiB"\n'
        '[tool.suitefit.groups]\ndb = ["tests/test_db.py"]\n')
    cfg = load_config(tmp_path)
    cm, found = load_cost_model(cfg)
    assert not found and not (tmp_path / "h.sqlite").exists()  # planning never creates a history
    (fc,) = cm.files
    assert (fc.path, fc.wall_s, fc.peak_mb) == ("tests/test_db.py", 4.0, 64.0)


def test_fixture_module_scope_not_charged(tmp_path: Path) -> None:
    files = {"t/test_a.py": SynthFile("t/test_a.py", 1.0, fixtures=("mod",))}
    fx = [SynthFixture("mod", setup_s=0.5, mb=10.0, scope="module")]
    write_history(tmp_path / "h.sqlite", [SynthRun(_one_worker(files), files, fx)])
    with History(tmp_path / "h.sqlite") as h:
        cm = build_cost_model(h)
    assert cm.files[0].wall_s == pytest.approx(1.5)  # module scope repeats per file: stays in the file


def test_a_test_that_hung_to_its_timeout_does_not_set_its_files_cost(tmp_path: Path) -> None:
    # Model-Optimizer: a distributed test hung to its 60 s timeout in the one profiling run
    # and the plan priced its file at 60 s (it takes ~11 s). A failed (timed-out) test counts
    # at its file's passing average, and the file is marked as measured in a doubtful run.
    import subprocess
    import sys
    import textwrap

    (tmp_path / "test_dist.py").write_text(textwrap.dedent("""
        import time
        def test_fast_1(): time.sleep(0.1)
        def test_fast_2(): time.sleep(0.1)
        def test_hangs():
            time.sleep(2.5)
            raise TimeoutError("Timeout (>2.5s) from pytest-timeout")
    """))
    (tmp_path / "test_ok.py").write_text("import time\ndef test_a(): time.sleep(0.2)\n")
    hist = tmp_path / "h.sqlite"
    res = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--suitefit",
                          f"--suitefit-history={hist}", "-n", "0"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 1, res.stdout + res.stderr
    with History(hist) as h:
        cm = build_cost_model(h)
    by = {f.path: f for f in cm.files}
    dist, ok = by["test_dist.py"], by["test_ok.py"]
    assert dist.wall_s < 1.0, dist  # three tests at ~0.1 s, not 2.7 s
    assert not dist.trusted and ok.trusted
    assert 0 < dist.last_s <= dist.wall_s and 0.15 < ok.last_s < 1.0  # a file's last test


def test_a_run_of_some_of_a_files_tests_does_not_set_its_cost(tmp_path: Path) -> None:
    # `suitefit run -- -k ...`, `--lf` or `FILE::TEST` ran a few of a file's tests: the file
    # took a fraction of its time, and the next full plan priced it at that (six files of 0.4 s
    # planned at 0.1 s after three such runs). Such runs are recorded as partial for the files
    # they narrowed, in the serial process and in every xdist worker, and are not read while
    # a run of the whole file exists.
    import subprocess
    import sys

    (tmp_path / "test_a.py").write_text(
        "import time\n" + "".join(f"def test_{i}(): time.sleep(0.1)\n" for i in range(4)))
    (tmp_path / "test_b.py").write_text("import time\ndef test_b(): time.sleep(0.1)\n")
    hist = tmp_path / "h.sqlite"

    def pytest_run(*args: str) -> None:
        res = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--suitefit",
                              f"--suitefit-history={hist}", *args], cwd=tmp_path, capture_output=True,
                             text=True, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr

    pytest_run("-n", "0")  # the whole suite
    pytest_run("-n", "2", "-k", "test_1")  # test_a.py in part; test_b.py not at all
    pytest_run("-n", "0", "test_a.py::test_2", "test_b.py")  # a node id narrows test_a.py only
    with History(hist) as h:
        partial = h.partial_files([r.id for r in h.runs()])
        cm = build_cost_model(h)
    assert partial == {(2, "test_a.py"), (3, "test_a.py")}
    by = {f.path: f for f in cm.files}
    assert 0.35 < by["test_a.py"].wall_s < 0.6, by["test_a.py"]  # four tests, not one
    assert by["test_a.py"].tests == 4 and by["test_a.py"].whole
    # with only partial runs left, they are read, and the plan says so
    with History(hist) as h:
        h.execute("DELETE FROM files WHERE run_id = 1")
        cm = build_cost_model(h)
    a = next(f for f in cm.files if f.path == "test_a.py")
    assert not a.whole and a.wall_s < 0.3
    from suitefit.model import Budget
    from suitefit.plan.planner import make_plan

    plan = make_plan(cm, Budget(4096.0, 2))
    assert any("1 file(s) measured only in runs that selected some of their tests" in r and "test_a.py" in r
               for r in plan.reasons), plan.reasons


def test_a_file_deleted_since_it_was_measured_is_not_planned(tmp_path: Path) -> None:
    # It would be a unit that never runs, its time in every prediction, until it left the
    # history's window. A root where no measured file exists (the history carried to another
    # checkout path) judges nothing.
    files = {p: SynthFile(p, 1.0) for p in ("tests/test_a.py", "tests/test_b.py", "tests/test_c.py")}
    write_history(tmp_path / "h.sqlite", [SynthRun(_one_worker(files), files)])
    here, elsewhere = tmp_path / "checkout", tmp_path / "elsewhere"
    (here / "tests").mkdir(parents=True)
    elsewhere.mkdir()
    for p in ("tests/test_a.py", "tests/test_c.py"):
        (here / p).write_text("def test_x(): pass\n")
    with History(tmp_path / "h.sqlite") as h:
        now = build_cost_model(h, root=here)
        carried = build_cost_model(h, root=elsewhere)
    assert [f.path for f in now.files] == ["tests/test_a.py", "tests/test_c.py"]
    assert any(n.startswith(f"1 file(s) measured before no longer exist under {here}: not planned "
                            "(tests/test_b.py)") for n in now.notes), now.notes
    assert len(carried.files) == 3 and not any("no longer exist" in n for n in carried.notes)


def test_a_run_that_named_its_paths_does_not_set_the_suites_start_up(tmp_path: Path) -> None:
    # `suitefit run -- tests/unit` collects part of the suite: its workers start sooner (a
    # 6-file run of networkx: 0.4 s where the whole suite's collection takes 2.6 s). Its
    # start-up is not the suite's, while a run of the whole suite is in the window.
    files = {p: SynthFile(p, 1.0) for p in ("t/test_a.py", "t/test_b.py")}
    part = {"t/test_a.py": files["t/test_a.py"]}
    write_history(tmp_path / "h.sqlite", [SynthRun(_one_worker(files), files, startup_s=2.6),
                                          *(SynthRun(_one_worker(part), part, startup_s=0.4) for _ in range(3))])
    with History(tmp_path / "h.sqlite") as h:
        assert build_cost_model(h).worker.startup_s == pytest.approx(0.4)  # unmarked: 3 of 4
        for r in h.runs()[:3]:
            h.merge_run_meta(r.id, paths_given=True)
        assert build_cost_model(h).worker.startup_s == pytest.approx(2.6)
        # `pytest numpy` names the whole of a suite without testpaths: the run that collected
        # the most tests is the suite's, whatever its command named
        h.merge_run_meta(h.runs()[-1].id, paths_given=True)
        assert build_cost_model(h).worker.startup_s == pytest.approx(2.6)
    # the same for runs that selected some tests (-k: partial files) or left files out
    write_history(tmp_path / "k.sqlite", [SynthRun(_one_worker(files), files, startup_s=2.6),
                                          *(SynthRun(_one_worker(part), part, startup_s=0.4) for _ in range(3))])
    with History(tmp_path / "k.sqlite") as h:
        a, b, c, _ = (r.id for r in h.runs())
        h.add_partial_files(a, ["t/test_a.py"])
        h.merge_run_meta(b, part_of_plan=True)
        h.merge_run_meta(c, paths_given=True)
        assert build_cost_model(h).worker.startup_s == pytest.approx(2.6)


def test_a_selection_every_run_makes_is_the_suite_not_part_of_it(tmp_path: Path) -> None:
    """``addopts = -m "not slow"`` deselects some tests of a few files in every run. Those
    files' times stay out, but each run ran the suite as configured: read as runs of part of
    it, numpy's lib and linalg tests never had a whole run, and their plans took the workers'
    start-up from the calibration alone (17.6 s predicted for 15.8 s)."""
    files = {p: SynthFile(p, 1.0) for p in ("t/test_a.py", "t/test_b.py", "t/test_c.py", "t/test_d.py")}
    paths = list(files)
    two = {"gw0": paths[::2], "gw1": paths[1::2]}
    write_history(tmp_path / "h.sqlite", [
        SynthRun(_one_worker(files), files, startup_s=1.5),
        SynthRun(two, files, kind="calibrate", startup_s=3.0),
        *(SynthRun(two, files, kind="run", startup_s=2.0) for _ in range(2))])
    with History(tmp_path / "h.sqlite") as h:
        for r in h.runs():
            if r.kind != "calibrate":
                h.add_partial_files(r.id, ["t/test_a.py"])
        cm = build_cost_model(h)
        # the workers of every run: 1.5, 3.0 x2, 2.0 x4 (the calibration's alone: 3.0)
        assert cm.worker.startup_s == pytest.approx(2.0)
    # a compare's side is another configuration: the more tests it ran are not the suite's
    more = {f"t/test_{i}.py": SynthFile(f"t/test_{i}.py", 1.0) for i in range(9)}
    write_history(tmp_path / "c.sqlite", [
        SynthRun(_one_worker(more), more, kind="compare", startup_s=9.0),
        SynthRun(_one_worker(files), files, startup_s=1.5),
        SynthRun(two, files, kind="calibrate", startup_s=3.0),
        *(SynthRun(two, files, kind="run", startup_s=2.0) for _ in range(2))])
    with History(tmp_path / "c.sqlite") as h:
        for r in h.runs():
            if r.kind not in ("calibrate", "compare"):
                h.add_partial_files(r.id, ["t/test_a.py"])
        assert build_cost_model(h).worker.startup_s == pytest.approx(2.0)
    # twenty-one runs of `-k`, each selecting one file's tests on its command line, after a run
    # of the suite as configured (its own -m selecting too): the suite is that run's
    many = [SynthRun(_one_worker(files), files, startup_s=2.6),
            *(SynthRun(_one_worker({"t/test_a.py": files["t/test_a.py"]}), {"t/test_a.py": files["t/test_a.py"]},
                       startup_s=0.4) for _ in range(21))]
    write_history(tmp_path / "m.sqlite", many)
    with History(tmp_path / "m.sqlite") as h:
        for i, r in enumerate(reversed(h.runs())):
            h.add_partial_files(r.id, ["t/test_a.py"])
            h.merge_run_meta(r.id, selection_given=i > 0)
        cm = build_cost_model(h)
    assert cm.worker.startup_s == pytest.approx(2.6)
    assert {f.path for f in cm.files} == set(files)  # the suite's other files are still planned
    # runs that select far fewer tests (-k) are still part of the suite
    few = {"t/test_a.py": files["t/test_a.py"]}
    write_history(tmp_path / "k.sqlite", [SynthRun(_one_worker(files), files, startup_s=2.6),
                                          *(SynthRun(_one_worker(few), few, startup_s=0.4) for _ in range(3))])
    with History(tmp_path / "k.sqlite") as h:
        for r in h.runs():
            h.add_partial_files(r.id, ["t/test_a.py"])
        assert build_cost_model(h).worker.startup_s == pytest.approx(2.6)


def test_runs_of_a_few_files_do_not_push_the_rest_of_the_suite_out_of_the_plan(tmp_path: Path) -> None:
    # A developer runs one file again and again (`pytest --suitefit t/test_a.py`): the window
    # of recent runs fills with it. The suite's other files stay planned, from the newest runs
    # of the whole suite before them (on pytest's own suite, 22 such runs left a plan of 10 of
    # its 75 files).
    files = {p: SynthFile(p, 1.0 + i) for i, p in enumerate(("t/test_a.py", "t/test_b.py", "t/test_c.py"))}
    part = {"t/test_a.py": SynthFile("t/test_a.py", 2.5)}
    write_history(tmp_path / "h.sqlite", [SynthRun(_one_worker(files), files),
                                          *(SynthRun(_one_worker(part), part) for _ in range(25))])
    with History(tmp_path / "h.sqlite") as h:
        for r in h.runs()[:25]:  # the newest 25
            h.merge_run_meta(r.id, paths_given=True)
        m = build_cost_model(h)
        assert {f.path: f.wall_s for f in m.files} == {
            "t/test_a.py": pytest.approx(2.5), "t/test_b.py": pytest.approx(2.0), "t/test_c.py": pytest.approx(3.0)}
        assert m.runs_used == 6  # test_a's last 5 runs and the whole suite's one
        assert m.worker.startup_s == pytest.approx(1.5)
    # `pytest --suitefit tests` names the whole of a suite without testpaths: such runs are the
    # suite's, and the profile far behind them is not read
    fast = {p: SynthFile(p, 0.5) for p in files}
    write_history(tmp_path / "w.sqlite", [SynthRun(_one_worker(files), files),
                                          *(SynthRun(_one_worker(fast), fast) for _ in range(25))])
    with History(tmp_path / "w.sqlite") as h:
        for r in h.runs()[:25]:
            h.merge_run_meta(r.id, paths_given=True)
        h.merge_run_meta(h.runs()[-1].id, controller_mb=999.0)  # read only if the profile is
        m = build_cost_model(h)
        assert m.runs_used == 5 and all(f.wall_s == pytest.approx(0.5) for f in m.files)
        assert m.controller_mb is None


def test_a_run_is_marked_as_naming_its_paths_only_when_they_are_not_the_suites(tmp_path: Path) -> None:
    import subprocess
    import sys

    (tmp_path / "tests").mkdir()
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    for f in ("a", "b"):
        (tmp_path / "tests" / f"test_{f}.py").write_text("def test_x(): pass\n")
    hist = tmp_path / "h.sqlite"
    for args in ([], ["tests"], ["tests/test_a.py"], ["tests/test_a.py::test_x"]):
        res = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--suitefit",
                              f"--suitefit-history={hist}", "-n", "0", *args], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
    with History(hist) as h:
        marked = [bool(r.meta_dict.get("paths_given")) for r in reversed(h.runs())]
    assert marked == [False, False, True, True]


def test_a_run_is_marked_as_selecting_tests_only_for_its_command_lines_own_selection(tmp_path: Path) -> None:
    """The configuration's ``addopts = -m "not slow"`` selects in every run: that is the suite
    as configured. ``-k``, ``-m``, ``--deselect``, ``--lf`` or a node id on the command line
    select part of it."""
    import subprocess
    import sys

    (tmp_path / "tests").mkdir()
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\ntestpaths = ["tests"]\naddopts = "-m \'not slow\'"\n'
        'markers = ["slow: slow"]\n')
    (tmp_path / "tests" / "test_a.py").write_text(
        "import pytest\ndef test_x(): pass\ndef test_y(): pass\n@pytest.mark.slow\ndef test_z(): pass\n")
    hist = tmp_path / "h.sqlite"
    runs = ([], ["-k", "x"], ["-kx"], ["-m", "not slow"], ["--deselect", "tests/test_a.py::test_y"],
            ["tests/test_a.py::test_x"], ["--maxfail=3"])  # (--lf and --sw need the cache provider)
    for args in runs:
        res = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--suitefit",
                              f"--suitefit-history={hist}", "-n", "0", *args], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
    with History(hist) as h:
        got = [r.meta_dict.get("selection_given") for r in reversed(h.runs())]
        partial = {r for r, _ in h.partial_files([r.id for r in h.runs()])}
    assert got == [False, True, True, True, True, True, False]
    assert 1 in partial  # the configuration's -m deselected test_z in the first run too


def test_the_slowdown_is_weighted_by_time_and_leaves_anomalies_out(tmp_path: Path) -> None:
    # networkx: its long files ran 0.8x their serial time in two workers while the median
    # file ran 1.07x; the plan's lanes are sums of file times, so the long files decide.
    # A file 5x slower (a hang) says nothing about sharing the CPUs and is left out.
    short = {f"tests/test_s{i}.py": SynthFile(f"tests/test_s{i}.py", 0.1) for i in range(6)}
    long = {f"tests/test_l{i}.py": SynthFile(f"tests/test_l{i}.py", 5.0) for i in range(2)}
    hung = {"tests/test_h.py": SynthFile("tests/test_h.py", 1.0)}
    files = {**short, **long, **hung}
    there = {**{p: SynthFile(p, 0.11) for p in short}, **{p: SynthFile(p, 4.0) for p in long},
             "tests/test_h.py": SynthFile("tests/test_h.py", 5.0)}
    paths = list(files)
    write_history(tmp_path / "h.sqlite", [SynthRun(_one_worker(files), files),
                                          SynthRun({"gw0": paths[::2], "gw1": paths[1::2]}, there)])
    with History(tmp_path / "h.sqlite") as h:
        cm = build_cost_model(h)
    assert cm.slowdown == {2: pytest.approx((6 * 0.11 + 2 * 4.0) / (6 * 0.1 + 2 * 5.0))}


def test_slowdown_and_startup_per_worker_count_are_measured(tmp_path: Path) -> None:
    # A serial run, then a 2-worker run where every file took 1.4x (the CPUs were shared)
    # and workers took 2.5 s to start instead of 1.5 s: the model learns both, keeps file
    # costs in serial terms, and the planner predicts with them.
    from suitefit.model import Budget
    from suitefit.plan import make_plan

    files = {f"tests/test_{i}.py": SynthFile(f"tests/test_{i}.py", 1.0 + i % 3) for i in range(8)}
    serial = SynthRun(_one_worker(files), files)
    paths = list(files)
    two = SynthRun({"gw0": paths[::2], "gw1": paths[1::2]}, files, scale=1.4, startup_s=2.5)
    write_history(tmp_path / "h.sqlite", [serial, two])
    with History(tmp_path / "h.sqlite") as h:
        cm = build_cost_model(h)
    assert cm.slowdown == {2: pytest.approx(1.4)}
    assert cm.startup_by_workers[2] == pytest.approx(2.5) and cm.startup_by_workers[1] == pytest.approx(1.5)
    by = {f.path: f for f in cm.files}
    assert by["tests/test_1.py"].wall_s == pytest.approx(2.0)  # serial terms, not 2.8
    plan = make_plan(cm, Budget(10_000, 2, workers=2))
    assert plan.slow == pytest.approx(1.4)
    # controller start (serial startup) + workers' start + the work shared at 1.4x
    work = sum(f.wall_s for f in files.values())
    assert plan.predicted_wall_s >= 1.5 + 2.5 + 1.4 * work / 2 - 1e-6
    assert any("2 workers x1.40" in n for n in cm.notes)



def test_files_found_by_name_are_planned_only_before_anything_is_measured(tmp_path: Path) -> None:
    """A name is not a collection: once a run is measured, the plan holds what pytest ran."""
    from suitefit.costs import load_costs_or_discover

    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    (tmp_path / "tests" / "fixtures" / "project").mkdir(parents=True)
    (tmp_path / "tests" / "test_a.py").write_text("def test_x():\n    pass\n")
    (tmp_path / "tests" / "fixtures" / "project" / "test_one.py").write_text("def test_x():\n    pass\n")
    costs, _, found = load_costs_or_discover(load_config(tmp_path), tmp_path / "none.sqlite")
    assert {f.path for f in costs.files} == set(found) == {"tests/test_a.py", "tests/fixtures/project/test_one.py"}
    files = {"tests/test_a.py": SynthFile("tests/test_a.py", 2.0, peak_mb=10.0)}
    write_history(tmp_path / "h.sqlite", [SynthRun(_one_worker(files), files)])
    costs, _, _ = load_costs_or_discover(load_config(tmp_path), tmp_path / "h.sqlite")
    assert [(f.path, f.measured) for f in costs.files] == [("tests/test_a.py", True)]


def test_what_commands_take_outside_their_tests_is_measured_per_worker_count(tmp_path: Path) -> None:
    # The closing line records the command's wall; the next plan adds what past commands took
    # outside their tests' span (suitefit's start, the processes' start-up, the end) at that
    # worker count, less the start-up the model already counts. It is measured on the run
    # alone: a residual against the prediction of the plan it ran under (a wild 9 s here)
    # would count again what the model has since learned from that same run.
    import json

    from suitefit.model import Budget
    from suitefit.plan import make_plan

    files = {f"tests/test_{i}.py": SynthFile(f"tests/test_{i}.py", 1.0) for i in range(6)}
    two = {"gw0": [f"tests/test_{i}.py" for i in range(3)], "gw1": [f"tests/test_{i}.py" for i in range(3, 6)]}
    write_history(tmp_path / "h.sqlite", [SynthRun(_one_worker(files), files)])
    with History(tmp_path / "h.sqlite") as h:
        base = make_plan(build_cost_model(h), Budget(10_000, 2, workers=2))
        for i, (said, command) in enumerate(((9.0, 5.0), (2.0, 5.4), (5.0, 4.6))):
            rid = write_run(h, SynthRun(two, files, kind="run"), started=2_000_000.0 + 100 * i)
            h.update_run(rid, plan=json.dumps({"workers": 2, "predicted_wall_s": said, "overhead_s": 1.0}))
            h.merge_run_meta(rid, command_wall_s=command)  # the tests' span is 3.0 s
        cm = build_cost_model(h)
    assert cm.outside_by_workers == {2: pytest.approx(2.0)}  # the median of 2.0, 2.4 and 1.6
    plan = make_plan(cm, Budget(10_000, 2, workers=2))
    # the tests' span as the model has it (3 s), and what the commands took outside it
    assert plan.predicted_wall_s == pytest.approx(5.0, abs=0.05), plan.reasons
    assert base.predicted_wall_s != pytest.approx(5.0, abs=0.05)  # the profile alone said otherwise
    assert any("outside their tests" in r for r in plan.reasons), plan.reasons



def test_a_profile_with_workers_stands_in_for_the_outside_until_a_planned_run_measures_it(tmp_path: Path) -> None:
    # The bundled example, with no bytecode written: after a serial profile and a profile
    # with -n 2, the first plan counted only the serial end (6.2 s predicted for a 7.6 s
    # run). A profile's command at 2 workers has the same start, xdist and end as a run's
    # (4.73 s outside its tests there, 4.52 s for the run after it): it stands in until a
    # planned run at that count is recorded, and then only the planned runs count.
    import json

    files = {f"tests/test_{i}.py": SynthFile(f"tests/test_{i}.py", 1.0) for i in range(6)}
    two = {"gw0": [f"tests/test_{i}.py" for i in range(3)], "gw1": [f"tests/test_{i}.py" for i in range(3, 6)]}
    write_history(tmp_path / "h.sqlite", [SynthRun(_one_worker(files), files)])
    with History(tmp_path / "h.sqlite") as h:
        assert build_cost_model(h).outside_by_workers == {}
        rid = write_run(h, SynthRun(two, files, kind="profile"), started=2_000_000.0)
        h.merge_run_meta(rid, command_wall_s=7.5)  # the tests' span is 3.0 s
        assert build_cost_model(h).outside_by_workers == {2: pytest.approx(4.5)}
        rid = write_run(h, SynthRun(two, files, kind="run"), started=2_000_100.0)
        h.update_run(rid, plan=json.dumps({"workers": 2}))
        h.merge_run_meta(rid, command_wall_s=6.0)
        assert build_cost_model(h).outside_by_workers == {2: pytest.approx(3.0)}

def test_the_peak_headroom_is_the_largest_under_prediction_measured(tmp_path: Path) -> None:
    # Planned runs record their predicted peak; the measured tree peak (plus the sampler
    # process, which the prediction counts and the tree peak leaves out) says how far off it
    # was. A run killed for memory counts too. The next plan admits units against the budget
    # less the worst recent under-prediction, never less than 5%.
    import json

    from suitefit.model import Budget
    from suitefit.plan import make_plan
    from suitefit.plan.planner import headroom

    files = {f"tests/test_{i}.py": SynthFile(f"tests/test_{i}.py", 1.0, peak_mb=100.0) for i in range(6)}
    write_history(tmp_path / "h.sqlite", [SynthRun(_one_worker(files), files)])
    with History(tmp_path / "h.sqlite") as h:
        assert build_cost_model(h).peak_errors == ()
        none_yet = headroom(build_cost_model(h), 1000.0)
        for predicted, peak, status in ((500.0, 490.0, "passed"), (500.0, 560.0 - 10.0, "crashed")):
            rid = h.new_run("run", started=2_000_000.0)
            h.update_run(rid, status=status, plan=json.dumps({"workers": 2, "predicted_peak_mb": predicted}),
                         finished=2_000_010.0, wall_s=4.0, peak_rss_mb=peak)
            h.merge_run_meta(rid, sampler_rss_mb=10.0)
        cm = build_cost_model(h)
    assert cm.peak_errors == (pytest.approx(0.12), pytest.approx(0.0))  # newest first
    assert none_yet == (pytest.approx(1000 * 0.05 / 1.05), pytest.approx(none_yet[1]))
    assert "default until a planned run" in none_yet[1]
    room, why = headroom(cm, 1000.0)
    assert room == pytest.approx(1000 * 0.12 / 1.12) and "12% above its prediction" in why
    floor, why = headroom(replace(cm, peak_errors=(0.01, -0.2)), 1000.0)
    assert floor == pytest.approx(1000 * 0.05 / 1.05) and "floor" in why
    assert headroom(replace(cm, headroom=0.0), 1000.0)[0] == 0.0
    # the plan keeps its predicted peak under the admitted budget and says so
    budget = 3 * 120.0 + 2 * 100.0  # the controller's and two workers' baselines, two files at once
    plan = make_plan(replace(cm, headroom=0.0), Budget(budget, 2, workers=2))
    tight = make_plan(cm, Budget(budget, 2, workers=2))
    assert tight.headroom_mb == pytest.approx(budget * 0.12 / 1.12) and plan.headroom_mb == 0.0
    assert tight.admit_mb == pytest.approx(budget - tight.headroom_mb)
    assert tight.predicted_peak_mb <= tight.admit_mb + 1e-6 < plan.predicted_peak_mb
    assert any(r.startswith("headroom:") and "12%" in r for r in tight.reasons)


def test_a_plan_that_rested_on_defaults_teaches_no_error(tmp_path: Path) -> None:
    # A suite's first `suitefit run` plans every file at a default cost: its miss (here 4x
    # the peak, 7x the wall) says how far the defaults were off. Learned, it set the next
    # plan's headroom to most of the budget. A plan that rested on measurements teaches.
    import json

    files = {f"tests/test_{i}.py": SynthFile(f"tests/test_{i}.py", 1.0, peak_mb=100.0) for i in range(6)}
    write_history(tmp_path / "h.sqlite", [SynthRun(_one_worker(files), files)])
    with History(tmp_path / "h.sqlite") as h:
        for measured_files, measured_s in ((0, 0.0), (5, 5.9), (6, 6.0), (3, 3.0)):
            rid = h.new_run("run", started=2_000_000.0)
            plan = {"workers": 2, "predicted_peak_mb": 400.0, "predicted_wall_s": 38.0,
                    "measured": {"files": measured_files, "planned": 6, "measured_s": measured_s,
                                 "work_s": 6.0, "runs": 1}}
            h.update_run(rid, status="passed", plan=json.dumps(plan), finished=2_000_300.0, wall_s=289.0,
                         peak_rss_mb=1700.0 if measured_files == 0 else 440.0)
            h.merge_run_meta(rid, sampler_rss_mb=0.0, command_wall_s=289.0 if measured_files == 0 else 41.8)
        cm = build_cost_model(h)
    # newest first: half measured (not learned), all measured, 98% measured, none (not learned)
    assert cm.peak_errors == (pytest.approx(0.1), pytest.approx(0.1))
    assert cm.wall_errors == (pytest.approx(0.1), pytest.approx(0.1))


HOG_HEAVY = [  # bench_run's hog-heavy at --scale 0.5, as one profile measured it: (name, s, MiB)
    ("hog_900", 0.556, 900), ("c7", 0.493, 0), ("c2", 0.399, 0), ("c3", 0.382, 0), ("hog_600", 0.312, 600),
    ("hog_700", 0.310, 700), ("c6", 0.299, 0), ("c5", 0.274, 0), ("c1", 0.241, 0), ("hog_500", 0.234, 500),
    ("hog_400", 0.175, 400), ("c4", 0.126, 0), ("c0", 0.109, 0)]


def test_hogs_apart_may_cost_what_recent_predictions_missed_the_wall_by(tmp_path: Path) -> None:
    # A planned run's closing line records the command's wall beside its plan's prediction;
    # the misses say how much predicted wall the plan cannot tell apart. Keeping hogs apart
    # may cost that much (2% to 5%), not only the 2% floor: on hog-heavy the bench's rounds
    # missed by 4-21% and the plan let two hogs overlap for a predicted 2.6% (+35% peak).
    import json

    from suitefit.model import Budget
    from suitefit.plan import make_plan
    from suitefit.plan.planner import apart_tolerance

    # The ordinary files at half their time: keeping the hogs apart then costs between 2% and
    # 5% of the predicted wall. (At their full time the core now keeps them apart for 1.3%:
    # a worker given its next unit while it held its last test is no longer taken for one at
    # its last test, and a long file's tail moves at the end.)
    files = {f"tests/test_{n}.py": SynthFile(f"tests/test_{n}.py", s if mb else s / 2, peak_mb=max(mb, 1.0),
                                             tests=1 if mb else 6)
             for n, s, mb in HOG_HEAVY}
    write_history(tmp_path / "h.sqlite", [SynthRun(_one_worker(files), files)])
    # Without the page-fault model (tests/test_faults.py): overlapping hogs then cost nothing in
    # the prediction, and the choice rests on the tolerance alone.
    from dataclasses import replace

    with History(tmp_path / "h.sqlite") as h:
        assert build_cost_model(h).wall_errors == ()
        none_yet = make_plan(replace(build_cost_model(h), fault_s_per_mb=None), Budget(100_000, 2, workers=2))
        rows = ((4.0, 4.48, "passed"), (4.0, 3.84, "failed"), (4.0, 4.84, "passed"), (4.0, 9.0, "crashed"))
        for i, (said, took, status) in enumerate(rows):
            rid = h.new_run("run", started=2_000_000.0 + 100 * i)
            h.update_run(rid, status=status, plan=json.dumps({"workers": 2, "predicted_wall_s": said}),
                         finished=2_000_010.0 + 100 * i, wall_s=3.0)
            h.merge_run_meta(rid, command_wall_s=took)
        cm = build_cost_model(h)
    # newest first; a crashed run's wall says nothing about the prediction
    assert cm.wall_errors == (pytest.approx(0.21), pytest.approx(-0.04), pytest.approx(0.12))
    assert apart_tolerance(())[0] == 0.02 and apart_tolerance((0.01, -0.015))[0] == 0.02
    assert apart_tolerance((0.03, -0.035, 0.04))[0] == pytest.approx(0.035)
    tol, why = apart_tolerance(cm.wall_errors)
    assert tol == 0.05 and "12.0%" in why and "capped" in why
    missed = make_plan(replace(cm, fault_s_per_mb=None), Budget(100_000, 2, workers=2))
    assert none_yet.spread_mb is not None and missed.spread_mb is not None
    # a lower ceiling, for a lower predicted peak, at no more than 5% of the wall
    assert missed.spread_mb < none_yet.spread_mb
    assert missed.predicted_peak_mb < 0.95 * none_yet.predicted_peak_mb
    assert missed.predicted_wall_s <= 1.05 * none_yet.predicted_wall_s
    assert any(r.startswith("hogs apart: ") and "missed their predicted wall by 12.0%" in r
               for r in missed.reasons), missed.reasons


def test_each_files_last_test_is_read_in_one_pass_over_its_runs_rows(tmp_path: Path) -> None:
    """A file's last test (what xdist holds until its worker gets more) is read for every
    file of the newest run. Counted in SQLite's virtual-machine steps, which do not depend on
    the machine: four times the files (ten tests each) must cost about four times the steps.
    A join back to the tests table on (run, file, seq), which is indexed by run alone,
    searched the run's rows once per file: ~16x here, 1.5 s of every plan at 50,000 tests."""
    import sqlite3

    def model_steps(n_files: int) -> int:
        files = {f"tests/test_{i:03d}.py": SynthFile(f"tests/test_{i:03d}.py", 1.0, tests=10)
                 for i in range(n_files)}
        names = list(files)
        path = write_history(tmp_path / f"h{n_files}.sqlite",
                             [SynthRun({"gw0": names[::2], "gw1": names[1::2]}, files)])
        with sqlite3.connect(path) as db:  # each file's last test gets a time of its own
            db.execute("UPDATE tests SET wall_s = 0.001 * seq + 0.0001 * length(file) WHERE (file, seq) IN "
                       "(SELECT file, MAX(seq) FROM tests GROUP BY file)")
        steps = 0

        def count() -> int:
            nonlocal steps
            steps += 1
            return 0

        with History(path) as h:
            want = {f: s for f, s in h.execute("SELECT file, wall_s FROM tests t WHERE seq = "
                                                "(SELECT MAX(seq) FROM tests u WHERE u.file = t.file)")}
            h._db.set_progress_handler(count, 100)
            cm = build_cost_model(h)
            h._db.set_progress_handler(None, 0)
        assert {f.path: f.last_s for f in cm.files} == pytest.approx(want)
        return steps

    small, large = model_steps(40), model_steps(160)
    assert large < 6 * small, (small, large)


def test_xdist_controllers_measured_peak_is_the_plans_fixed_memory(tmp_path: Path) -> None:
    """xdist's controller keeps every test's report: 75 -> 435 MiB over a 50,000-test run,
    where one worker's baseline (what a plan counted for it) was 205 MiB and the predicted
    peak 17% short. A run with workers records the controller's own peak; plans with
    workers count the largest recorded, plans without a controller count none."""
    from suitefit.model import Budget
    from suitefit.plan import make_plan

    files = {f"tests/test_{i}.py": SynthFile(f"tests/test_{i}.py", 1.0 + i % 3, peak_mb=30.0) for i in range(8)}
    names = list(files)
    path = tmp_path / "h.sqlite"
    with History(path) as h:
        serial = write_run(h, SynthRun({"main": names}, files))
        two = [write_run(h, SynthRun({"gw0": names[::2], "gw1": names[1::2]}, files, kind="run"),
                         started=1_000_100.0 + 100 * i) for i in range(2)]
        cm = build_cost_model(h)
        assert cm.controller_mb is None  # no run recorded its controller: one worker's baseline
        plain = make_plan(cm, Budget(100_000, 2, workers=2))
        assert plain.fixed_mb == pytest.approx(cm.worker.baseline_mb + cm.sampler_mb)
        h.merge_run_meta(two[0], controller_mb=300.0)
        h.merge_run_meta(two[1], controller_mb=435.0)
        h.merge_run_meta(serial, controller_mb=None)
        cm = build_cost_model(h)
    assert cm.controller_mb == pytest.approx(435.0)
    with_ctl = make_plan(cm, Budget(100_000, 2, workers=2))
    assert with_ctl.fixed_mb == pytest.approx(435.0 + cm.sampler_mb)
    assert with_ctl.predicted_peak_mb == pytest.approx(
        plain.predicted_peak_mb + 435.0 - cm.worker.baseline_mb, abs=1.0)
    one = make_plan(cm, Budget(100_000, 2, workers=1))
    assert one.fixed_mb == pytest.approx(cm.sampler_mb)  # one worker runs in pytest's own process


def test_xdist_controllers_cpu_a_test_is_measured_from_runs_with_workers(tmp_path: Path) -> None:
    """The controller's own CPU over the tests its runs ran: the median over runs with workers
    that recorded it; a serial run (no controller) and a run that did not record it count
    for nothing, and none recorded means not measured."""
    files = {f"tests/test_{i}.py": SynthFile(f"tests/test_{i}.py", 1.0, peak_mb=30.0, tests=50) for i in range(8)}
    names = list(files)
    with History(tmp_path / "h.sqlite") as h:
        serial = write_run(h, SynthRun({"main": names}, files))
        two = [write_run(h, SynthRun({"gw0": names[::2], "gw1": names[1::2]}, files, kind="run"),
                         started=1_000_100.0 + 100 * i) for i in range(4)]
        assert build_cost_model(h).controller_per_test_s is None
        h.merge_run_meta(serial, controller_cpu_s=40.0)  # not a controller's: never read
        for rid, cpu in zip(two, (0.8, 1.2, 4.0), strict=False):  # two[3] records nothing
            h.merge_run_meta(rid, controller_cpu_s=cpu)
        cm = build_cost_model(h)
    assert cm.controller_per_test_s == pytest.approx(1.2 / 400)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_run_of_part_of_the_suite_pays_its_share_of_collection_and_end(workers: int) -> None:
    # A worker's measured start-up is mostly its collection of the whole suite, and a run's
    # end mostly tearing down what it collected: `suitefit run -- PATH` pays the share of
    # both that its files' tests are. networkx's 6 files of 258 (2% of the tests): the plan
    # had predicted 5.3 s for a 0.94 s run, with the whole suite's 2.6 s start-up and end.
    from suitefit.costs import restrict
    from suitefit.model import Budget, CostModel, FileCost, WorkerCost
    from suitefit.plan import make_plan

    files = tuple(FileCost(f"tests/test_{i}.py", 1.0, 10.0, tests=100) for i in range(10))
    whole = CostModel(files=files, worker=WorkerCost(startup_s=2.0, baseline_mb=50.0), runs_used=1,
                      startup_by_workers={workers: 2.0}, collect_fraction=0.75, controller_s=0.3,
                      serial_end_s=1.2, controller_end_s=0.2,
                      outside_by_workers={workers: 2.0 + (0.3 if workers >= 2 else 0.0) + 1.5})
    keep = {"tests/test_0.py", "tests/test_1.py"}
    part = restrict(whole, keep.__contains__, "the paths given")
    assert part.selected_share == pytest.approx(0.2)
    assert part.notes[-1] == "the paths given select 2 of the 10 files (200 of 1,000 tests, 20%): the plan is theirs"
    budget = Budget(10_000, 2, workers=workers)
    scaled = make_plan(part, budget)
    unscaled = make_plan(replace(part, selected_share=1.0), budget)
    # start-up: 2.0 s less 80% of its 75% collection; end: 1.5 s beyond the model, of which
    # the plugins' unconfigure (once a process: the controller's again with workers) stays
    hooks = 0.2 * (2 if workers >= 2 else 1)
    saved = 2.0 * 0.75 * 0.8 + (1.5 - hooks) * 0.8
    assert unscaled.predicted_wall_s - scaled.predicted_wall_s == pytest.approx(saved, abs=0.01), scaled.reasons
    assert any("of which its collection 75% scaled to the 20% of the tests selected" in r for r in scaled.reasons)
    assert make_plan(whole, budget).predicted_wall_s > unscaled.predicted_wall_s  # more files, same fixed parts


def test_a_run_of_part_of_the_suite_keeps_its_share_of_what_collecting_grew_a_worker_by() -> None:
    # numpy/linalg (1% of the tests) was planned at the whole suite's 354 MiB baseline a worker:
    # 1.88 GiB predicted, 435 MiB measured.
    from suitefit.costs import restrict
    from suitefit.model import CostModel, FileCost, WorkerCost

    files = tuple(FileCost(f"tests/test_{i}.py", 1.0, 10.0, tests=100) for i in range(10))
    whole = CostModel(files=files, worker=WorkerCost(startup_s=2.0, baseline_mb=350.0), collect_mb=300.0)
    part = restrict(whole, {"tests/test_0.py", "tests/test_1.py"}.__contains__, "the paths given")
    assert part.worker.baseline_mb == pytest.approx(350.0 - 300.0 * 0.8)
    assert part.notes[-1].endswith("; a worker's baseline 110 MiB, less 240 MiB of what collecting the whole "
                                   "suite grew it by")
    again = restrict(part, {"tests/test_0.py"}.__contains__, "the paths given")  # half of that part
    assert again.worker.baseline_mb == pytest.approx(350.0 - 300.0 * 0.9)
    unknown = restrict(replace(whole, collect_mb=None), {"tests/test_0.py"}.__contains__, "the paths given")
    assert unknown.worker.baseline_mb == 350.0  # not recorded: not scaled


def test_runs_of_part_of_the_suite_do_not_set_the_measured_slowdown(tmp_path: Path) -> None:
    # numpy 2.4: three files of numpy/random side by side read 1.60x their serial time, the
    # whole suite 1.33x; the median of both kinds planned the whole suite at 1.47x, 306 s for
    # a 271 s run. Every command there names `numpy` (no testpaths): the whole run is the
    # one that collected the most.
    files = {f"t/test_{i}.py": SynthFile(f"t/test_{i}.py", 1.0) for i in range(6)}
    part = {p: files[p] for p in sorted(files)[:4]}

    def two(fs: dict[str, SynthFile]) -> dict[str, list[str]]:
        names = sorted(fs)
        return {"gw0": names[0::2], "gw1": names[1::2]}

    write_history(tmp_path / "h.sqlite", [SynthRun(_one_worker(files), files),
                                          SynthRun(two(files), files, kind="run", scale=1.2),
                                          *(SynthRun(two(part), part, kind="run", scale=1.8) for _ in range(3))])
    with History(tmp_path / "h.sqlite") as h:
        assert build_cost_model(h).slowdown[2] == pytest.approx(1.8)  # unmarked: 3 runs of 4
        for r in h.runs():
            h.merge_run_meta(r.id, paths_given=True)
        cm = build_cost_model(h)
    assert cm.slowdown[2] == pytest.approx(1.2)
    assert cm.run_slowdown[5] == pytest.approx(1.8)  # each run's own figure is still its own


def test_memory_a_worker_gives_back_later_was_not_kept(tmp_path: Path) -> None:
    """A worker's garbage rises and falls between files: read from one baseline to the next,
    files kept +60 and -60 MiB by turns (pytest's own suite: +683 MiB over its positive files
    for 74 MiB of growth), and a worker whose queue drew the negative ones was planned to
    shrink. What a file kept is what the worker never gave back afterwards."""
    paths = [f"tests/test_{i}.py" for i in range(6)]
    files = {p: SynthFile(p, 1.0) for p in paths}
    write_history(tmp_path / "h.sqlite", [SynthRun(_one_worker(files), files)])
    baselines = [100.0, 160.0, 100.0, 160.0, 100.0, 130.0]  # garbage twice, then 30 MiB for good
    import sqlite3

    with sqlite3.connect(tmp_path / "h.sqlite") as db:
        db.executemany("UPDATE files SET baseline_mb = ? WHERE path = ?", zip(baselines, paths, strict=True))
    with History(tmp_path / "h.sqlite") as h:
        cm = build_cost_model(h)
    kept = {fc.path: fc.kept_mb for fc in cm.files}
    assert kept == {**dict.fromkeys(paths[:4], 0.0), paths[4]: 30.0, paths[5]: 0.0}  # the last: no next file
    assert sum(kept.values()) == pytest.approx(baselines[-1] - min(baselines))  # still the worker's growth


WARM_PATHS = [f"tests/test_{i}.py" for i in range(8)]


def _warm_up_model(path: Path, gw1: Sequence[int] | None) -> CostModel:
    """The model of a serial run of ``WARM_PATHS`` and, unless ``gw1`` is None, a run with two
    workers: gw0 runs files 2, 3, 5, 6 and gw1 the files ``gw1``, in order. The truth: a 30 MiB
    warm-up, and files 0 and 5 keep 10 and 20 MiB of their own (each file's baseline as it
    began is written in: (run, path) -> MiB)."""
    import sqlite3

    paths = WARM_PATHS
    files = {p: SynthFile(p, 1.0) for p in paths}
    runs = [SynthRun(_one_worker(files), files)]
    starts = {(1, p): b for p, b in zip(paths, [100, 140, 140, 140, 140, 140, 160, 160], strict=True)}
    if gw1 is not None:
        runs.append(SynthRun({"gw0": [paths[i] for i in (2, 3, 5, 6)], "gw1": [paths[i] for i in gw1]},
                             files, kind="run"))
        starts.update({(2, paths[i]): b for i, b in ((2, 100), (3, 130), (5, 130), (6, 150))})
        starts.update({(2, paths[i]): b for i, b in zip(gw1, (100, 130, 140, 140), strict=True)})
    write_history(path, runs)
    with sqlite3.connect(path) as db:
        db.executemany("UPDATE files SET baseline_mb = ? WHERE run_id = ? AND path = ?",
                       [(b, r, p) for (r, p), b in starts.items()])
    with History(path) as h:
        return build_cost_model(h)


def test_a_worker_whose_first_file_was_the_serial_runs_last_still_tells_the_warm_up(tmp_path: Path) -> None:
    """The serial run's last file has no kept memory read (no file after it). A worker of a
    run with workers that starts with it took the warm-up there, with nothing to set it
    against: counted as a worker anyway, its warm-up read as nothing and halved the estimate
    (a calibration in CI, 40 MiB against 80)."""
    cm = _warm_up_model(tmp_path / "h.sqlite", gw1=(7, 0, 1, 4))
    assert cm.worker.warmup_mb == pytest.approx(30.0, abs=0.5)


def test_every_worker_warms_up_and_plans_start_each_worker_with_it(tmp_path: Path) -> None:
    """A worker keeps some memory over its first files whatever they are (caches, lazy
    imports): a serial run puts it on its first file once, a run with two workers on each
    one's first file. Read from the serial run alone, it was planned once in all (pytest's own
    suite: planned at 456 MiB after its profile, 569-581 MiB measured)."""
    paths = WARM_PATHS
    cm = _warm_up_model(tmp_path / "h.sqlite", gw1=(4, 0, 1, 7))
    assert cm.worker.warmup_mb == pytest.approx(30.0, abs=0.5)
    kept = {fc.path: fc.kept_mb for fc in cm.files}
    assert kept[paths[0]] == pytest.approx(10.0, abs=0.5)  # not 40 in the serial run, 10 beside
    assert kept[paths[5]] == pytest.approx(20.0, abs=0.5)
    assert kept[paths[2]] == pytest.approx(0.0, abs=0.5) and kept[paths[4]] == pytest.approx(0.0, abs=0.5)
    assert any("warm-up: a worker keeps 30 MiB" in n for n in cm.notes)
    from suitefit.model import Budget
    from suitefit.plan import make_plan

    plan = make_plan(cm, Budget(memory_mb=64_000.0, cpus=2, workers=2))
    assert plan.baseline_mb == pytest.approx(cm.worker.baseline_mb + 30.0, abs=0.5)
    assert any("30 MiB it keeps as it warms up" in r for r in plan.reasons)
    # two warmed workers, the files' own 30 MiB, and a file's 20 MiB peak at least
    assert plan.predicted_peak_mb >= plan.fixed_mb + 2 * (cm.worker.baseline_mb + 30.0) + 20.0 - 1.0

    # without a run with workers, nothing tells a warm-up from the first file's own memory
    alone = _warm_up_model(tmp_path / "s.sqlite", gw1=None)
    assert alone.worker.warmup_mb == 0.0
    assert {fc.path: fc.kept_mb for fc in alone.files}[paths[0]] == pytest.approx(40.0)


def test_the_warm_up_comes_off_each_chunk_once_and_a_run_of_one_file_does_not_hide_it(tmp_path: Path) -> None:
    """A split file first on both workers: each chunk's peak held one warm-up, not the two
    the run's file kept between them. And the serial reference is a run of the whole suite:
    a later `pytest tests/test_x.py` (one file, so nothing kept is read) leaves it as it was."""
    import json
    import sqlite3

    names = ["x", "a", "b", "c", "d"]
    paths = {n: f"tests/test_{n}.py" for n in names}
    files = {p: SynthFile(p, 1.0) for p in paths.values()}
    serial = SynthRun({"main": list(paths.values())}, files)
    two = SynthRun({"gw0": [paths[n] for n in "xac"], "gw1": [paths[n] for n in "xbd"]}, files, kind="run")
    one = SynthRun({"main": [paths["x"]]}, {paths["x"]: files[paths["x"]]})
    write_history(tmp_path / "h.sqlite", [serial, two, one])
    # a 30 MiB warm-up; b keeps 20 MiB of its own; x's own transient is 2 MiB serially, 5 beside
    rows = [(1, "main", "x", 100, 32), (1, "main", "a", 130, 10), (1, "main", "b", 130, 10),
            (1, "main", "c", 150, 10), (1, "main", "d", 150, 10),
            (2, "gw0", "x", 100, 35), (2, "gw0", "a", 130, 10), (2, "gw0", "c", 130, 10),
            (2, "gw1", "x", 100, 35), (2, "gw1", "b", 130, 10), (2, "gw1", "d", 150, 10),
            (3, "main", "x", 100, 32)]
    with sqlite3.connect(tmp_path / "h.sqlite") as db:
        db.executemany("UPDATE files SET baseline_mb = ?, peak_mb = ? WHERE run_id = ? AND worker = ? AND path = ?",
                       [(b, pk, r, w, paths[n]) for r, w, n, b, pk in rows])
        db.execute("UPDATE runs SET meta = ? WHERE id = 3", [json.dumps({"paths_given": True})])
    with History(tmp_path / "h.sqlite") as h:
        cm = build_cost_model(h)
    assert cm.worker.warmup_mb == pytest.approx(30.0, abs=0.5)  # not 0: run 3 is not the reference
    fc = {f.path: f for f in cm.files}
    assert fc[paths["x"]].peak_mb == pytest.approx(5.0, abs=0.5)  # each chunk less its own worker's 30
    assert fc[paths["x"]].kept_mb == pytest.approx(0.0, abs=0.5)
    assert fc[paths["b"]].kept_mb == pytest.approx(20.0, abs=0.5)


@given(data=st.data())
@settings(max_examples=200, deadline=None)
def test_the_warm_up_estimate_recovers_what_every_worker_paid(data: st.DataObject) -> None:
    """``costs._warm_up`` on generated histories: a serial run and runs with 2-4 workers, each
    worker paying the same warm-up on its first file, every file keeping its own memory. The
    estimate is that warm-up, and what is left on each file is its own."""
    from suitefit.costs import _warm_up

    n_files = data.draw(st.integers(6, 24), label="files")
    paths = [f"t{i}.py" for i in range(n_files)]
    own = {p: data.draw(st.sampled_from([0.0, 0.0, 1.5, 4.0, 12.0]), label=f"own {p}") for p in paths}
    warm = data.draw(st.floats(0.0, 60.0), label="warm-up")
    rows: list[tuple[int, str, str]] = []
    kept: dict[tuple[int, str], float] = {}

    def run(run_id: int, placement: dict[str, list[str]]) -> None:
        for worker, ps in placement.items():
            for i, p in enumerate(ps):
                rows.append((run_id, worker, p))
                if i < len(ps) - 1:  # the last file on a worker: nothing after it to read
                    kept[(run_id, p)] = kept.get((run_id, p), 0.0) + own[p] + (warm if i == 0 else 0.0)

    serial_order = data.draw(st.permutations(paths), label="serial order")
    run(1, {"main": list(serial_order)})
    n_of = {1: 0}
    for run_id in range(2, 2 + data.draw(st.integers(1, 3), label="runs with workers")):
        n = data.draw(st.integers(2, min(4, n_files // 2)), label=f"workers of {run_id}")
        order = data.draw(st.permutations(paths), label=f"order of {run_id}")
        # the serial run's last file (no kept memory read) is no worker's first here
        assume(all(order[k * (n_files // n)] != serial_order[-1] for k in range(n)))
        per = n_files // n
        placement = {f"gw{k}": list(order[k * per:(k + 1) * per if k < n - 1 else n_files]) for k in range(n)}
        run(run_id, placement)
        n_of[run_id] = n
    est, net, taken = _warm_up(rows, kept, n_of, 1)
    assert est == pytest.approx(warm, abs=0.1)
    for (run_id, p), k in net.items():
        n_here = sum(1 for r, _, q in rows if r == run_id and q == p)  # one row a file here: no chunks
        assert n_here == 1 and k == pytest.approx(own[p], abs=0.1), (run_id, p, k, own[p])
    firsts = {(r, w): p for r, w, p in reversed(rows)}  # each sequence's first file
    for (r, w), p in firsts.items():
        assert taken.get((r, w, p), 0.0) == pytest.approx(warm, abs=0.1)
