"""Predict a plan's wall time and peak memory: the scheduling core on a simulated clock.

The same ``Core`` that ``suitefit run``'s xdist scheduler drives decides here; only the
clock and the workers are simulated. Workers start together and are ready at
``startup_s`` (as measured for that many workers starting at once, or estimated). A worker asks for its next unit when it reaches its current unit's last
test and holds that test until it gets an answer (as an xdist worker does); a ``Wait``
costs real simulated time. Every duration stretches by ``slow`` (workers sharing CPUs,
measured or ``workers / cpus``). Fixture setup is paid once per worker while the fixture
stays resident there: a unit whose fixture is already set up runs that much shorter.
Page faults are the machine's, not a worker's: a unit that touches much memory while
another's faults are still going waits for them (``Plan.fault_s_per_mb``, measured).
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from suitefit.model import FAULT_MIN_MB, FixtureCost, Plan, Unit
from suitefit.plan.core import (
    Core,
    Decision,
    Logged,
    Release,
    Send,
    Shutdown,
    Split,
    Wait,
    own_mb,
    piece_of,
)


@dataclass(frozen=True)
class Simulation:
    """What the core would do: timings per unit, wall, peak, and why."""

    workers: int
    wall_s: float
    peak_mb: float
    placement: Mapping[str, tuple[str, ...]]  # worker -> unit names in run order
    spans: Mapping[str, tuple[str, float, float]]  # unit -> (worker, start, end)
    waited_s: Mapping[str, float]  # unit -> seconds it waited for memory
    warnings: tuple[str, ...] = ()
    log: tuple[Logged, ...] = field(default=(), repr=False)
    complete: bool = True  # False: stopped early (a warning, or past ``give_up_after_s``)
    releases: tuple[Release, ...] = ()
    units: Mapping[str, Unit] = field(default_factory=dict, repr=False)  # what was sent, by name
    fault_waits: Mapping[str, float] = field(default_factory=dict)  # unit -> s it waited for others' faults

    @property
    def fits(self) -> bool:
        return not self.warnings


def worker_names(n: int) -> list[str]:
    return [f"gw{i}" for i in range(n)]


@dataclass
class _W:
    unit: Unit | None = None  # running (or holding its last test)
    start: float = 0.0
    end: float = 0.0  # when the running unit's last test ends
    ask_seq: int = -1  # its pending "ask" event (dropped when a split moves its end)
    last: float = 0.0  # duration of its last test
    next: Unit | None = None
    held: bool = False  # at its last test, waiting for an answer
    down: bool = False
    resident: set[str] = field(default_factory=set)
    release: set[str] = field(default_factory=set)  # released after the running unit


def simulate(plan: Plan, *, startup_s: float, baseline_mb: float, budget_mb: float | None,
             cpus: int | None = None, slow: float | None = None, fixed_mb: float = 0.0,
             releasable: Collection[str] = (), names: list[str] | None = None, log: bool = False,
             collected: Collection[str] | None = None, exit_s: float = 0.0,
             stop_on_warning: bool = False, give_up_after_s: float | None = None,
             limit_mb: float | None = None) -> Simulation:
    """Run ``plan`` through a fresh ``Core`` with predicted durations.

    ``stop_on_warning`` / ``give_up_after_s`` end a simulation early once it cannot
    win (the worker search uses them); the result then says ``complete=False``, and its
    wall is a bound the run would not beat (``_LeftBound``: a count starved of memory
    stops long before its clock reaches the give-up). With
    ``collected`` (the files a run collected), the plan is first matched to them, as the
    xdist scheduler does: a one-process run takes its order from this. ``exit_s``: how long
    a worker ended while work is left takes to be gone (its session's end and its exit),
    the time a unit it was ended for waits. ``limit_mb``: the budget itself, where
    ``budget_mb`` is what units are admitted against (``Core``).
    """
    n = max(1, plan.workers)
    names = names or worker_names(n)
    if slow is None:
        slow = max(1.0, n / cpus) if cpus else 1.0
    core = Core(plan.units, plan.fixtures, budget_mb=budget_mb, baseline_mb=baseline_mb,
                fixed_mb=fixed_mb, releasable=releasable, slow=slow, log=log,
                spread_mb=plan.spread_mb, limit_mb=limit_mb)
    if collected is not None:  # a run's order: the plan matched to what was collected
        core.reconcile(list(collected))
    for w in names:
        core.worker_up(w)
    setup = {f.name: f.setup_s for f in plan.fixtures}
    fixture_mb = {f.name: f.mb for f in plan.fixtures}
    fault = plan.fault_s_per_mb if n > 1 else None
    faults_free = 0.0  # when the machine's page faulting is done with what units started so far
    fault_waits: dict[str, float] = {}
    ws = {w: _W() for w in names}
    events: list[tuple[float, int, str, str]] = []
    seq = 0
    placement: dict[str, list[str]] = {w: [] for w in names}
    spans: dict[str, tuple[str, float, float]] = {}
    releases: list[Release] = []
    sent: dict[str, Unit] = {}
    waiting: list[str] = []
    downs: list[str] = []  # shut down with nothing to run: down once the asking is answered
    t = startup_s
    peak = core.running_mb  # the simulated tree's peak; admission's bound is predicted_mb
    end_t = t
    bound = None
    if give_up_after_s is not None:
        area = budget_mb - fixed_mb if stop_on_warning and budget_mb is not None else None
        bound = _LeftBound(core.pending_units(), plan.fixtures, n, area, baseline_mb, slow)  # (as reconciled)

    stale: set[int] = set()  # events a split made obsolete

    def push(at: float, kind: str, w: str) -> int:
        nonlocal seq
        heapq.heappush(events, (at, seq, kind, w))
        seq += 1
        return seq - 1

    def faulting(w: str, u: Unit, now: float) -> float:
        """How long ``u`` waits for the page faults of units started before it: a unit that
        touches much memory faults it in as it starts (its fixtures' set-up, its own peak),
        and the machine faults one unit's memory at a time (``costs.fault_cost``)."""
        nonlocal faults_free
        if not fault:
            return 0.0
        touch = u.peak_mb - sum(fixture_mb.get(f, 0.0) for f in u.fixtures if f in ws[w].resident)
        if touch < FAULT_MIN_MB:
            return 0.0
        own = touch * fault
        wait = min(own, max(0.0, faults_free - now))
        faults_free = max(faults_free, now) + own
        if wait > 0:
            fault_waits[u.name] = wait
        return wait

    def start(w: str, u: Unit, now: float) -> None:
        nonlocal peak
        st = ws[w]
        core.started(w, u.name, now)
        peak = max(peak, core.running_mb)
        saved = sum(setup.get(f, 0.0) for f in u.fixtures if f in st.resident)
        dur = max(0.0, u.wall_s - saved) * slow + faulting(w, u, now)
        st.unit, st.start, st.held, st.end = u, now, False, now + dur
        st.last = min(max(u.last_s, 0.0) * slow, dur)
        st.resident.update(f for f in u.fixtures if f in setup)
        spans[u.name] = (w, now, now + dur)
        st.ask_seq = push(now + dur - st.last, "ask", w)

    def split(d: Split, now: float) -> list[Decision]:
        """The tail moves at once (the run's steal takes a round trip): the source's unit, or
        the one queued behind it, ends that much sooner; the core queues the piece."""
        src = ws.get(d.source)
        setup_s = d.piece.piece_setup_s or 0.0
        asked = max(0.0, d.piece.wall_s - setup_s) * slow
        moved = 0.0
        if src is not None and src.unit is not None and src.unit.name == d.unit and not src.held:
            moved = min(asked, max(0.0, src.end - src.last - now))
            if moved > 0:
                stale.add(src.ask_seq)
                src.end -= moved
                spans[d.unit] = (d.source, src.start, src.end)
                src.ask_seq = push(src.end - src.last, "ask", d.source)
        elif src is not None and src.next is not None and src.next.name == d.unit:
            moved = min(asked, src.next.wall_s * slow)
            src.next = replace(src.next, wall_s=src.next.wall_s - moved / slow)
        if 0 < moved < asked - 1e-12:  # the source was further on than the core knew
            tests = max(1, round(d.piece.tests * moved / asked)) if d.piece.tests else 0
            d = replace(d, piece=replace(piece_of(d, tests), wall_s=moved / slow + setup_s))
        return core.split_done(d, moved > 0, now)

    def apply(ds: list[Decision], now: float) -> set[str]:
        """Carry out decisions (each names its worker); returns the workers that got an answer."""
        decided: set[str] = set()
        for d in ds:
            st = ws[d.worker]
            if isinstance(d, Release):
                releases.append(d)
                st.release.add(d.fixture)
            elif isinstance(d, Send):
                if bound is not None:
                    bound.sent(d.unit.name)
                placement[d.worker].append(d.unit.name)
                sent[d.unit.name] = d.unit
                decided.add(d.worker)
                if st.unit is None:
                    start(d.worker, d.unit, now)
                else:
                    st.next = d.unit
            elif isinstance(d, Shutdown):
                decided.add(d.worker)
                st.down = True
            elif isinstance(d, Split):
                decided |= apply(split(d, now), now)
        for w in decided:
            st = ws[w]
            if w in waiting:
                waiting.remove(w)
            if st.unit is not None and st.held:
                st.held = False
                push(now + st.last, "end", w)
            if st.unit is None and st.down:
                gone(w, now)
        return decided

    def gone(w: str, now: float) -> None:
        """``w`` was told to end and runs nothing: down at once, or after its exit when a
        unit may be waiting for its memory."""
        if core.pending and exit_s > 0:
            push(now + exit_s, "down", w)
        else:
            downs.append(w)

    def ask(w: str, now: float) -> None:
        nonlocal peak
        if w not in apply(core.want(w, now, holding=ws[w].unit is not None), now) and w not in waiting:
            waiting.append(w)
        peak = max(peak, core.running_mb)
        while downs:  # a worker told to end with nothing to run is down: its memory is back
            core.worker_down(downs.pop())
            for w2 in list(waiting):
                if w2 in waiting:
                    ask(w2, now)

    for w in names:
        ask(w, t)
    while events:
        if stop_on_warning and core.stats.warnings:
            return _result(n, float("inf"), peak, placement, spans, core, releases, sent, fault_waits,
                           complete=False)
        # (past the give-up only while units are left, so that the wall ends after it: a
        # worker's exit once all is done is not part of the wall)
        if give_up_after_s is not None:
            assert bound is not None
            at_least = bound.end_after(t)
            if at_least > give_up_after_s and not core.finished:
                return _result(n, at_least, peak, placement, spans, core, releases, sent, fault_waits,
                               complete=False)
        t, n_, kind, w = heapq.heappop(events)
        if n_ in stale:
            continue
        st = ws[w]
        if kind == "down":
            core.worker_down(w)
            for w2 in list(waiting):
                if w2 in waiting:
                    ask(w2, t)
            continue
        if kind == "ask":
            st.held = True
            ask(w, t)
            continue
        # "end": the unit's last test is done
        assert st.unit is not None
        u = st.unit
        w_, s0, _ = spans[u.name]
        spans[u.name] = (w_, s0, t)
        core.done(w, u.name, t)
        st.resident -= st.release
        st.release = set()
        st.unit = None
        end_t = max(end_t, t)
        if st.next is not None:
            nxt, st.next = st.next, None
            start(w, nxt, t)
        elif st.down:
            gone(w, t)
            while downs:
                core.worker_down(downs.pop())
        for w2 in list(waiting):
            if w2 in waiting:
                ask(w2, t)
    if not core.finished:
        raise AssertionError(f"the core made no progress: {core.pending} unit(s) pending, "
                             f"workers waiting: {waiting}")  # a bug: the core must always progress
    return _result(n, end_t, peak, placement, spans, core, releases, sent, fault_waits)


class _LeftBound:
    """A wall no schedule of the units not yet sent can beat.

    Each unit takes at least its time less every fixture's set-up, stretched by ``slow``.
    The workers run one unit each at a time, so those left end no sooner than their time,
    summed, over the workers, after now. And memory: every unit the core admits fits the
    budget (a send that does not is a warning, which ends a simulation that has a give-up):
    the baselines of the workers up and the own memory of the units they run (a unit's peak
    less its fixtures', the core's ``own``; within its worker's predicted peak) stay within
    ``area_mb``, the budget less the memory outside the workers. A running unit's worker is
    up, so every running unit holds its own memory and a baseline: those left also end no
    sooner than that memory times their durations, summed, over the area. That one stops
    a count starved of memory early. Not the room the floor of all the workers leaves: a
    worker shut down for room gives its baseline back, and a unit too large for that room
    then runs (``tests/test_core.py``). Tails split off later only add to both (ignored: the
    bound stays a bound).
    """

    def __init__(self, units: Sequence[Unit], fixtures: Sequence[FixtureCost], workers: int,
                 area_mb: float | None, baseline_mb: float, slow: float) -> None:
        fx_mb = {f.name: f.mb for f in fixtures}
        setup = {f.name: f.setup_s for f in fixtures}
        self.workers = workers
        self.area_mb = area_mb
        self.left: dict[str, tuple[float, float]] = {}  # unit -> (least duration, MiB held x that)
        for u in units:
            least = max(0.0, u.wall_s - sum(setup.get(f, 0.0) for f in u.fixtures)) * slow
            self.left[u.name] = (least, (own_mb(u, fx_mb, baseline_mb) + baseline_mb) * least)
        self.work = sum(x for x, _ in self.left.values())
        self.mem_work = sum(m for _, m in self.left.values())

    def sent(self, name: str) -> None:
        x, m = self.left.pop(name, (0.0, 0.0))
        self.work -= x
        self.mem_work -= m
        if not self.left:  # nothing left: none, not what the subtractions' rounding leaves
            self.work = self.mem_work = 0.0

    def end_after(self, now: float) -> float:
        need = max(0.0, self.work) / self.workers
        if self.area_mb is not None and self.area_mb > 0:
            need = max(need, self.mem_work / self.area_mb)
        # (less a hair, relative and absolute: the running sums and the clock round apart, and
        # a count that ends exactly at its give-up must complete; hypothesis found one stopped
        # 4e-15 s past it)
        return now + need * (1 - 1e-9) - 1e-9 * (now + 1.0)


def _result(n: int, wall: float, peak: float, placement: Mapping[str, list[str]],
            spans: Mapping[str, tuple[str, float, float]], core: Core, releases: list[Release],
            sent: Mapping[str, Unit], fault_waits: Mapping[str, float],
            complete: bool = True) -> Simulation:
    waited = {u: max(0.0, spans[u][1] - t0) for u, t0 in core.stats.waited.items() if u in spans}
    return Simulation(
        workers=n, wall_s=wall, peak_mb=peak,
        placement={w: tuple(v) for w, v in placement.items()},
        spans=dict(spans), waited_s=waited, warnings=tuple(core.stats.warnings),
        log=tuple(core.log or ()), complete=complete, releases=tuple(releases), units=dict(sent),
        fault_waits=dict(fault_waits),
    )


def describe(d: Decision) -> str:
    """One line for a decision, as the plan and the run's log show it."""
    if isinstance(d, Send):
        return f"{d.worker}: {'ALONE over budget ' if d.over_budget else ''}send {d.unit.name} ({d.reason})"
    if isinstance(d, Wait):
        return f"{d.worker}: wait ({d.reason})"
    if isinstance(d, Release):
        return f"{d.worker}: release {d.fixture} after {d.after} ({d.reason})"
    if isinstance(d, Split):
        return f"{d.worker}: take the tail of {d.unit} from {d.source} as {d.piece.name} ({d.reason})"
    return f"{d.worker}: shutdown ({d.reason})"
