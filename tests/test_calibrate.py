"""A profile's calibration: a slice of its files run side by side, so the first plan knows contention.

scipy.sparse's first plan after a serial profile predicted 138 s for a 213 s run (its files
1.57x slower beside each other); after a calibration of 25 of its files (10.7 s alone) it
predicted 247 s. These tests watch it happen: which files ran, where, recorded how, and
what the cost model and the plan then read from it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from clihelp import suitefit
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from plan_synth import SynthFile, SynthFixture, SynthRun, write_history
from venvs import OLDEST, make_venv

from suitefit.costs import build_cost_model
from suitefit.history import History
from suitefit.model import Budget, CostModel, FileCost, WorkerCost
from suitefit.plan import make_plan
from suitefit.plan.calibration import WINDOW_MIN_S, choose

NO_CONTENTION = "if workers do not slow each other"


# -- the cost model reads it -------------------------------------------------------------


def test_a_calibration_measures_contention_and_startup_until_a_whole_run_measures_them(tmp_path: Path) -> None:
    # two tests a second in every file: no per-test cost to tell (``slice_factor``)
    files = {f"tests/test_{i}.py": SynthFile(f"tests/test_{i}.py", 1.0 + i % 3, tests=2 * (1 + i % 3))
             for i in range(8)}
    paths = list(files)
    serial = SynthRun({"main": paths}, files)
    sliced = paths[:5]
    # side by side the slice took 1.8x, one file 2.6x; its workers took 2.5 s to start
    there = {p: SynthFile(p, files[p].wall_s * (2.6 if p == paths[0] else 1.8), tests=files[p].tests)
             for p in sliced}
    calib = SynthRun({"gw0": sliced[::2], "gw1": sliced[1::2]}, there, kind="calibrate", startup_s=2.5)
    write_history(tmp_path / "h.sqlite", [serial, calib])
    with History(tmp_path / "h.sqlite") as h:
        cm = build_cost_model(h)
    expected = sum(there[p].wall_s for p in sliced) / sum(files[p].wall_s for p in sliced)
    assert cm.slowdown == {2: pytest.approx(expected)}
    assert cm.startup_by_workers[2] == pytest.approx(2.5)
    # the slice's times are not its files' costs: they were timed alone already
    assert {f.path: f.wall_s for f in cm.files} == {p: pytest.approx(f.wall_s) for p, f in files.items()}
    assert cm.run_slowdown == {2: pytest.approx(expected)}  # run 2, the calibration
    plan = make_plan(cm, Budget(10_000, 2, workers=2))
    assert plan.slow == pytest.approx(expected)

    # a whole run with two workers measures 1.3x: from then on that is the figure
    whole = SynthRun({"gw0": paths[::2], "gw1": paths[1::2]}, files, kind="run", scale=1.3)
    write_history(tmp_path / "h2.sqlite", [serial, calib, whole])
    with History(tmp_path / "h2.sqlite") as h:
        cm = build_cost_model(h)
    assert cm.slowdown == {2: pytest.approx(1.3)}
    assert cm.run_slowdown == {2: pytest.approx(expected), 3: pytest.approx(1.3)}


def test_a_slice_of_fast_tests_is_read_at_the_suites_own_rate_of_tests(tmp_path: Path) -> None:
    """With workers each test pays a share of xdist's reporting: numpy's lib and linalg slice
    (538 tests a serial second, the suite 72) read x1.89 where whole runs measured x1.07-1.30.
    Here every file takes 1.1x its serial time plus 2 ms a test: the slice's fast files would
    say x1.78 time-weighted, the suite (mostly slow files) takes x1.16."""
    per_test = 0.002

    def side_by_side(f: SynthFile) -> SynthFile:
        return SynthFile(f.path, 1.1 * f.wall_s + per_test * f.tests, tests=f.tests)

    fast = {f"tests/test_fast_{i}.py": SynthFile(f"tests/test_fast_{i}.py", 0.3 + 0.1 * i, tests=150 + 60 * i)
            for i in range(4)}
    slow = {f"tests/test_slow_{i}.py": SynthFile(f"tests/test_slow_{i}.py", 0.2 + 0.1 * i, tests=4)
            for i in range(2)}
    long = {f"tests/test_long_{i}.py": SynthFile(f"tests/test_long_{i}.py", 10.0 + i, tests=20) for i in range(4)}
    files = {**fast, **slow, **long}
    sliced = [*fast, *slow]
    calib = SynthRun({"gw0": sliced[::2], "gw1": sliced[1::2]}, {p: side_by_side(files[p]) for p in sliced},
                     kind="calibrate")
    write_history(tmp_path / "h.sqlite", [SynthRun({"main": list(files)}, files), calib])
    with History(tmp_path / "h.sqlite") as h:
        cm = build_cost_model(h)
    work = sum(f.wall_s for f in files.values())
    whole = sum(side_by_side(f).wall_s for f in files.values()) / work
    slice_alone = sum(side_by_side(files[p]).wall_s for p in sliced) / sum(files[p].wall_s for p in sliced)
    assert slice_alone > 1.7 and whole < 1.2
    assert cm.slowdown == {2: pytest.approx(whole)}

    # a whole run at the same costs measures the same figure, time-weighted as ever
    run = SynthRun({"gw0": list(files)[::2], "gw1": list(files)[1::2]},
                   {p: side_by_side(f) for p, f in files.items()}, kind="run")
    write_history(tmp_path / "h2.sqlite", [SynthRun({"main": list(files)}, files), calib, run])
    with History(tmp_path / "h2.sqlite") as h:
        assert build_cost_model(h).slowdown == {2: pytest.approx(whole)}


@settings(max_examples=200, deadline=None)
@given(a=st.floats(0.6, 2.0), b=st.floats(0.0, 0.004),
       files=st.lists(st.tuples(st.floats(0.05, 5.0), st.integers(1, 2000)), min_size=3, max_size=25),
       rate=st.floats(0.0, 3000.0))
def test_slice_factor_reads_a_slice_of_known_costs_at_the_suites_rate(
        a: float, b: float, files: list[tuple[float, int]], rate: float) -> None:
    """The fit that production reads a calibration with (``costs.slice_factor``): on files
    that cost exactly ``a * serial + b * tests`` it gives back ``a + b * rate``, the rate held
    within the slice's own; read at the slice's own rate it is the time-weighted figure."""
    from suitefit.costs import slice_factor

    triples = [(a * s + b * k, s, float(k)) for s, k in files]
    kept = [(t, s, k) for t, s, k in triples if 1 / 3 <= t / s <= 3]
    assume(len(kept) >= 3)
    rates = [k / s for _, s, k in kept]
    ss, sk = sum(s for _, s, _ in kept), sum(k for *_, k in kept)
    own = sk / ss
    f = slice_factor(triples, rate)
    assert f is not None
    assert slice_factor(triples, own) == pytest.approx(sum(t for t, *_ in kept) / ss, rel=1e-6)
    spread = max(rates) - min(rates) > 1e-3 * max(rates)
    if spread and b > 1e-5:
        assert f == pytest.approx(a + b * min(max(rate, min(rates)), max(rates)), rel=1e-6, abs=1e-9)


def _stall(db: Path, run_id: int, s: float) -> None:
    """test_0's first test took ``s`` more in run ``run_id`` (its file as much)."""
    with sqlite3.connect(db) as c:
        c.execute("UPDATE tests SET wall_s = wall_s + ? WHERE run_id = ? AND nodeid = 'tests/test_0.py::test_0'",
                  (s, run_id))
        c.execute("UPDATE files SET wall_s = wall_s + ? WHERE run_id = ? AND path = 'tests/test_0.py'", (s, run_id))


