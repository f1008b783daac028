"""The Dispatcher as the real scheduler drives it: any completion order, noisy live memory."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from suitefit.model import Budget, FixtureCost, Plan, Unit
from suitefit.plan import Dispatcher

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _plan(units: list[Unit], fixtures: tuple[FixtureCost, ...] = ()) -> Plan:
    return Plan(workers=2, units=tuple(units), budget=Budget(1000, 2), predicted_wall_s=0,
                predicted_peak_mb=0, reasons=(), fixtures=fixtures)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Plan, list[str], float, float]:
    fx = tuple(FixtureCost(f"fx{i}", "session", 1.0, mb=draw(st.floats(0, 400))) for i in range(2))
    units = []
    for i in range(draw(st.integers(0, 25))):
        names = tuple(sorted(draw(st.sets(st.sampled_from(["fx0", "fx1"]), max_size=2))))
        own = draw(st.floats(0, 1500))
        units.append(Unit(f"u{i}", (f"tests/test_{i}.py",), draw(st.floats(0, 10)),
                          own + sum(f.mb for f in fx if f.name in names), names))
    workers = [f"gw{i}" for i in range(draw(st.integers(1, 6)))]
    return _plan(units, fx), workers, draw(st.floats(200, 4000)), draw(st.floats(0, 200))


@SETTINGS
@given(scenarios(), st.data())
def test_never_past_budget_while_others_run_and_never_deadlocks(
        scenario: tuple[Plan, list[str], float, float], data: st.DataObject) -> None:
    plan, workers, budget, baseline = scenario
    d = Dispatcher(plan, workers, budget, baseline)
    running: dict[str, Unit] = {}
    started: list[str] = []
    for _ in range(10 * len(plan.units) + 10):
        idle = [w for w in workers if w not in running]
        for w in idle:
            live = data.draw(st.floats(0, budget * 1.2), label="live_mb")
            before = d.predicted_mb
            alone = not running
            u = d.next_unit(w, live)
            if u is None:
                continue
            need = d.predicted_mb - before
            if not alone:  # admission: what runs plus this unit fits, by measure and prediction
                assert max(live, before) + need <= budget + 1e-6
            else:
                assert u.name == plan.units[len(started)].name or u.name in {x.name for x in plan.units}
            running[w] = u
            started.append(u.name)
        if not running:
            # nothing runs: the dispatcher must have handed out everything
            assert d.finished and d.pending == 0
            break
        w = data.draw(st.sampled_from(sorted(running)), label="finishes")
        d.unit_done(w, running.pop(w).name)
    assert d.finished
    assert sorted(started) == sorted(u.name for u in plan.units)


def test_hog_not_starved_by_small_units() -> None:
    hog = Unit("hog", ("tests/test_hog.py",), 5.0, 700.0)
    big = Unit("big", ("tests/test_big.py",), 9.0, 500.0)
    smalls = [Unit(f"s{i}", (f"tests/test_s{i}.py",), 1.0, 150.0) for i in range(6)]
    d = Dispatcher(_plan([big, hog, *smalls]), ["gw0", "gw1", "gw2"], 1000.0, 50.0)
    assert d.next_unit("gw0", 0).name == "big"  # type: ignore[union-attr]
    # the hog needs 700 on top of 650 (floor 150 + big 500): it waits
    u = d.next_unit("gw1", 0)
    assert d.blocked == "hog"
    assert any("hog waits for memory" in line for line in d.decisions)
    # one small unit may run beside it: floor 150 + small 150 + hog 700 still fits once big ends
    assert u is not None and u.name == "s0"
    # a second would leave the hog no room when big ends: refused although it fits right now
    assert d.next_unit("gw2", 0) is None
    d.unit_done("gw0", "big")
    assert d.next_unit("gw0", 0).name == "hog"  # type: ignore[union-attr]
    assert d.next_unit("gw2", 0) is None  # 150 + 150 + 700 = budget: nothing more fits


def test_alone_over_budget_warns_and_progresses() -> None:
    d = Dispatcher(_plan([Unit("huge", ("t/test_h.py",), 1.0, 5000.0)]), ["gw0", "gw1"], 1000.0, 100.0)
    u = d.next_unit("gw0", 300.0)
    assert u is not None and u.name == "huge"
    assert d.warnings and "runs alone" in d.warnings[0]
    assert d.next_unit("gw1", 300.0) is None
    d.unit_done("gw0", "huge")
    assert d.finished


def test_live_measurement_overrides_prediction() -> None:
    units = [Unit(f"u{i}", (f"t/test_{i}.py",), 1.0, 100.0) for i in range(3)]
    d = Dispatcher(_plan(units), ["gw0", "gw1"], 1000.0, 100.0)
    assert d.next_unit("gw0", 0.0) is not None
    assert d.next_unit("gw1", 950.0) is None  # measured tree is higher than predicted: wait
    assert d.next_unit("gw1", 400.0) is not None


def test_resident_fixture_counts_after_its_unit() -> None:
    pool = FixtureCost("pool", "session", 1.0, mb=500.0)
    a = Unit("a", ("t/test_a.py",), 1.0, 550.0, ("pool",))
    b = Unit("b", ("t/test_b.py",), 1.0, 400.0)
    d = Dispatcher(_plan([a, b], (pool,)), ["gw0", "gw1"], 1000.0, 0.0)
    assert d.next_unit("gw0", 0) is a
    d.unit_done("gw0", "a")
    assert d.predicted_mb == pytest.approx(500.0)  # the pool stays on gw0
    assert d.next_unit("gw1", 0) is b


def test_unknown_files_join_at_default_cost_and_restrict() -> None:
    units = [Unit("long", ("t/test_long.py",), 10.0, 10.0), Unit("short", ("t/test_short.py",), 0.1, 10.0)]
    d = Dispatcher(_plan(units), ["gw0"], 1000.0, 10.0)
    d.add_unknown(["t/test_new.py", "t/test_long.py"])
    assert d.pending == 3
    d.restrict_to({"t/test_new.py", "t/test_long.py"})
    assert d.pending == 2
    order = []
    while not d.finished:
        u = d.next_unit("gw0", 0)
        assert u is not None
        order.append(u.name)
        d.unit_done("gw0", u.name)
    assert order == ["long", "t/test_new.py"]


def test_protocol_errors_are_loud() -> None:
    d = Dispatcher(_plan([Unit("a", ("t/test_a.py",), 1.0, 1.0)]), ["gw0"], 1000.0, 10.0)
    with pytest.raises(ValueError):
        d.unit_done("gw0", "a")
    d.next_unit("gw0", 0)
    with pytest.raises(ValueError):
        d.next_unit("gw0", 0)


def test_session_fixture_waits_for_a_hog_it_would_shut_out() -> None:
    # the example suite at a 700 MiB budget: pool (97 MiB, resident until the worker ends)
    # first in order, then a 500 MiB hog; both pools-then-hog would need 751 MiB forever
    pool = FixtureCost("cpu_pool", "session", 3.7, procs=2, mb=97.0)
    units = [Unit("fixture:cpu_pool", ("t/test_pool.py",), 6.9, 97.0, ("cpu_pool",)),
             Unit("hog", ("t/test_hog.py",), 3.3, 500.0),
             Unit("small", ("t/test_small.py",), 1.0, 10.0)]
    d = Dispatcher(_plan(units, (pool,)), ["gw0", "gw1"], 700.0, 77.0)
    assert d.next_unit("gw0", 0).name == "hog"  # type: ignore[union-attr]
    assert d.next_unit("gw1", 0).name == "small"  # the pool would not fit beside the hog
    d.unit_done("gw1", "small")
    assert d.next_unit("gw1", 0) is None
    d.unit_done("gw0", "hog")
    assert d.next_unit("gw0", 0).name == "fixture:cpu_pool"  # type: ignore[union-attr]
    d.unit_done("gw0", "fixture:cpu_pool")
    assert d.finished and not d.warnings
