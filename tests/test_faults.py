"""Page faults are the machine's: units that touch much memory at once wait for each other.

On the KVM guests suitefit is developed on, two processes touching 800 MiB at once took
1.97x as long each as one alone, and one beside a CPU-bound process was not slowed
(benchmarks/bench_faults.py, benchmarks/README.md). The plan prices a MiB's faults from
the files' recorded system CPU (``costs.fault_cost``) and the simulation charges them where
such units overlap; a hog's own time is taken from runs where nothing faulted beside it,
and the workers' CPU slowdown leaves such files out.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from plan_synth import SynthFile, SynthFixture, SynthRun, write_history, write_run

from suitefit.costs import build_cost_model
from suitefit.history import History
from suitefit.model import Budget, FixtureCost, Plan, Unit
from suitefit.plan import make_plan
from suitefit.plan.simulate import simulate


def _plan(units: list[Unit], workers: int, fault: float | None,
          fixtures: tuple[FixtureCost, ...] = ()) -> Plan:
    return Plan(workers=workers, units=tuple(units), budget=Budget(100_000, workers), predicted_wall_s=0.0,
                predicted_peak_mb=0.0, reasons=(), fixtures=fixtures, fault_s_per_mb=fault)


def _spans(plan: Plan) -> dict[str, tuple[str, float, float]]:
    return dict(simulate(plan, startup_s=0.0, baseline_mb=100.0, budget_mb=None).spans)


def test_units_that_touch_much_memory_at_once_wait_for_each_others_faults() -> None:
    units = [Unit("hog800", ("hog800",), 1.0, 800.0), Unit("hog600", ("hog600",), 1.0, 600.0),
             Unit("small", ("small",), 1.0, 10.0), Unit("small2", ("small2",), 1.0, 10.0)]
    # 1 ms a MiB: the 800 MiB hog faults for 0.8 s; the 600 MiB one, started beside it, waits
    # for those (0.6 s of its own at most), then the small ones fill in without waiting
    spans = _spans(_plan(units, 2, 0.001))
    assert spans["hog800"][1:] == pytest.approx((0.0, 1.0))
    assert spans["hog600"][1:] == pytest.approx((0.0, 1.6))
    assert spans["small"][2] - spans["small"][1] == pytest.approx(1.0)
    assert spans["small2"][2] - spans["small2"][1] == pytest.approx(1.0)
    sim = simulate(_plan(units, 2, 0.001), startup_s=0.0, baseline_mb=100.0, budget_mb=None)
    assert sim.fault_waits == pytest.approx({"hog600": 0.6})
    # the one whose own faults are shorter than what is left waits only its own
    spans = _spans(_plan([Unit("a", ("a",), 1.0, 800.0), Unit("b", ("b",), 1.0, 100.0)], 2, 0.001))
    assert spans["b"][2] == pytest.approx(1.1)
    # not measured: not modelled; one worker: nothing overlaps
    assert _spans(_plan(units, 2, None))["hog600"][2] == pytest.approx(1.0)
    one = _spans(_plan(units, 1, 0.001))
    assert max(e for _, _, e in one.values()) == pytest.approx(4.0)


def test_a_fixture_already_set_up_on_the_worker_is_not_faulted_in_again() -> None:
    pool = FixtureCost("pool", "session", setup_s=0.5, mb=400.0)
    units = [Unit("p1", ("p1",), 0.6, 420.0, fixtures=("pool",)), Unit("hog", ("hog",), 3.0, 500.0),
             Unit("p2", ("p2",), 1.0, 420.0, fixtures=("pool",))]
    sim = simulate(_plan(units, 2, 0.001, (pool,)), startup_s=0.0, baseline_mb=100.0, budget_mb=None)
    spans = sim.spans
    # p1 sets the pool up (420 MiB of faults, to 0.42 s); the hog beside it waits for those,
    # and its own 500 MiB keep the machine faulting until 0.92 s
    assert spans["hog"][2] == pytest.approx(3.0 + 0.42)
    # p2 follows p1 at 0.6 s, while the hog's faults go on: the pool is resident there, so it
    # touches only its own 20 MiB (no wait; counted whole, it would wait 0.32 s) and does not
    # pay the pool's set-up again
    assert spans["p2"][0] == spans["p1"][0]
    assert spans["p2"][1:] == pytest.approx((0.6, 1.1))
    assert sim.fault_waits == pytest.approx({"hog": 0.42})


def _history(tmp_path: Path, runs: list[SynthRun]) -> History:
    write_history(tmp_path / "h.sqlite", runs)
    return History(tmp_path / "h.sqlite")


def test_the_fault_cost_is_the_least_system_cpu_a_mib_that_any_large_file_cost(tmp_path: Path) -> None:
    files = {"tests/test_hog.py": SynthFile("tests/test_hog.py", 0.8, peak_mb=800.0, sys_s=0.64, own_mb=800.0),
             # much CPU, little of it the kernel's: its faults are not its CPU
             "tests/test_compute.py": SynthFile("tests/test_compute.py", 9.0, peak_mb=200.0, sys_s=0.1,
                                                own_mb=200.0),
             "tests/test_mid.py": SynthFile("tests/test_mid.py", 1.0, peak_mb=200.0, sys_s=0.4, own_mb=200.0),
             # its 600 MiB are its child processes': their faults are not in its system CPU
             "tests/test_pool.py": SynthFile("tests/test_pool.py", 1.0, peak_mb=600.0, sys_s=0.01, own_mb=5.0),
             "tests/test_tiny.py": SynthFile("tests/test_tiny.py", 0.001, peak_mb=10.0, sys_s=0.0001,
                                             own_mb=10.0)}
    slow_faults = SynthRun({"main": list(files)}, files, scale=2.0)
    with _history(tmp_path, [slow_faults, SynthRun({"main": list(files)}, files)]) as h:
        cm = build_cost_model(h)
    # the compute file's 0.5 ms of system CPU a MiB is the least; the tiny file's 0.01 ms is
    # below the size where faults are more than noise
    assert cm.fault_s_per_mb == pytest.approx(0.1 / 200)
    assert cm.fault_source.startswith("tests/test_compute.py in run 2:")
    assert "of system CPU for 200 MiB" in cm.fault_source
    # no large file, or none whose system CPU and own growth were recorded (histories before
    # they were; no clear_refs, so no exact peak of the worker itself): not known
    small = {"tests/test_a.py": SynthFile("tests/test_a.py", 1.0, peak_mb=30.0, sys_s=0.01, own_mb=30.0)}
    with _history(tmp_path / "none", [SynthRun({"main": list(small)}, small)]) as h:
        assert build_cost_model(h).fault_s_per_mb is None
    old = {"tests/test_hog.py": SynthFile("tests/test_hog.py", 0.8, peak_mb=800.0)}
    no_hwm = {"tests/test_hog.py": SynthFile("tests/test_hog.py", 0.8, peak_mb=800.0, sys_s=0.64)}
    with _history(tmp_path / "no_hwm", [SynthRun({"main": list(no_hwm)}, no_hwm)]) as h:
        assert build_cost_model(h).fault_s_per_mb is None
    with _history(tmp_path / "old", [SynthRun({"main": list(old)}, old)]) as h:
        assert build_cost_model(h).fault_s_per_mb is None


def _joblib_like(tmp_path: Path) -> History:
    """joblib's suite as its profile read it: the one file to grow its worker by 64 MiB or
    more spent its 15.6 s of system CPU starting processes, 213 ms for each of its 73 MiB."""
    files = {"tests/test_parallel.py": SynthFile("tests/test_parallel.py", 77.0, peak_mb=1200.0, tests=600,
                                                 sys_s=15.6, own_mb=73.0),
             "tests/test_memmapping.py": SynthFile("tests/test_memmapping.py", 30.0, peak_mb=1230.0, tests=60,
                                                   sys_s=3.0, own_mb=20.0)}
    for i in range(10):
        files[f"tests/test_s{i}.py"] = SynthFile(f"tests/test_s{i}.py", 1.0, peak_mb=10.0, tests=10)
    return _history(tmp_path, [SynthRun({"main": list(files)}, files)])


def test_a_profiles_own_probe_prices_faults_where_no_file_measured_them(tmp_path: Path) -> None:
    budget = Budget(21_000, 2, workers=2)
    with _joblib_like(tmp_path) as h:
        bound = build_cost_model(h)
        h.merge_run_meta(h.runs()[0].id, fault_probe_s_per_mb=0.00073)
        probed = build_cost_model(h)
    assert bound.fault_s_per_mb == pytest.approx(15.6 / 73)
    assert probed.fault_s_per_mb == pytest.approx(0.00073)
    assert probed.fault_source == "a probe by profile run 1"
    serial = sum(f.wall_s for f in probed.files)
    # with the bound, two workers "wait" minutes for faults (the plan read 443 s and ran
    # one worker); with the probe, two workers take about half the serial time
    assert make_plan(bound, budget).predicted_wall_s > serial
    plan = make_plan(probed, budget)
    assert plan.predicted_wall_s < 0.6 * serial, plan.predicted_wall_s
    line = next(r for r in plan.reasons if r.startswith("page faults: "))
    assert "0.73 ms of CPU a MiB" in line and "a probe by profile run 1" in line, line
    # a probe above what a file measured does not raise it: the least counts
    files = {"tests/test_hog.py": SynthFile("tests/test_hog.py", 0.8, peak_mb=800.0, sys_s=0.4, own_mb=800.0)}
    with _history(tmp_path / "hog2", [SynthRun({"main": list(files)}, files)]) as h:
        h.merge_run_meta(h.runs()[0].id, fault_probe_s_per_mb=0.00073)
        assert build_cost_model(h).fault_s_per_mb == pytest.approx(0.4 / 800)
    # the newest probes count whatever the window (only a profile probes; the runs after it
    # record the files' system time again and again): of several, the least; a 0 is no figure
    with _joblib_like(tmp_path / "late") as h:
        for k in range(22):  # the profile falls out of the window of 20
            write_run(h, SynthRun({"main": [f.path for f in bound.files]}, {f.path: SynthFile(
                f.path, f.wall_s, peak_mb=f.peak_mb, tests=f.tests,
                sys_s=15.6 if f.path.endswith("parallel.py") else None,
                own_mb=73.0 if f.path.endswith("parallel.py") else None) for f in bound.files}, kind="run"),
                      started=1_000_000.0 + 1000 * (k + 1))
        first, second, third = sorted(r.id for r in h.runs())[:3]
        h.merge_run_meta(first, fault_probe_s_per_mb=0.00073)
        h.merge_run_meta(second, fault_probe_s_per_mb=0.0)
        h.merge_run_meta(third, fault_probe_s_per_mb=0.0009)
        late = build_cost_model(h)
    assert late.fault_s_per_mb == pytest.approx(0.00073), late.fault_source


def test_a_profile_measures_the_machines_fault_rate(tmp_path: Path) -> None:
    from clihelp import suitefit

    (tmp_path / "tests").mkdir()
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    (tmp_path / "tests" / "test_a.py").write_text("def test_a():\n    pass\n")
    assert suitefit("profile", "--no-calibrate", "--", "-q", cwd=tmp_path).returncode == 0
    with History(tmp_path / ".suitefit" / "history.sqlite") as h:
        rate = h.runs()[0].meta_dict.get("fault_probe_s_per_mb")
        cm = build_cost_model(h)
    # zeroing and mapping a MiB: 0.5-0.8 ms on the machines this was written on
    assert rate is not None and 1e-5 < rate < 0.02, rate
    assert cm.fault_s_per_mb == rate


def test_a_hog_is_priced_from_its_serial_runs_and_left_out_of_the_cpu_slowdown(tmp_path: Path) -> None:
    # Serially the hog took 0.8 s; beside the other worker's faults, 2.0 s. Counted as CPU
    # sharing, it pulled the 2-worker slowdown from 1.2 to 1.47 and its own price to 1.08 s.
    # (The fault rate then comes from the serial run: 0.7 s of system CPU for 800 MiB.)
    compute = {f"tests/test_c{i}.py": SynthFile(f"tests/test_c{i}.py", 1.0, peak_mb=5.0) for i in range(3)}
    hog = {"tests/test_hog.py": SynthFile("tests/test_hog.py", 0.8, peak_mb=800.0, sys_s=0.7, own_mb=800.0)}
    serial = SynthRun({"main": [*compute, *hog]}, {**compute, **hog})
    beside = {**{p: replace(f, wall_s=1.2) for p, f in compute.items()},
              "tests/test_hog.py": replace(hog["tests/test_hog.py"], wall_s=2.0, peak_mb=900.0)}
    two = SynthRun({"gw0": ["tests/test_hog.py", "tests/test_c0.py"], "gw1": ["tests/test_c1.py", "tests/test_c2.py"]},
                   beside, kind="run")
    with _history(tmp_path, [serial, two]) as h:
        cm = build_cost_model(h)
    assert cm.slowdown == {2: pytest.approx(1.2)}
    by = {f.path: f for f in cm.files}
    assert by["tests/test_hog.py"].wall_s == pytest.approx(0.8)
    assert by["tests/test_hog.py"].peak_mb == pytest.approx(900.0)  # its peak: every recent run's
    assert by["tests/test_c0.py"].wall_s == pytest.approx(1.0)
    # where faults are not measured (no system CPU or own growth recorded), nothing models
    # them: the hog stays in the CPU slowdown and is priced from every run, as before
    blind = {p: replace(f, sys_s=None, own_mb=None) for p, f in {**compute, **hog}.items()}
    blind_beside = {p: replace(f, sys_s=None, own_mb=None) for p, f in beside.items()}
    with _history(tmp_path / "blind", [SynthRun(serial.placement, blind),
                                       SynthRun(two.placement, blind_beside, kind="run")]) as h:
        cm = build_cost_model(h)
    assert cm.fault_s_per_mb is None
    assert cm.slowdown == {2: pytest.approx((3 * 1.2 + 2.0) / (3 * 1.0 + 0.8))}
    assert {f.path: f for f in cm.files}["tests/test_hog.py"].wall_s == pytest.approx(
        (0.8 + 2.0 / cm.slowdown[2]) / 2)


def _pool_heavy(tmp_path: Path) -> History:
    """Issue 12's pool-heavy shape as one serial profile: 8 files share a 476 MiB pool with
    a 2 s set-up, one 800 MiB hog that faults for 2 s, 20 small CPU-bound files."""
    files = {f"tests/test_pool_{i}.py": SynthFile(f"tests/test_pool_{i}.py", 0.37, peak_mb=1.0, tests=6,
                                                   fixtures=("cpu_pool",)) for i in range(8)}
    files["tests/test_hog.py"] = SynthFile("tests/test_hog.py", 2.0, peak_mb=800.0, tests=1, sys_s=1.8,
                                           own_mb=800.0)
    for i in range(20):
        files[f"tests/test_c{i}.py"] = SynthFile(f"tests/test_c{i}.py", 0.1 + 0.025 * i, peak_mb=1.0, tests=8)
    pool = SynthFixture("cpu_pool", setup_s=2.0, procs=3, mb=476.0)
    return _history(tmp_path, [SynthRun({"main": list(files)}, files, fixtures=[pool], baseline_mb=116.0)])


def test_the_plan_keeps_the_hog_from_the_pools_set_up_when_faults_are_measured(tmp_path: Path) -> None:
    with _pool_heavy(tmp_path) as h:
        cm = replace(build_cost_model(h), release=True)  # [tool.suitefit] release_fixtures' default
    assert cm.fault_s_per_mb == pytest.approx(1.8 / 800)
    budget = Budget(21_000, 2, workers=2)
    blind = make_plan(replace(cm, fault_s_per_mb=None), budget)
    seen = make_plan(cm, budget)
    # Blind to faults, the hog beside the pool's set-up looks free and the ceiling that keeps
    # them apart looks like a cost; priced, running them together is the slower plan.
    assert blind.spread_mb is None
    assert seen.spread_mb is not None
    assert seen.predicted_peak_mb < blind.predicted_peak_mb - 400
    assert any(r.startswith("hogs apart: ") for r in seen.reasons), seen.reasons
    line = next(r for r in seen.reasons if r.startswith("page faults: "))
    assert "2.25 ms of CPU a MiB" in line and "tests/test_hog.py in run 1" in line
    # the plan carries the figure its prediction used, and the simulation of it agrees
    assert seen.fault_s_per_mb == cm.fault_s_per_mb
    assert Plan.from_json(seen.to_json()).fault_s_per_mb == seen.fault_s_per_mb


HOG = """
def test_hog():
    b = bytearray(200 * 2**20)
    b[::4096] = b"x" * len(b[::4096])