def test_a_calibrations_first_uses_are_left_out_of_its_contention_not_an_even_slowdown(tmp_path: Path) -> None:
    """networkx's five packages: 7 of the slice's 478 tests held 1.2 s of its 3.0 s (imports
    inside functions, caches an earlier file had filled in the profile), and the slice read
    x1.45 where whole runs then measured x0.99: the first plan predicted 20.1 s for 14.5 s."""
    from suitefit.cli.calibrate import _measured_line
    from suitefit.config import load_config

    files = {f"tests/test_{i}.py": SynthFile(f"tests/test_{i}.py", 1.0, tests=10) for i in range(8)}
    paths = list(files)
    sliced = paths[:6]
    # side by side: 1.3x each, one file evenly 2.5x (contention however large, not a first use)
    there = {p: SynthFile(p, files[p].wall_s * (2.5 if p == paths[1] else 1.3), tests=10) for p in sliced}
    runs = [SynthRun({"main": paths}, files),
            SynthRun({"gw0": sliced[::2], "gw1": sliced[1::2]}, there, kind="calibrate", startup_s=2.5)]
    db = tmp_path / "h.sqlite"
    write_history(db, runs)
    with History(db) as h:
        evenly = build_cost_model(h).slowdown[2]
    _stall(db, 2, 1.5)  # test_0's first test pays a first use of 1.5 s in its fresh worker (0.1 s serially)
    (tmp_path / "pyproject.toml").write_text("")
    with History(db) as h:
        cm = build_cost_model(h)
        line = _measured_line(h, load_config(tmp_path), 2, 2)
    assert evenly == pytest.approx((1.3 * 5 + 2.5) / 6)  # the even 2.5x counted whole
    # the first use is not contention: that test counts at its serial time (0.1 s, not 0.13)
    assert cm.slowdown == {2: pytest.approx(evenly - 0.03 / 6)}
    assert cm.first_uses == {2: (pytest.approx(1.5 + 0.13 - 0.1), 1)}
    assert "their time alone (1 test(s) left out for 1.5 s over their serial time: one-off stalls" in line, line

    # the same test as slow in a whole run counts there: every worker pays what it pays
    whole = SynthRun({"gw0": paths[::2], "gw1": paths[1::2]}, files, kind="run", scale=1.3)
    write_history(tmp_path / "h2.sqlite", [runs[0], whole])
    _stall(tmp_path / "h2.sqlite", 2, 1.5)
    with History(tmp_path / "h2.sqlite") as h:
        cm = build_cost_model(h)
    assert cm.slowdown == {2: pytest.approx((1.3 * 8 + 1.5) / 8)} and not cm.first_uses


