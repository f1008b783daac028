"""The run view: time bases, the peak and what was in flight, downsampling, crash and plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suitefit.errors import SuitefitError
from suitefit.history import (
    FileRecord,
    FixtureRecord,
    History,
    SampleRecord,
    WorkerRecord,
)
from suitefit.history import (
    TestRecord as TR,
)
from suitefit.model import Budget, Plan, Unit
from suitefit.report.queries import downsample, file_deltas, load_view, pick_run

T0 = 1_700_000_000.0


def _test(rid: int, name: str, worker: str, seq: int, start: float, wall: float, outcome: str = "passed") -> TR:
    f = name.split("::")[0]
    return TR(rid, name, f, worker, seq, T0 + start, 0.0, wall, 0.0, wall, wall, outcome)


@pytest.fixture
def hist(tmp_path: Path) -> History:
    return History(tmp_path / "h.sqlite")


def _small_run(h: History) -> int:
    """Two workers; the tree peaks at t=3.0 s while a.py::t2 (gw0) and b.py::u1 (gw1) run."""
    rid = h.new_run("profile", started=T0)
    h.add_tests([
        _test(rid, "a.py::t1", "gw0", 0, 1.0, 1.5),  # 1.0 .. 2.5
        _test(rid, "a.py::t2", "gw0", 1, 2.5, 1.0),  # 2.5 .. 3.5  spans the peak
        _test(rid, "b.py::u1", "gw1", 0, 1.2, 2.0),  # 1.2 .. 3.2  spans the peak
        _test(rid, "b.py::u2", "gw1", 1, 3.2, 0.5, "failed"),  # 3.2 .. 3.7
    ])
    h.add_files([
        FileRecord(rid, "a.py", "gw0", T0 + 1.0, T0 + 3.5, 2.5, 2.4, 2, 200.0, 900.0, 1100.0),
        FileRecord(rid, "b.py", "gw1", T0 + 1.2, T0 + 3.7, 2.5, 2.0, 2, 210.0, 30.0, 240.0),
    ])
    h.add_samples([SampleRecord(rid, t, mb, mb * 0.8 if t == 3.0 else None, p) for t, mb, p in
                   [(0.0, 100, 1), (1.0, 500, 3), (2.0, 800, 3), (3.0, 1500, 4), (4.0, 400, 3)]])
    h.upsert_worker(WorkerRecord(rid, "gw0", 11, T0 + 0.1, T0 + 1.0, 0.9, 200.0, 1100.0, 2))
    h.upsert_worker(WorkerRecord(rid, "gw1", 12, T0 + 0.1, T0 + 1.2, 1.1, 210.0, 240.0, 2))
    h.add_event(rid, 2.9, "heartbeat", tree_mb=1450.0, direction="up", tests=["a.py::t2", "b.py::u1"])
    h.add_event(rid, T0 + 3.9, "heartbeat", tree_mb=420.0, direction="down")  # an epoch time
    h.add_fixtures([FixtureRecord(rid, "gw0", "pool", "session", "", 2.0, 0.5, 4, 700.0),
                    FixtureRecord(rid, "gw1", "pool", "session", "", 3.0, 0.5, 4, 650.0)])
    h.add_fixture_files(rid, [("pool", "a.py"), ("pool", "b.py"), ("unused_timer", "b.py")])
    h.update_run(rid, status="failed", exit_code=1, wall_s=4.0, finished=T0 + 4.0, workers=2,
                 budget_mb=2048.0, threshold_mb=1400.0)
    return rid


def test_peak_and_what_was_in_flight(hist: History) -> None:
    v = load_view(hist, hist.run(_small_run(hist)))
    assert v.peak is not None and (v.peak.t, v.peak.rss_mb, v.peak.procs) == (3.0, 1500, 4)
    assert {t.nodeid for t in v.peak_tests} == {"a.py::t2", "b.py::u1"}
    assert {f.path for f in v.peak_files} == {"a.py", "b.py"}
    assert v.peak_rss_mb == 1500 and v.peak_pss_mb == pytest.approx(1200) and v.peak_procs == 4
    assert v.budget_mb == 2048.0
    t1 = next(t for t in v.tests if t.nodeid == "a.py::t1")
    assert (t1.start, t1.end) == (1.0, 2.5)  # epoch turned into seconds since the start
    assert t1.tree_mb == 800  # the samples inside it (1.0, 2.0 s), not the peak at 3.0 s
    # no sample inside 3.2 .. 3.7 s: the ones either side (3.0 and 4.0 s)
    assert next(t for t in v.tests if t.nodeid == "b.py::u2").tree_mb == 1500


def test_events_on_the_run_clock(hist: History) -> None:
    v = load_view(hist, hist.run(_small_run(hist)))
    got = [(round(m.t, 3), m.mb, m.detail["direction"]) for m in v.heartbeats]
    assert got == [(2.9, 1450.0, "up"), (3.9, 420.0, "down")]
    assert v.heartbeats[0].tests == ("a.py::t2", "b.py::u1")
    assert v.crash is None and v.plan is None


def test_fixtures_with_their_files(hist: History) -> None:
    v = load_view(hist, hist.run(_small_run(hist)))
    pool = v.fixtures[0]
    assert (pool.name, pool.setups, pool.setup_s, pool.max_setup_s, pool.procs, pool.mb) == (
        "pool", 2, 5.0, 3.0, 4, 700.0)
    assert pool.files == ("a.py", "b.py") and pool.workers == ("gw0", "gw1")
    assert [f.name for f in v.fixtures] == ["pool", "unused_timer"]  # named though never timed


def test_downsample_keeps_the_peak_and_the_cap() -> None:
    from suitefit.history import SampleRecord as S

    samples = [S(1, i * 0.1, 100.0 + (i % 7), 80.0 if i % 10 == 0 else None, 3) for i in range(50_000)]
    samples[31_337] = S(1, 3133.7, 9999.0, None, 9)
    pts = downsample(samples, 2000)
    assert len(pts) <= 2000
    assert max(p.rss_mb for p in pts) == 9999.0
    assert min(p.rss_mb for p in pts) == 100.0
    assert [p.t for p in pts] == sorted(p.t for p in pts)
    assert any(p.pss_mb is not None for p in pts)
    assert downsample(samples[:10], 2000) == downsample(samples[:10], 2000) and len(downsample(samples[:10])) == 10


def test_crash_names_the_tests_in_flight(hist: History) -> None:
    rid = _small_run(hist)
    hist.upsert_worker(WorkerRecord(rid, "gw1", 12, T0 + 0.1, T0 + 1.2, 1.1, 210.0, 240.0, 2, "died",
                                    json.dumps({"signal": "SIGKILL", "nodeid": "b.py::u3"})))
    hist.add_event(rid, 3.8, "inflight", worker="gw1", tests=["b.py::u3"], tree_mb=1300.0)
    hist.add_event(rid, 3.9, "worker_died", worker="gw1", nodeid="b.py::u3", signal="SIGKILL")
    hist.update_run(rid, status="crashed")
    v = load_view(hist, hist.run(rid))
    assert v.crash is not None
    assert [w.worker for w in v.crash.dead_workers] == ["gw1"]
    assert v.crash.inflight == (("gw1", "b.py::u3"),)
    assert [m.kind for m in v.crash.events] == ["inflight", "worker_died"]


def test_plan_against_actual(hist: History) -> None:
    rid = _small_run(hist)
    plan = Plan(workers=2, units=(Unit("a", ("a.py",), 2.0, 800.0), Unit("b", ("b.py", "c.py"), 3.0, 50.0),
                                  Unit("gone", ("zz.py",), 1.0, 10.0)),
                budget=Budget(2048.0, 2), predicted_wall_s=3.6, predicted_peak_mb=1400.0, reasons=("because",),
                placement={"gw0": ("a",), "gw1": ("b", "gone")})
    hist.update_run(rid, plan=plan.to_json())
    v = load_view(hist, hist.run(rid))
    assert v.plan is not None
    assert (v.plan.wall_s, v.plan.peak_mb, v.plan.workers) == (4.0, 1500, 2)
    a, b, gone = v.plan.units
    assert (a.wall_s, a.peak_mb, a.planned_worker, a.workers) == (2.5, 900.0, "gw0", ("gw0",))
    assert (b.wall_s, b.peak_mb) == (2.5, 30.0)  # c.py never ran: only b.py counts
    assert (gone.wall_s, gone.workers) == (None, ())


def test_a_broken_plan_is_said_not_raised(hist: History) -> None:
    rid = _small_run(hist)
    hist.update_run(rid, plan=json.dumps({"workers": 2}))
    v = load_view(hist, hist.run(rid))
    assert v.plan is None and v.plan_error and "KeyError" in v.plan_error


def test_file_deltas(hist: History) -> None:
    a = _small_run(hist)
    b = hist.new_run("profile", started=T0 + 100)
    hist.add_files([FileRecord(b, "a.py", "gw0", T0 + 101, T0 + 102, 1.0, 1.0, 2, 200.0, 100.0, 300.0),
                    FileRecord(b, "c.py", "gw1", T0 + 101, T0 + 102, 0.5, 0.5, 1, 200.0, 10.0, 210.0)])
    d = {x.path: x for x in file_deltas(load_view(hist, hist.run(a)), load_view(hist, hist.run(b)))}
    assert d["a.py"].wall_delta == -1.5 and d["a.py"].peak_delta == -800.0
    assert d["b.py"].wall_b is None and d["c.py"].wall_a is None
    first = file_deltas(load_view(hist, hist.run(a)), load_view(hist, hist.run(b)))[0]
    assert first.path == "a.py"  # the largest change of wall time comes first


def test_pick_run(hist: History) -> None:
    with pytest.raises(SuitefitError, match="holds no runs"):
        pick_run(hist, None)
    rid = _small_run(hist)
    newer = hist.new_run("pytest", started=T0 + 50)
    assert pick_run(hist, None).id == newer
    assert pick_run(hist, rid).id == rid
    with pytest.raises(SuitefitError, match="no run 99"):
        pick_run(hist, 99)


def test_a_run_without_rows_still_has_a_view(hist: History) -> None:
    rid = hist.new_run("pytest", started=T0)
    v = load_view(hist, hist.run(rid))
    assert v.points == [] and v.peak is None and v.tests == [] and v.duration_s == 1.0
    assert "no memory samples" in " ".join(v.notes)


def test_axis_ticks_are_round() -> None:
    from suitefit.report.svg import mem_ticks, time_ticks

    assert [label for _, label in mem_ticks(1600)] == ["0", "500 MiB", "1000 MiB", "1500 MiB", "2000 MiB"]
    assert [label for _, label in mem_ticks(7000)] == ["0", "2 GiB", "4 GiB", "6 GiB", "8 GiB"]
    assert all(t % 60 == 0 for t in time_ticks(502, 8))  # whole minutes, not 100 s steps
    assert time_ticks(5.3, 8)[-1] >= 5.3


def test_a_far_budget_is_named_not_scaled_to() -> None:
    from suitefit.report.queries import Point
    from suitefit.report.svg import Level, Series, memory_chart

    pts = [Point(0.0, 100.0, None, 1), Point(1.0, 400.0, None, 2)]
    far = memory_chart([Series("r", pts)], t_max=1.0, levels=[Level("budget 21.19 GiB", 21_700.0, "budget")])
    assert "budget 21.19 GiB (above the chart)" in far and '<line class="budget"' not in far
    assert ">500 MiB<" in far and "GiB<" not in far.split("above the chart")[0].split("budget")[0]
    near = memory_chart([Series("r", pts)], t_max=1.0, levels=[Level("budget 1000 MiB", 1000.0, "budget")])
    assert '<line class="budget"' in near and "above the chart" not in near


def test_files_outside_the_plan_are_named(hist: History) -> None:
    from suitefit.report.html import render_run

    rid = _small_run(hist)
    plan = Plan(workers=2, units=(Unit("a", ("a.py",), 2.0, 800.0),), budget=Budget(2048.0, 2),
                predicted_wall_s=3.6, predicted_peak_mb=1400.0, reasons=())
    hist.update_run(rid, plan=plan.to_json())
    page = render_run(load_view(hist, hist.run(rid)))
    assert "1 file(s) ran outside the plan (no unit named them): b.py" in page


def test_the_report_says_what_the_host_took_from_the_run(hist: History) -> None:
    from suitefit.report.html import render_run

    rid = _small_run(hist)
    assert "taken by the host (steal)</dt><dd>not measured" in render_run(load_view(hist, hist.run(rid)))
    hist.merge_run_meta(rid, host_steal=0.02)
    page = render_run(load_view(hist, hist.run(rid)))
    assert "2.0% of the CPU time the run wanted</dd>" in page
    hist.merge_run_meta(rid, host_steal=0.14)
    page = render_run(load_view(hist, hist.run(rid)))
    assert "14.0% of the CPU time the run wanted: its times are that much slower" in page
