"""Predict a plan's wall time and peak memory by running its Dispatcher on a clock.

Workers start together and are ready after ``startup_s`` (each imports the conftest
and collects the suite); an idle worker asks the dispatcher for work whenever
anything changes. More workers than CPUs share them: every duration stretches by
``workers / cpus``. Fixture setup is paid once per worker: a unit whose fixture is
already resident on its worker runs that much shorter.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field

from suitefit.model import Plan, Unit
from suitefit.plan.dispatch import Dispatcher


@dataclass(frozen=True)
class Simulation:
    """What the dispatcher would do: timings per unit, wall, peak, and why."""

    workers: int
    wall_s: float
    peak_mb: float
    placement: Mapping[str, tuple[str, ...]]  # worker -> unit names in run order
    spans: Mapping[str, tuple[str, float, float]]  # unit -> (worker, start, end)
    waited_s: Mapping[str, float]  # unit -> seconds it waited for memory
    warnings: tuple[str, ...] = ()
    decisions: tuple[str, ...] = field(default=(), repr=False)
    complete: bool = True  # False: stopped early (a warning, or past ``give_up_after_s``)

    @property
    def fits(self) -> bool:
        return not self.warnings


def worker_names(n: int) -> list[str]:
    return [f"gw{i}" for i in range(n)]


def simulate(plan: Plan, *, startup_s: float, baseline_mb: float, budget_mb: float,
             cpus: int | None = None, log: bool = False, stop_on_warning: bool = False,
             give_up_after_s: float | None = None) -> Simulation:
    """Run ``plan`` through a fresh Dispatcher with predicted durations.

    ``stop_on_warning`` / ``give_up_after_s`` end a simulation early once it cannot
    win (the worker search uses them); the result then says ``complete=False``.
    """
    n = max(1, plan.workers)
    names = worker_names(n)
    slow = max(1.0, n / cpus) if cpus else 1.0
    disp = Dispatcher(plan, names, budget_mb, baseline_mb, log=log)
    setup = {f.name: f.setup_s for f in plan.fixtures}
    held: dict[str, set[str]] = {w: set() for w in names}
    t = startup_s * slow
    peak = disp.predicted_mb
    idle = list(names)
    events: list[tuple[float, int, str, Unit]] = []
    seq = 0
    placement: dict[str, list[str]] = {w: [] for w in names}
    spans: dict[str, tuple[str, float, float]] = {}
    blocked_since: dict[str, float] = {}
    waited: dict[str, float] = {}
    while True:
        still_idle = []
        failed: set[frozenset[str]] = set()  # memory only tightens within a round: a no stays no
        for w in idle:
            key = frozenset(held[w])
            u = None if key in failed else disp.next_unit(w, 0.0)
            if u is None:
                failed.add(key)
                still_idle.append(w)
                continue
            dur = u.wall_s - sum(setup.get(f, 0.0) for f in u.fixtures if f in held[w])
            end = t + max(dur, 0.0) * slow
            heapq.heappush(events, (end, seq, w, u))
            seq += 1
            placement[w].append(u.name)
            spans[u.name] = (w, t, end)
            if u.name in blocked_since:
                waited[u.name] = t - blocked_since.pop(u.name)
            peak = max(peak, disp.predicted_mb)
        idle = still_idle
        if (stop_on_warning and disp.warnings) or (give_up_after_s is not None and t > give_up_after_s):
            return Simulation(n, float("inf") if disp.warnings else t, peak,
                              {w: tuple(v) for w, v in placement.items()}, spans, waited,
                              tuple(disp.warnings), tuple(disp.decisions), complete=False)
        b = disp.blocked
        if b is not None and b not in blocked_since:
            blocked_since[b] = t
        if not events:
            if disp.finished:
                break
            raise AssertionError("dispatcher made no progress with nothing running")  # a bug
        t, _, w, u = heapq.heappop(events)
        disp.unit_done(w, u.name)
        held[w].update(u.fixtures)
        idle.append(w)
        while events and events[0][0] <= t:
            _, _, w2, u2 = heapq.heappop(events)
            disp.unit_done(w2, u2.name)
            held[w2].update(u2.fixtures)
            idle.append(w2)
        idle.sort()
    return Simulation(
        workers=n,
        wall_s=t,
        peak_mb=peak,
        placement={w: tuple(v) for w, v in placement.items()},
        spans=spans,
        waited_s=waited,
        warnings=tuple(disp.warnings),
        decisions=tuple(disp.decisions),
    )