def test_a_stall_in_the_serial_reference_is_not_read_as_a_file_running_faster_beside_others(tmp_path: Path) -> None:
    """The 50,000-test suite: in its serial profile one test of 166 took 618 ms (most likely a
    full collection of a heap holding every item), 6 ms in the calibration. Its file looked long,
    so the calibration ran it (longest first), and read x0.58 for it: with a second such file
    the slice said x1.28, the first plan 48 s for two workers that took 72 s."""
    from suitefit.cli.calibrate import _measured_line
    from suitefit.config import load_config

    files = {f"tests/test_{i}.py": SynthFile(f"tests/test_{i}.py", 1.0, tests=10) for i in range(8)}
    paths = list(files)
    sliced = paths[:6]
    there = {p: SynthFile(p, files[p].wall_s * 1.3, tests=10) for p in sliced}  # evenly 1.3x side by side
    runs = [SynthRun({"main": paths}, files),
            SynthRun({"gw0": sliced[::2], "gw1": sliced[1::2]}, there, kind="calibrate", startup_s=2.5)]
    db = tmp_path / "h.sqlite"
    write_history(db, runs)
    _stall(db, 1, 1.5)  # the serial run's first test of test_0 stalled for 1.5 s
    (tmp_path / "pyproject.toml").write_text("")
    with History(db) as h:
        cm = build_cost_model(h)
        line = _measured_line(h, load_config(tmp_path), 2, 2)
    # read against the stall, test_0 would be x0.52 and the slice x1.04
    assert cm.slowdown == {2: pytest.approx(1.3)}
    assert cm.reference_stalls == {2: (pytest.approx(1.6 - 0.13 / 1.3), 1)} and not cm.first_uses
    assert "(1 of its test(s) stalled in the serial run, 1.5 s more than their time here explains" in line, line
    # the file's own cost for plans is still what the serial run measured of it
    assert next(f for f in cm.files if f.path == "tests/test_0.py").wall_s == pytest.approx(2.5)