"""
COMPUTE = """
def test_compute():  # no system call in the loop (process_time() is one: its time is the kernel's)
    x = 0
    for i in range(3_000_000):
        x += i
    assert x
"""


CHILD = """
import subprocess, sys

HOLD = "b = bytearray(300 * 2**20); b[::4096] = b'x' * len(b[::4096]); print('ok', flush=True); input()"

def test_child():  # a pool's worth of memory in a child process, as loky's pools hold it
    p = subprocess.Popen([sys.executable, "-c", HOLD], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert p.stdout.readline() == b"ok\\n"
    import time
    time.sleep(0.4)  # long enough for the sampler to see it
    p.communicate(b"\\n")
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_real_run_records_each_files_system_cpu_and_the_plan_prices_faults_from_it(
        tmp_path: Path, workers: list[str]) -> None:
    """Faulting memory in is the kernel's work: the hog's time is system CPU, the loop's is not."""
    import os
    import subprocess
    import sys

    (tmp_path / "test_hog.py").write_text(HOG)
    (tmp_path / "test_compute.py").write_text(COMPUTE)
    (tmp_path / "test_child.py").write_text(CHILD)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "SUITEFIT_"))}
    env.pop("PYTEST_ADDOPTS", None)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                        "--suitefit", f"--suitefit-history={tmp_path / 'h.sqlite'}", *workers],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    with History(tmp_path / "h.sqlite") as h:
        files = {f.path: f for f in h.files(h.runs(limit=1)[0].id)}
        hog, compute, child = files["test_hog.py"], files["test_compute.py"], files["test_child.py"]
        assert hog.sys_s is not None and compute.sys_s is not None
        assert hog.peak_mb >= 190 and hog.own_mb is not None and hog.own_mb >= 190
        # the child's memory is the file's peak, not its worker's own growth
        assert child.peak_mb >= 250 and child.own_mb is not None and child.own_mb < 64
        assert hog.sys_s >= 0.5 * hog.cpu_s and hog.sys_s > 0.02
        assert compute.cpu_s >= 0.05 and compute.sys_s < 0.2 * compute.cpu_s
        cm = build_cost_model(h)
    assert cm.fault_s_per_mb == pytest.approx(hog.sys_s / hog.own_mb, rel=0.01)
    assert cm.fault_source.startswith("test_hog.py in run 1:")