def test_a_reference_stall_comes_off_the_run_it_happened_in_and_not_off_a_fixtures_setup(tmp_path: Path) -> None:
    """With several serial runs the reference is their median: the newest run's stall is
    taken off that run's time, and the median taken again (never taken off twice, never
    below what the other runs say). A stall in a file whose fixture setup that run left out
    of the file's time comes off all the same."""
    paths = [f"tests/test_{i}.py" for i in range(8)]
    sliced = paths[:6]

    def serial(first_s: float) -> SynthRun:
        return SynthRun({"main": paths}, {p: SynthFile(p, first_s if p == paths[0] else 1.0, tests=10) for p in paths})

    there = {p: SynthFile(p, 1.6 if p == paths[0] else 1.3, tests=10) for p in sliced}
    calibration = SynthRun({"gw0": sliced[::2], "gw1": sliced[1::2]}, there, kind="calibrate", startup_s=2.5)
    db = tmp_path / "h.sqlite"
    write_history(db, [serial(1.2), serial(1.3), serial(1.0), calibration])
    _stall(db, 3, 1.5)  # the newest serial run: test_0 at 2.5 s, its median 1.3 s
    with History(db) as h:
        cm = build_cost_model(h)
    # test_0 against median(1.2, 1.3, 1.0 + 1.5 - 1.48) = 1.2, not 1.3 (no correction) nor 1.02
    assert cm.slowdown == {2: pytest.approx((1.6 + 1.3 * 5) / (1.2 + 5.0))}
    assert cm.reference_stalls == {4: (pytest.approx(0.1), 1)}  # what came off the reference

    # the file sets up a 2 s session fixture (left out of its time in both runs), and a test
    # of it stalled for 1.5 s in the serial run
    files = {p: SynthFile(p, 1.0, tests=10, fixtures=("db",) if p == paths[0] else ()) for p in paths}
    there = {p: SynthFile(p, 1.3, tests=10, fixtures=files[p].fixtures) for p in sliced}
    fx = [SynthFixture("db", setup_s=2.0)]
    db2 = tmp_path / "h2.sqlite"
    write_history(db2, [SynthRun({"main": paths}, files, fixtures=fx),
                        SynthRun({"gw0": sliced[::2], "gw1": sliced[1::2]}, there, fixtures=fx, kind="calibrate",
                                 startup_s=2.5)])
    _stall(db2, 1, 1.5)
    with History(db2) as h:
        cm = build_cost_model(h)
    assert cm.slowdown[2] == pytest.approx(1.3, rel=0.02)  # against the stalled 2.5 s: x1.04
    assert cm.reference_stalls[2][1] == 1


def test_the_calibrations_line_says_what_it_measured_and_what_plans_use(tmp_path: Path) -> None:
    from suitefit.cli.calibrate import _measured_line
    from suitefit.config import load_config

    files = {f"tests/test_{i}.py": SynthFile(f"tests/test_{i}.py", 1.0) for i in range(6)}
    paths = list(files)
    runs = [SynthRun({"main": paths}, files),
            SynthRun({"gw0": paths[::2], "gw1": paths[1::2]}, files, kind="run", scale=1.3),
            SynthRun({"gw0": paths[:3:2], "gw1": paths[1:4:2]}, files, kind="calibrate", scale=1.8, startup_s=2.5)]
    write_history(tmp_path / "h.sqlite", runs)
    (tmp_path / "pyproject.toml").write_text("")
    with History(tmp_path / "h.sqlite") as h:
        line = _measured_line(h, load_config(tmp_path), 3, 2)
    assert line.startswith("calibration run 3 (")
    assert ("side by side on 2 workers, files took x1.80 their time alone; a worker started in 2.5 s (1.5 s alone); "
            "plans use x1.30, measured by whole runs with 2 workers") in line, line


# -- what it chooses (pure) ---------------------------------------------------------------


def _costs(files: list[FileCost], fixtures: tuple = (), baseline_mb: float = 100.0) -> CostModel:
    return CostModel(files=tuple(files), fixtures=fixtures, worker=WorkerCost(startup_s=1.0, baseline_mb=baseline_mb))


def test_it_chooses_short_light_passing_files_and_leaves_hogs_pools_and_failures_out() -> None:
    from suitefit.model import FixtureCost

    normal = [FileCost(f"tests/test_n{i}.py", 0.2 + 0.05 * i, 5.0) for i in range(8)]
    odd = [
        FileCost("tests/test_hog.py", 0.3, 400.0),  # touches much memory: priced by its faults
        FileCost("tests/test_pool.py", 0.3, 5.0, fixtures=("pool",)),  # its fixture starts processes
        FileCost("tests/test_failed.py", 0.3, 5.0, trusted=False),  # its time is a failure's
        FileCost("tests/test_tiny.py", 0.01, 1.0),  # too short to say anything
        FileCost("tests/test_long.py", 30.0, 5.0),  # longer than a third of a window
        FileCost("tests/test_new.py", 0.3, 5.0, measured=False),
    ]
    pool = FixtureCost("pool", "session", 1.0, procs=3, mb=300.0, files=("tests/test_pool.py",))
    pick = choose(_costs(normal + odd, (pool,)), cpus=2, memory_mb=8000)
    assert pick.workers == 2
    work = sum(f.wall_s for f in normal + odd if f.measured)
    assert pick.window_s == pytest.approx(max(WINDOW_MIN_S, 0.05 * work))
    assert set(pick.files) <= {f.path for f in normal} and len(pick.files) >= 3
    walls = {f.path: f.wall_s for f in normal}
    assert [walls[p] for p in pick.files] == sorted((walls[p] for p in pick.files), reverse=True)
    assert sum(walls[p] for p in pick.files) <= pick.window_s * 2 + 1e-9


def test_it_runs_on_one_worker_a_cpu_as_far_as_memory_allows_and_says_why_not() -> None:
    normal = [FileCost(f"tests/test_n{i}.py", 0.3, 10.0) for i in range(40)]
    assert choose(_costs(normal), cpus=4, memory_mb=8000).workers == 4
    assert choose(_costs(normal), cpus=16, memory_mb=100_000).workers == 8  # at most 8
    # 1000 MiB a worker, 990 MiB for xdist's controller
    assert choose(_costs(normal, baseline_mb=990.0), cpus=4, memory_mb=3000).workers == 2
    assert choose(_costs(normal, baseline_mb=990.0), cpus=4, memory_mb=4000).workers == 3
    none = choose(_costs(normal, baseline_mb=990.0), cpus=4, memory_mb=1500)
    assert not none.files and "do not fit the budget" in none.why
    # eight CPUs, memory for three workers: four files are enough for three
    four = choose(_costs(normal[:4], baseline_mb=990.0), cpus=8, memory_mb=4000)
    assert four.workers == 3 and len(four.files) == 4, four
    one_cpu = choose(_costs(normal), cpus=1, memory_mb=8000)
    assert not one_cpu.files and "no workers" in one_cpu.why
    few = choose(_costs(normal[:2]), cpus=2, memory_mb=8000)
    assert not few.files and "2 file(s)" in few.why and "3 are needed" in few.why


def test_a_suite_of_longer_files_is_calibrated_on_its_shortest() -> None:
    """No file is a third of a 1.5 s window: the three shortest that fit one (pool-split's case)."""
    files = [FileCost(f"tests/test_{w}.py", w, 10.0) for w in (2.0, 0.9, 1.2, 3.0, 1.1, 1.0)]
    pick = choose(_costs(files), cpus=2, memory_mb=8000)
    assert pick.window_s == WINDOW_MIN_S
    assert pick.files == ("tests/test_1.1.py", "tests/test_1.0.py", "tests/test_0.9.py")


# -- a real profile, a real calibration ---------------------------------------------------


def _project(root: Path, *, extra: str = "") -> None:
    (root / "tests").mkdir(exist_ok=True)
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n' + extra)
    # CPU-bound: side by side they share what the machine has. Short enough (0.06-0.11 s of
    # CPU) that on a loaded CI machine none takes a third of the 1.5 s window a worker gets
    # (at 0.12-0.27 s the two longest did once, and the slice left them out)
    for i in range(6):
        (root / "tests" / f"test_cpu{i}.py").write_text(
            "import time\n"
            f"def test_burn():\n    end = time.process_time() + {0.06 + 0.01 * i}\n"
            "    while time.process_time() < end:\n        pass\n")
    (root / "tests" / "test_hog.py").write_text(
        "def test_hog():\n    x = bytearray(200 * 2**20)\n    for i in range(0, len(x), 4096):\n        x[i] = 1\n")


def _runs(root: Path) -> list[tuple[int, str, int, str]]:
    with sqlite3.connect(root / ".suitefit" / "history.sqlite") as c:
        return [tuple(r) for r in c.execute("SELECT id, kind, workers, status FROM runs ORDER BY id")]


@pytest.mark.parametrize("pair", [None, pytest.param(OLDEST, marks=pytest.mark.slow, id="oldest")],
                         ids=lambda p: "current" if p is None else "oldest")
def test_a_profile_calibrates_on_workers_and_the_next_plan_knows_the_contention(
        tmp_path: Path, pair: tuple[str, ...] | None) -> None:
    """On the newest and the oldest pytest/xdist supported (xdist 3.5 has no
    --no-loadscope-reorder: the calibration does not pass it there)."""
    python = str(make_venv(pair, with_suitefit=True)) if pair else None
    _project(tmp_path)
    prof = suitefit("profile", "--", "-q", cwd=tmp_path, python=python)
    assert prof.returncode == 0, prof.stderr
    assert "suitefit: calibrating: 6 file(s)" in prof.stderr, prof.stderr
    line = next(ln for ln in prof.stderr.splitlines() if ln.startswith("suitefit: calibration run 2"))
    assert "side by side on 2 workers, files took x" in line and "a worker started in" in line, line
    assert line.endswith("plans use it until a whole run with 2 workers measures its own"), line
    assert _runs(tmp_path) == [(1, "profile", 1, "passed"), (2, "calibrate", 2, "passed")]
    with sqlite3.connect(tmp_path / ".suitefit" / "history.sqlite") as c:
        ran = {(r[0], r[1]) for r in c.execute("SELECT path, worker FROM files WHERE run_id = 2")}
    assert {p for p, _ in ran} == {f"tests/test_cpu{i}.py" for i in range(6)}  # not the hog
    assert {w for _, w in ran} == {"gw0", "gw1"}  # side by side, in xdist workers
    assert "6 passed" in (tmp_path / ".suitefit" / "calibrate-2.log").read_text()  # pytest's output, kept
    assert not (tmp_path / ".suitefit" / "calibrate-2.txt").exists()  # its input, not
    plan = suitefit("plan", "--workers", "2", cwd=tmp_path, python=python)
    assert plan.returncode == 0, plan.stderr
    assert NO_CONTENTION not in plan.stdout and "measured slowdown against a serial run: 2 workers x" in plan.stdout
    # the report after a profile is the profile's, not its calibration's slice
    md = suitefit("report", "--markdown", cwd=tmp_path)
    assert md.returncode == 0 and "run 1" in md.stdout and "run 2" not in md.stdout, md.stdout
    assert "run 2" in suitefit("report", "2", "--markdown", cwd=tmp_path).stdout
    # until a whole run with 2 workers measures them, 2 workers rest on the calibration alone
    # (a plan tries a count it rules out within CALIBRATION_DOUBT); the run's figure replaces it
    hist = tmp_path / ".suitefit" / "history.sqlite"
    with History(hist) as h:
        assert build_cost_model(h).slowdown_unconfirmed == {2}
    ran = suitefit("run", "--workers", "2", "--", "-q", cwd=tmp_path, python=python)
    assert ran.returncode == 0, ran.stderr
    with History(hist) as h:
        costs = build_cost_model(h)
    assert 2 in costs.slowdown and costs.slowdown_unconfirmed == frozenset()


@pytest.mark.parametrize("pair", [None, pytest.param(OLDEST, marks=pytest.mark.slow, id="oldest")],
                         ids=lambda p: "current" if p is None else "oldest")
def test_the_calibrations_workers_get_the_thread_pools_a_plans_workers_get(
        tmp_path: Path, pair: tuple[str, ...] | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """One way to run workers: the calibration measures contention for `suitefit run`'s
    workers, which share the CPUs out among their thread pools (``threads.py``), and so does
    a profile with workers (``session._share_cpus``). Unpinned, scipy's conftest called
    threadpoolctl at every test's setup under xdist (~1.6 ms a test): the slice read x1.44
    (median of seven), x1.33 pinned, where whole runs measured x1.09-1.18. A variable the user set stays the
    user's; a user's own `pytest -n 2 --suitefit` is left as the user runs it."""
    import json
    import os
    import subprocess
    import sys

    from suitefit.budget import detect_cpus
    from suitefit.threads import THREAD_VARS, threads_per_worker

    for v in THREAD_VARS:  # this test's own process may run pinned (the project tests itself so)
        monkeypatch.delenv(v, raising=False)
    python = str(make_venv(pair, with_suitefit=True)) if pair else None
    _project(tmp_path)
    (tmp_path / "tests" / "conftest.py").write_text(
        "import json, os\n"
        "def pytest_configure(config):\n"
        "    w = os.environ.get('PYTEST_XDIST_WORKER')\n"
        "    if w:\n"
        f"        seen = {{v: os.environ.get(v) for v in {THREAD_VARS!r}}}\n"
        "        with open(os.path.join(str(config.rootpath), 'threads.jsonl'), 'a') as f:\n"
        "            f.write(json.dumps({'worker': w, 'seen': seen}) + '\\n')\n")
    user = {"MKL_NUM_THREADS": "3"}

    def want(workers: int) -> dict[str, str | None]:
        per = threads_per_worker(detect_cpus()[0], workers)
        assert per is not None
        return {v: user.get(v, str(per)) for v in THREAD_VARS}

    def workers_saw(*args: str) -> list[dict[str, str | None]]:
        (tmp_path / "threads.jsonl").unlink(missing_ok=True)
        res = suitefit(*args, cwd=tmp_path, env=user, python=python)
        assert res.returncode == 0, res.stderr
        return [json.loads(ln)["seen"] for ln in (tmp_path / "threads.jsonl").read_text().splitlines()]

    seen = workers_saw("profile", "--", "-q")  # its calibration's workers write; the serial run has none
    with History(tmp_path / ".suitefit" / "history.sqlite") as h:
        calib = h.run(2)
    assert calib.kind == "calibrate" and calib.workers >= 2, calib
    assert len(seen) == calib.workers and all(s == want(calib.workers) for s in seen), (seen, want(calib.workers))
    assert calib.meta_dict["threads_per_worker"] == threads_per_worker(detect_cpus()[0], calib.workers)
    assert set(calib.meta_dict["pinned_threads"]) == set(THREAD_VARS) - set(user)
    # and so do a plan's run and a profile with workers, however -n is given
    for args in (("run", "--workers", "2", "--", "-q"), ("profile", "-n", "2", "--", "-q"),
                 ("profile", "--", "-q", "-n", "2"), ("profile", "--", "-q", "-n", "4", "--maxprocesses", "2")):
        got = workers_saw(*args)
        assert len(got) == 2 and all(s == want(2) for s in got), (args, got, want(2))
    # a user's own measured run is measured as the user runs it
    env = {**os.environ, **user}
    for k in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"):
        env.pop(k, None)
    (tmp_path / "threads.jsonl").unlink()
    own = subprocess.run([python or sys.executable, "-m", "pytest", "-q", "-n", "2", "--suitefit"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=300)
    assert own.returncode == 0, own.stdout + own.stderr
    mine = [json.loads(ln)["seen"] for ln in (tmp_path / "threads.jsonl").read_text().splitlines()]
    assert len(mine) == 2 and all(s == {v: user.get(v) for v in THREAD_VARS} for s in mine), mine


def test_only_workers_on_this_machine_share_its_cpus(pytester: pytest.Pytester) -> None:
    """``--tx`` as xdist reads it: ``popen`` workers run here and inherit the environment the
    thread pools are set in; an ``ssh=`` or ``socket=`` worker runs on another machine's CPUs."""
    from suitefit.session import _local_workers

    config = pytester.parseconfig("--tx", "2*popen", "--tx", "ssh=build-host//python=python3",
                                  "--tx", "popen//python=python3", "--tx", "socket=192.168.1.2:8888",
                                  "--tx", "3*ssh=other//chdir=/tmp", "--tx", "id=mine//popen",
                                  "--tx", "popen//via=gw-host")
    assert _local_workers(config) == 4
    assert _local_workers(pytester.parseconfig("--tx", "ssh=a", "--tx", "ssh=b")) == 0
    assert _local_workers(pytester.parseconfig()) == 0


def test_no_calibrate_and_the_setting_leave_the_profile_serial(tmp_path: Path) -> None:
    _project(tmp_path)
    assert suitefit("profile", "--no-calibrate", "--", "-q", cwd=tmp_path).returncode == 0
    assert [r[1] for r in _runs(tmp_path)] == ["profile"]
    assert NO_CONTENTION in suitefit("plan", "--workers", "2", cwd=tmp_path).stdout
    _project(tmp_path, extra="[tool.suitefit]\ncalibrate = false\n")
    res = suitefit("profile", "--", "-q", cwd=tmp_path)
    assert res.returncode == 0 and "calibrat" not in res.stderr, res.stderr
    assert [r[1] for r in _runs(tmp_path)] == ["profile", "profile"]
    # the verb runs it on demand, from the history already there
    res = suitefit("calibrate", "--", "-q", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "suitefit: calibration run 3" in res.stderr and "Traceback" not in res.stderr
    assert NO_CONTENTION not in suitefit("plan", "--workers", "2", cwd=tmp_path).stdout
    # workers pinned to one: no plan runs files side by side, so nothing to calibrate
    _project(tmp_path, extra="[tool.suitefit]\nworkers = 1\n")
    res = suitefit("profile", "--", "-q", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "suitefit: calibration skipped: [tool.suitefit] workers = 1" in res.stderr, res.stderr
    assert [r[1] for r in _runs(tmp_path)] == ["profile", "profile", "calibrate", "profile"]


def test_calibrate_without_a_serial_run_says_why_in_one_line(tmp_path: Path) -> None:
    _project(tmp_path)
    res = suitefit("calibrate", cwd=tmp_path)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [
        "suitefit: calibration skipped: no serial run in the history to compare with (`suitefit profile` first)"]


def test_a_test_that_fails_beside_other_files_is_named_and_the_profile_still_passes(tmp_path: Path) -> None:
    """Serially test_a_sets.py runs first and test_b_needs.py passes; the calibration hands
    files out longest first (and xdist before 3.8, the most tests first), so it runs before
    its provider, the shortest file, on whichever worker, and fails."""
    _project(tmp_path)
    (tmp_path / "tests" / "test_a_sets.py").write_text(
        "import builtins, time\n"
        "def test_sets():\n    time.sleep(0.08)\n    builtins.suitefit_state = 1\n")
    (tmp_path / "tests" / "test_b_needs.py").write_text(
        "import builtins, time\nimport pytest\n"
        "@pytest.mark.parametrize('i', range(8))\n"
        "def test_needs(i):\n    time.sleep(0.04)\n    assert getattr(builtins, 'suitefit_state', 0) == 1\n")
    prof = suitefit("profile", "--", "-q", cwd=tmp_path)
    assert prof.returncode == 0, prof.stdout + prof.stderr
    line = next(ln for ln in prof.stderr.splitlines() if ln.startswith("suitefit: calibration run 2"))
    assert "8 test(s) failed beside other files that passed in the serial profile" in line, line
    assert "`suitefit report` shows run 2" in line
    # the failing file is not a measure of contention, and the profile's costs stand
    with History(tmp_path / ".suitefit" / "history.sqlite") as h:
        cm = build_cost_model(h)
    assert 2 in cm.slowdown
    assert {f.path for f in cm.files if not f.trusted} == set()


def test_a_profile_whose_arguments_choose_workers_or_turn_xdist_off_is_not_calibrated() -> None:
    from suitefit.cli.calibrate import skip_reason

    assert skip_reason(["-q", "tests", "-k", "not slow"]) is None
    for args in (["-n", "2"], ["-n4"], ["--dist=load"], ["--numprocesses", "auto"], ["--maxprocesses=2"]):
        assert skip_reason(args) == "the arguments choose xdist's workers themselves", args
    for args in (["-p", "no:xdist"], ["-pno:xdist"]):
        assert skip_reason(args) == "the arguments turn pytest-xdist off", args


def test_a_calibration_that_runs_no_tests_says_so_and_changes_no_plan(tmp_path: Path) -> None:
    """Arguments other than the profile's (here only the hog, which the slice leaves out):
    pytest collects nothing of the slice and exits 5; one line, exit 1, nothing learned."""
    _project(tmp_path)
    assert suitefit("profile", "--no-calibrate", "--", "-q", cwd=tmp_path).returncode == 0
    res = suitefit("calibrate", "--", "tests/test_hog.py", cwd=tmp_path)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.strip().splitlines()[-1].startswith(
        "suitefit: calibration run 2 did not finish: pytest collected no tests (exit 5)"), res.stderr
    assert _runs(tmp_path) == [(1, "profile", 1, "passed"), (2, "calibrate", 2, "no-tests")]
    assert NO_CONTENTION in suitefit("plan", "--workers", "2", cwd=tmp_path).stdout
