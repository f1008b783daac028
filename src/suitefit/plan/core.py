"""The scheduling core: one state machine that both predicts a plan and executes it.

``simulate.py`` drives it on a simulated clock to give the plan its predictions; the
xdist scheduler (``xdist_sched.py``) drives it on xdist's events and only applies what
it decides. Events in (a worker is up, wants work, started or finished a unit, a memory
sample, a worker went down), typed decisions out (``Send``, ``Wait``, ``Release``,
``Shutdown``), each with its reason. It sends nothing anywhere: PURE, like all of
``plan/``.

What it models, because xdist does it:

- A worker runs a test only once it knows its next one (pytest tears a test down
  with its ``nextitem``), so it asks for its next unit while it still *holds* the last
  test of its current one. A held test does not run until the worker gets a next unit
  or is shut down; while nothing fits, it waits, and that wait is real time.
- Units on one worker run one after another: the memory a worker needs is the largest
  of its queued units' peaks, plus the session/package fixtures resident on it, not
  their sum.
- A session/package fixture stays on its worker from its first user until the worker
  ends, unless the core releases it after its last user there (``Release``). Whether a
  unit fits behind a worker's queue counts the releases that sending it there would
  decide (``Core._freed``): the fit and the send are one reckoning.
- A worker keeps memory after a unit ends (caches, imported modules, globals: a unit's
  ``kept_mb``, measured): it adds up over the units the worker runs, so a long-lived
  worker grows as a serial run does, and only ending the worker returns it.

Memory admission: a unit goes to a worker only if the predicted tree (every worker's
baseline, the fixtures resident on it, the largest unit it has queued, the controller)
plus any memory the live tree shows beyond that prediction fits the budget. While the
first unit in order waits for memory, smaller units may run beside it only if it still
fits once they are done (small units cannot starve a hog), and a unit does not set up
memory that stays resident if that would leave a waiting unit no room ever (the hog
goes first). When no worker is running anything and nothing fits, the least harmful
unit goes anyway (alone, with a warning if it takes the tree over the budget itself,
``limit_mb``, not only over the admission line, ``budget_mb``, that keeps the plan's
headroom free): the run always progresses.

Hogs apart: with a soft ceiling (``spread_mb``, set by the planner only where its
prediction shows no cost in wall time), a unit that would take the predicted tree over it
goes after the first unit in order that would not; at the end, when only hogs are left, a
free worker waits for a running one to end. The ceiling is on the prediction alone, as the
planner chose it: memory the live tree shows beyond the prediction counts against the
budget, never against the ceiling (it is there whichever unit goes next).

Order: units in plan order (longest first). A worker that asks while it still holds a
long test, when another worker will be free sooner, takes the last unit that fits
instead of the first: the long units go to whoever is free first (list scheduling by
availability, which is what xdist's pipelining otherwise breaks).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from suitefit.median import median
from suitefit.model import FixtureCost, Unit
from suitefit.units import fmt_mb, fmt_s

DEFAULT_WALL_S = 1.0
DEFAULT_PEAK_MB = 50.0
# A tail moves to a free worker only if that ends its unit this much sooner: below it, the
# round trip (the thief's held test waits for the steal's answer) and noise eat the gain
MIN_SPLIT_S = 0.02
# a worker keeps the test it runs and the one it holds next: a unit splits only with one more
MIN_SPLIT_TESTS = 3
TAIL = ":tail"  # a piece is named "<unit>:tail<n>"


def tail_base(name: str) -> str | None:
    """The unit a piece's tests came from, or None if ``name`` is not a piece."""
    return name.split(TAIL, 1)[0] if TAIL in name else None


def chunk_of(indices: list[int], chunk: tuple[int, int] | None,
             span: tuple[float, float] | None = None) -> list[int]:
    """A chunk's contiguous slice of its file's tests: the fractions ``span`` of them (cut
    where the history put equal shares of the file's time), else the k-th of n slices of
    equal count. Neighbouring chunks share a boundary value, so they cover the file once.
    (The xdist runner cuts all of a file's chunks at once, ``chunk_cuts``, and then off the
    inside of test classes.)"""
    if chunk is None:
        return indices
    if span is not None:
        n = len(indices)
        lo = _cut_at(span[0], n)
        hi = _cut_at(span[1], n)
        return indices[lo:hi]
    k, n = chunk
    cuts = even_cuts(len(indices), n)
    return indices[cuts[k - 1]:cuts[k]]


def _cut_at(fraction: float, tests: int) -> int:
    return 0 if fraction <= 0 else tests if fraction >= 1 else round(fraction * tests)


def chunk_cuts(tests: int, ends: Sequence[float]) -> list[int]:
    """Cuts 0 = c0 <= ... <= cm = tests of a file's chunks whose spans end at the count
    fractions ``ends`` (in order; the last is the file's end): as ``chunk_of`` cuts each."""
    cuts = [0, *(_cut_at(e, tests) for e in ends[:-1]), tests]
    return list(itertools.accumulate(cuts, max))


def even_cuts(tests: int, m: int) -> list[int]:
    """Indices 0 = c0 <= ... <= cm = tests of m slices of equal count (as even as it allows)."""
    size, extra = divmod(tests, m)
    return [k * size + min(k, extra) for k in range(m + 1)]


# -- decisions ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Send:
    """Queue ``unit`` on ``worker`` (behind what it holds)."""

    worker: str
    unit: Unit
    reason: str
    over_budget: bool = False


@dataclass(frozen=True)
class Wait:
    """``worker`` gets nothing now: what is pending does not fit. It asks again on any change."""

    worker: str
    unit: str  # the unit it waits for
    reason: str


@dataclass(frozen=True)
class Release:
    """Tear ``fixture`` down on ``worker`` after the last test of ``after`` (its last user there)."""

    worker: str
    fixture: str
    after: str
    reason: str


@dataclass(frozen=True)
class Shutdown:
    """No more work for ``worker``: it runs what it holds and ends."""

    worker: str
    reason: str


@dataclass(frozen=True)
class Split:
    """Move the tail of ``unit`` (the last on ``source``'s queue) to ``worker``, which asked
    and found nothing pending, as ``piece`` (its last ``piece.tests`` tests). The runner takes
    back those of them that have not started (xdist: a steal, which the worker grants whole
    or not at all) and says whether it got them with ``Core.split_done``."""

    worker: str
    source: str
    unit: str
    piece: Unit
    reason: str


Decision = Send | Wait | Release | Shutdown | Split


def piece_of(split: Split, tests: int) -> Unit:
    """``split``'s piece as the runner took it: ``tests`` tests, not the number asked, at the
    same time a test (its setup paid once)."""
    p = split.piece
    if tests == p.tests or p.tests <= 0:
        return p
    again = p.piece_setup_s or 0.0
    return replace(p, tests=tests, wall_s=again + max(0.0, p.wall_s - again) * tests / p.tests,
                   reason=f"the last {tests} test(s) of {split.unit}, moved from {split.source}")


# -- state --------------------------------------------------------------------------------


def own_mb(unit: Unit, fx_mb: Mapping[str, float], worker_mb: float | None = None) -> float:
    """What ``unit`` needs on a worker already holding its fixtures (its peak counts them);
    with ``worker_mb``, on a worker whose own process holds that much (``Unit.peak_at``)."""
    peak = unit.peak_mb if worker_mb is None else unit.peak_at(worker_mb)
    return max(0.0, peak - sum(fx_mb[f] for f in unit.fixtures if f in fx_mb))


class _Slot:
    __slots__ = ("end", "fork", "fx", "fx_mb", "least", "nosplit", "own", "peak0", "pos", "release", "seen",
                 "set_up", "splitting", "start", "taken", "unit")

    def __init__(self, unit: Unit, fx_mb: Mapping[str, float], pos: int, baseline_mb: float) -> None:
        self.unit = unit
        self.pos = pos
        self.taken = False
        self.fx = tuple(f for f in unit.fixtures if f in fx_mb)
        # on a worker that has kept nothing: a unit that forks needs more on a worker that has
        # kept more (``Core._own``); ``least`` stays a lower bound
        self.own = own_mb(unit, fx_mb, baseline_mb)
        self.peak0 = unit.peak_at(baseline_mb)
        self.fork = unit.forks > 0
        self.fx_mb = math.fsum(fx_mb[f] for f in self.fx)
        self.least = self.own
        # fixtures released after it, in the order decided (a dict as an ordered set: sums
        # over it must not follow the hash seed's order, see ``_steps``)
        self.release: dict[str, None] = {}
        self.start: float | None = None
        self.set_up = not self.fx  # its fixtures are up: a test of it has ended (``Core.set_up``)
        self.end = 0.0  # predicted end (set when queued, corrected when it starts)
        self.splitting = False  # a Split of its tail is out (``Core.split_done`` answers it)
        self.nosplit = False  # the runner could not take its tail once: not asked again
        self.seen: tuple[int, int, float] | None = None  # (tests done, tests left, when): ``progress``


class _Worker:
    __slots__ = ("base", "closing", "draining", "freeable", "freeable_freed", "freeable_mb", "freeable_version",
                 "held", "holding", "kept", "kept_after", "kept_end", "name", "peak", "queue", "resident",
                 "splitting", "steps_peak", "version", "visible", "wait_reason", "waiting")

    def __init__(self, name: str) -> None:
        self.name = name
        self.queue: list[_Slot] = []  # sent, not finished; [0] runs (or is next to run)
        self.base: set[str] = set()  # fixtures resident before queue[0] (set up by finished units)
        self.kept = 0.0  # what its finished units left behind (signed; never counted below 0)
        # cached by Core._refresh after every change of queue, base or kept: asked for every
        # worker at many decisions (what no order can free), they are not walked again
        self.peak = 0.0  # predicted peak above baseline over the queue
        self.resident: set[str] = set()  # fixtures still set up once the queue is done
        self.held = 0.0  # their memory
        self.kept_end = 0.0  # what it will have kept then (signed, as ``kept``)
        self.kept_after = 0.0  # the same, never below 0 (only ending it returns that)
        self.steps_peak = 0.0  # ``peak`` without the state after the queue: a unit behind it
        # starts from ``resident``, ``held`` and ``kept_end`` (``Core._fits``)
        self.version = 0  # counts those changes (``Core._cheapest`` keeps its answer until then)
        # resident releasable fixtures no pending unit uses: a send here releases them first
        # (``Core._freeable``; valid while ``freeable_version`` and ``freeable_freed`` are
        # ``version`` and the core's ``_freed_version``)
        self.freeable: tuple[str, ...] = ()
        self.freeable_mb = 0.0
        self.freeable_version = -1
        self.freeable_freed = -1
        self.visible = 0.0  # what it shows now (``Core._visible``), kept by ``Core._see``
        self.waiting = False  # asked and got Wait
        self.wait_reason = ""
        self.holding = False  # its last test waits for a next unit (xdist)
        self.draining = False  # shut down: runs what it holds, takes nothing more
        self.closing = False  # the runner ends it on its own: nothing is decided for it any more
        self.splitting: Split | None = None  # asked, and waits for this tail to be taken


class _MinTree:
    """Min over slot positions (taken = inf): the first pending slot needing <= x, in O(log n)."""

    def __init__(self, values: Sequence[float]) -> None:
        n = 1
        while n < max(1, len(values)):
            n *= 2
        self.n = n
        self.t = [math.inf] * (2 * n)
        self.t[n:n + len(values)] = values
        for i in range(n - 1, 0, -1):
            self.t[i] = min(self.t[2 * i], self.t[2 * i + 1])

    def clear(self, i: int) -> None:
        t = self.t
        i += self.n
        t[i] = math.inf
        i //= 2
        while i:
            t[i] = min(t[2 * i], t[2 * i + 1])
            i //= 2

    def first_at_most(self, start: int, x: float) -> int:
        t, n = self.t, self.n
        if start >= n or t[1] > x:
            return -1
        # from start's leaf rightwards, a whole subtree at a time: while node i holds nothing
        # within x, go up past the right children, then on to the next subtree to the right
        # (above the root, 0: nothing after start); no stack, no tuples (a search was ~7% of
        # planning 32 workers)
        i = n + start
        while t[i] > x:
            while i & 1:
                i >>= 1
            if i == 0:
                return -1
            i += 1
        while i < n:  # then down to that subtree's leftmost leaf within x
            i *= 2
            if t[i] > x:
                i += 1
        return i - n


@dataclass
class Logged:
    t: float
    decision: Decision


@dataclass
class CoreStats:
    """What happened, for the plan's explanations."""

    waited: dict[str, float] = field(default_factory=dict)  # unit -> first time it waited
    warnings: list[str] = field(default_factory=list)


class Core:
    """The scheduling state machine. See the module docstring for what it models.

    ``budget_mb`` None: no memory limit; else what units are admitted against (the budget
    less the plan's headroom). ``limit_mb``: the budget itself (default ``budget_mb``), which
    a unit that goes anyway is judged against. ``baseline_mb`` is one worker's; ``fixed_mb``
    is memory outside the workers that the tree always holds (xdist's controller).
    ``releasable`` names the fixtures it may tear down early. ``slow`` stretches every
    predicted duration (workers sharing CPUs), for its own predictions of who is free when.
    ``spread_mb``: a soft ceiling; a unit that would take the tree over it goes after the
    first unit in order that does not (hogs apart), never instead of running anything.
    """

    def __init__(self, units: Sequence[Unit], fixtures: Iterable[FixtureCost] = (), *,
                 budget_mb: float | None, baseline_mb: float, fixed_mb: float = 0.0,
                 releasable: Collection[str] = (), slow: float = 1.0, log: bool = True,
                 spread_mb: float | None = None, limit_mb: float | None = None) -> None:
        self.budget_mb = None if budget_mb is None else float(budget_mb)
        self.limit_mb = None if budget_mb is None else max(float(budget_mb), float(limit_mb or 0.0))
        self.spread_mb = None if spread_mb is None else float(spread_mb)
        self.baseline_mb = float(baseline_mb)
        self.fixed_mb = float(fixed_mb)
        self.slow = float(slow)
        self.log: list[Logged] | None = [] if log else None
        self.stats = CoreStats()
        self._fx_mb = {f.name: float(f.mb) for f in fixtures}
        self._releasable = frozenset(r for r in releasable if r in self._fx_mb)
        self._slots = [_Slot(u, self._fx_mb, i, self.baseline_mb) for i, u in enumerate(units)]
        self._head = 0  # no slot before it is pending ...
        self._tail = len(self._slots) - 1  # ... nor after this one
        self._pending = len(self._slots)
        self._slots_version = 0  # counts insertions (``_reindex``)
        self._shown = 0.0  # the workers' ``visible``, summed as they change
        self._pinned: dict[str, int] = {}  # fixture -> workers where it stays resident (``_pin``)
        self._pinned_total = 0.0  # the memory of those resident on at least one worker
        self._busy: set[str] = set()  # workers running a test or ending (``_mark``)
        self._kept_sum = 0.0  # the workers' ``kept_after``, summed as they change
        # worker -> ((its version, the slots', the freeable fixtures'), heap of (peak with s
        # behind its queue, pos, s))
        self._cheap: dict[str, tuple[tuple[int, int, int], list[tuple[float, int, _Slot]]]] = {}
        self._tree = _MinTree([s.least for s in self._slots])
        self._sorted_least = sorted(s.least for s in self._slots)
        self._users: dict[str, int] = {}  # fixture -> pending units using it
        for s in self._slots:
            for f in s.fx:
                self._users[f] = self._users.get(f, 0) + 1
        self._freed_version = 0  # counts a releasable fixture's users reaching or leaving 0
        self._workers: dict[str, _Worker] = {}
        self._excess = 0.0  # live memory beyond the prediction (last sample)
        self._under: dict[str, float] = {}  # each worker's least reading at rest over what it should hold
        self._under_running: dict[str, float] = {}  # the same over readings while a unit runs
        self._grown: dict[str, float] = {}  # each worker's excess over its baseline as it started
        self._gone: set[str] = set()  # workers down (``worker_down``)
        self._leaving: tuple[str, ...] = ()  # of those, the ones the last sample still read
        self._total = self.fixed_mb  # predicted tree: fixed + per worker baseline + peak
        self._coming: set[str] = set()  # workers expected, not up yet: their baselines are in ``_total``
        self._unasked: set[str] = set()  # workers up that have not asked yet (the simulation's, at its start)
        self._blocked: _Slot | None = None  # the first unit in order waiting for memory
        self._backfill: dict[str, float] = {}  # units started beside it -> own memory
        self._stopped = False
        self._pieces = 0  # tails split off so far (their names)
        walls = [u.wall_s for u in units if len(u.files) == 1]
        peaks = [u.peak_mb for u in units if len(u.files) == 1]
        self.default_wall_s = median(walls) if walls else DEFAULT_WALL_S
        self.default_peak_mb = median(peaks) if peaks else DEFAULT_PEAK_MB

    # -- reading ------------------------------------------------------------------------

    @property
    def predicted_mb(self) -> float:
        """The tree's predicted peak given what is queued now (controller included)."""
        return self._total

    @property
    def running_mb(self) -> float:
        """The tree as it stands: baselines, resident fixtures and the units that started
        (not those queued behind them, which admission counts ahead of time)."""
        return self._visible_total()

    @property
    def pending(self) -> int:
        return self._pending

    @property
    def finished(self) -> bool:
        return self._pending == 0 and not any(w.queue for w in self._workers.values())

    def pending_units(self) -> list[Unit]:
        return [s.unit for s in self._slots if not s.taken]

    def waiting(self) -> list[str]:
        """Workers that asked and got ``Wait``: ask them again after any change."""
        return [w.name for w in self._workers.values() if w.waiting]

    # -- collection (the one place files the plan does not know are handled) ------------

    def reconcile(self, collected: Collection[str]) -> list[str]:
        """Match the plan to what was collected: files not collected leave their units,
        files never planned become single-file units at the plan's median cost. Returns
        the reasons."""
        keep = set(collected)
        out: list[str] = []
        dropped = 0
        for s in self._slots:
            if s.taken:
                continue
            files = tuple(f for f in s.unit.files if f in keep)
            if len(files) == len(s.unit.files):
                continue
            dropped += len(s.unit.files) - len(files)
            if files:
                u = s.unit
                s.unit = replace(u, files=files)
            else:
                self._take(s)
        if dropped:
            out.append(f"dropped {dropped} planned file(s) that were not collected")
        known = {f for s in self._slots for f in s.unit.files}
        new = [f for f in dict.fromkeys(collected) if f not in known]
        if new:
            for f in new:
                u = Unit(name=f, files=(f,), wall_s=self.default_wall_s, peak_mb=self.default_peak_mb,
                         reason="not in the plan (never measured): the plan's median cost")
                pos = next((i for i in range(self._head, len(self._slots))
                            if not self._slots[i].taken and self._slots[i].unit.wall_s < u.wall_s),
                           len(self._slots))
                slot = _Slot(u, self._fx_mb, pos, self.baseline_mb)
                self._slots.insert(pos, slot)
                bisect.insort(self._sorted_least, slot.least)
                self._pending += 1
            self._reindex()
            out.append(f"added {len(new)} file(s) missing from the plan at the median "
                       f"{fmt_s(self.default_wall_s)} / {fmt_mb(self.default_peak_mb)} each")
        return out

    def requeue(self, unit: Unit) -> None:
        """Put ``unit`` first (tests given back: a rerun plugin, a dead worker's queue)."""
        slot = _Slot(unit, self._fx_mb, 0, self.baseline_mb)
        self._slots.insert(self._head, slot)
        bisect.insort(self._sorted_least, slot.least)
        for f in slot.fx:
            self._users[f] = self._users.get(f, 0) + 1
            if self._users[f] == 1 and f in self._releasable:
                self._freed_version += 1
        self._pending += 1
        self._reindex()

    def _reindex(self) -> None:
        for i, s in enumerate(self._slots):
            s.pos = i
        self._tree = _MinTree([math.inf if s.taken else s.least for s in self._slots])
        self._head = min(self._head, len(self._slots))
        while self._head > 0 and not self._slots[self._head - 1].taken:
            self._head -= 1
        self._tail = len(self._slots) - 1
        self._slots_version += 1

    # -- events -------------------------------------------------------------------------

    def expect(self, names: Iterable[str]) -> None:
        """The workers ``names`` will come up (xdist starts them one after another, and each
        is up once it has collected): their baselines count from now, so that what the first
        is sent leaves room for the others still starting. A worker of another name (one
        xdist starts in place of a dead one) takes no such place."""
        more = {n for n in names if n not in self._workers} - self._coming
        self._coming |= more
        self._total += len(more) * self.baseline_mb

    def worker_up(self, name: str) -> None:
        if name not in self._workers:
            w = _Worker(name)
            self._workers[name] = w
            self._unasked.add(name)
            if name in self._coming:  # its baseline was counted when it was expected
                self._coming.discard(name)
            else:
                self._total += self.baseline_mb
            self._see(w)
            self._mark(w)

    def sample(self, tree_mb: float, workers_mb: Mapping[str, float] | None = None) -> None:
        """A live measurement: memory beyond what the prediction says is there now counts too.

        Per worker, what should be visible now is its baseline, its resident fixtures and
        the unit it has started; a unit sent but not started shows nothing yet (so it is
        not mistaken for room). What the controller holds beyond ``fixed_mb`` counts too.
        """
        # a worker still starting holds up to the baseline counted for it (``expect``)
        if not workers_mb:  # no per-worker readings: a started unit may not have grown yet
            self._excess = max(0.0, float(tree_mb) - self.fixed_mb - len(self._coming) * self.baseline_mb
                               - sum(self._resting(w) for w in self._workers.values()))
            return
        self._leaving = tuple(sorted(n for n in workers_mb if n in self._gone))
        starting = {n: float(mb) for n, mb in workers_mb.items() if n in self._coming}
        excess = 0.0
        for n, mb in starting.items():
            grown = max(0.0, mb - self.baseline_mb)
            excess += grown
            self._grown[n] = max(self._grown.get(n, 0.0), grown)  # it grows as it starts
        known = {n: float(mb) for n, mb in workers_mb.items() if n in self._workers}
        for name, mb in known.items():
            w = self._workers[name]
            # A baseline larger than planned would hide under a started unit's predicted peak.
            # It shows in the least of the worker's readings over what it should hold then:
            # at rest (no unit started) that is exact, and once the worker has been read so,
            # it alone counts. Before, the least of its readings while units run, over what it
            # should hold but for the running unit's own memory (it grows test by test), and
            # at least what the worker had grown to while starting. A reading taken while a
            # unit's fixtures are being set up cannot tell them from the baseline: it says
            # nothing. pool-heavy's budget case read its gw0 first 0.1 s after its first unit
            # began, with 466 of its pool's 475 MiB up; taken for the baseline, that was 350
            # MiB counted twice until the pool was released, and gw1 stood idle 4.8 s.
            settled, at_rest = self._over_settled(w, float(mb))
            if settled is not None:
                seen = self._under if at_rest else self._under_running
                seen[name] = min(seen.get(name, math.inf), settled)
            under = self._under.get(name)
            if under is None:
                under = max(self._under_running.get(name, 0.0), self._grown.get(name, 0.0))
            excess += under + max(0.0, float(mb) - self._visible(w) - under)
        # the rest of the tree: the controller, and workers not measured on their own yet
        # (those still starting whose pid xdist has not said hold up to their baselines there)
        rest = (float(tree_mb) - sum(known.values()) - sum(starting.values())
                - (len(self._coming) - len(starting)) * self.baseline_mb)
        # workers not measured on their own count at rest: their started units' predicted
        # memory may not be there yet, and must not be taken for room
        rest -= sum(self._resting(w) for n, w in self._workers.items() if n not in known)
        self._excess = excess + max(0.0, rest - self.fixed_mb)

    def _visible(self, w: _Worker) -> float:
        """What ``w`` shows now: read per worker at every simulated step (``running_mb``), so
        it builds no set."""
        mb = self._fx_mb
        held = math.fsum(mb[f] for f in w.base) if w.base else 0.0  # (a set: exact in any order)
        own = 0.0
        if w.queue and w.queue[0].start is not None:
            first = w.queue[0]
            own = self._own(first, w.kept)
            for f in first.fx:
                if f not in w.base:
                    held += mb[f]
        return self.baseline_mb + max(0.0, w.kept) + held + own

    def _over_settled(self, w: _Worker, mb: float) -> tuple[float | None, bool]:
        """How far a reading of ``w`` is over what it should hold but for its started unit's
        own memory (its baseline, what it keeps, resident fixtures, and those of the started
        unit once set up), None while that unit's fixtures are being set up; and whether it
        was read at rest (no unit started)."""
        held = self._resting(w)
        head = w.queue[0] if w.queue else None
        if head is None or head.start is None:
            return max(0.0, mb - held), True
        new = [f for f in head.fx if f not in w.base]
        if new and not head.set_up:
            return None, False
        held += math.fsum(self._fx_mb[f] for f in new)
        return max(0.0, mb - held), False

    def set_up(self, name: str, unit: str) -> None:
        """A test of ``unit`` has ended on ``name``: the fixtures it sets up at its start are up."""
        w = self._workers.get(name)
        for s in w.queue if w is not None else ():
            if s.unit.name == unit:
                s.set_up = True
                return

    def _resting(self, w: _Worker) -> float:
        return self.baseline_mb + max(0.0, w.kept) + math.fsum(self._fx_mb[f] for f in w.base)

    def _see(self, w: _Worker) -> None:
        """After any change of what ``w`` shows (a unit started or done, a worker up or
        down): the simulation reads the tree after every step, and summing every worker
        each time was most of planning 64 workers."""
        v = self._visible(w)
        self._shown += v - w.visible
        w.visible = v

    def _visible_total(self) -> float:
        return self.fixed_mb + self._shown

    def started(self, name: str, unit: str, now: float) -> None:
        """``unit``'s first test began on ``name``: predicted ends are measured from now."""
        w = self._workers.get(name)
        if w is None:
            return
        end = None
        for s in w.queue:
            if s.unit.name == unit:
                s.start = now
                end = s.end = now + s.unit.wall_s * self.slow
            elif end is not None:
                end = s.end = end + s.unit.wall_s * self.slow
        self._see(w)

    def done(self, name: str, unit: str, now: float) -> None:
        """``name`` finished ``unit`` (units on a worker finish in the order they were sent)."""
        w = self._workers[name]
        i = next((i for i, s in enumerate(w.queue) if s.unit.name == unit), None)
        if i is None:
            raise ValueError(f"worker {name} is not running {unit}")
        s = w.queue.pop(i)
        w.kept += s.unit.kept_mb
        w.base |= set(s.fx)
        w.base.difference_update(s.release)
        if s is self._blocked:
            self._blocked = None
        self._backfill.pop(unit, None)
        self._refresh(w)
        self._mark(w)
        if w.queue and w.queue[0].start is None:
            self.started(name, w.queue[0].unit.name, now)

    def worker_down(self, name: str) -> list[Unit]:
        """``name`` is gone (ended or died): its memory goes. Returns the units it had not
        finished that must run elsewhere: none once the run is stopping (what it held is
        dropped like the pending units); the runner puts them back with ``requeue``."""
        w = self._workers.pop(name, None)
        self._cheap.pop(name, None)
        self._unasked.discard(name)
        self._busy.discard(name)
        self._gone.add(name)
        if w is None:
            if name in self._coming:  # gone before it was up: its place is free
                self._coming.discard(name)
                self._total -= self.baseline_mb
            return []
        self._shown -= w.visible
        self._pin(w.resident, -1)
        self._kept_sum -= w.kept_after
        self._total -= self.baseline_mb + w.peak
        return [] if self._stopped else [s.unit for s in w.queue]

    def closing(self, name: str) -> None:
        """The runner is ending ``name`` on its own (xdist: ``-x``, ``--maxfail``, no restart
        after a death): anything sent to it now would never run. Nothing more is decided for
        it, and the run stops: the runner ends every worker then."""
        w = self._workers.get(name)
        if w is not None:
            w.closing, w.waiting = True, False
            self._mark(w)
        self.stop()

    def stop(self) -> None:
        """No new work (a worker died and restarts are off): pending units are dropped."""
        self._stopped = True
        for s in self._slots:
            if not s.taken:
                self._take(s)

    # -- the decision -------------------------------------------------------------------

    def want(self, name: str, now: float, *, holding: bool = False) -> list[Decision]:
        """``name`` needs its next unit (``holding``: its last test waits for it).

        Returns the decisions for it: ``Release``s then a ``Send``, or a ``Shutdown``, or
        a ``Wait`` (only when the reason changed since its last one, else nothing). When no
        worker runs a test and nothing fits here, the one unit that goes may go to another
        waiting worker: those decisions name that worker.
        """
        self.worker_up(name)
        self._unasked.discard(name)
        w = self._workers[name]
        if w.closing or w.splitting is not None:
            return []
        w.holding = holding
        if self._pending == 0:
            w.waiting = False
            split = None if self._stopped else self._split_for(w, now)
            if split is not None:
                w.splitting = split
                self._mark(w)
                return self._emit(now, [split])
            self._mark(w)
            return self._emit(now, [Shutdown(name, "stopped: a worker died" if self._stopped
                                             else "nothing left to run")])
        slot, reason, over, target, shut = self._choose(w, now)
        out: list[Decision] = []
        if shut:  # nothing fits until ``target`` ends
            # its memory goes when the runner says it is down (``worker_down``), not now: a
            # process that is told to end holds its memory until it has ended
            target.waiting = False
            target.draining = True
            self._mark(target)
            out = [Shutdown(target.name, reason)]
            if target is w:
                return self._emit(now, out)
            reason = f"waits for {target.name} to end"
        elif slot is not None:
            out = self._send(target, slot, reason, over, now)
            if target is w:
                return self._emit(now, out)
            reason = f"the one unit that goes now goes to {target.name}"
        if w.waiting and w.wait_reason == reason:
            return self._emit(now, out)
        w.waiting, w.wait_reason = True, reason
        self._mark(w)
        head = self._head_slot()
        return self._emit(now, [*out, Wait(name, head.unit.name if head else "", reason)])

    def progress(self, name: str, unit: str, done: int, left: int, now: float) -> None:
        """How far ``name`` is through ``unit`` (its tests done and left, the one running
        counted as left): where the run differs from the plan, a split is decided on this,
        not on the prediction (a file the history has at 1 s may be running its 30th)."""
        w = self._workers.get(name)
        s = next((s for s in w.queue if s.unit.name == unit), None) if w is not None else None
        if s is not None:
            s.seen = (done, left, now)

    def split_done(self, split: Split, taken: bool, now: float) -> list[Decision]:
        """The runner's answer to ``split``: ``taken`` if the tail moved (it is ``split.piece``
        now, pending first), else the unit stays whole where it is and is not split again.
        Returns the decisions for the worker that asked, as ``want`` would."""
        src = self._workers.get(split.source)
        slot = next((s for s in src.queue if s.unit.name == split.unit), None) if src else None
        if slot is not None:
            slot.splitting = False
            if taken:  # it and what is queued behind it end that much sooner
                moved = max(0.0, split.piece.wall_s - (split.piece.piece_setup_s or 0.0))
                slot.unit = replace(slot.unit, wall_s=max(0.0, slot.unit.wall_s - moved),
                                    tests=max(0, slot.unit.tests - split.piece.tests))
                assert src is not None
                for s in src.queue[src.queue.index(slot):]:
                    s.end -= moved * self.slow
            else:
                slot.nosplit = True
        if taken:
            self.requeue(split.piece)
        w = self._workers.get(split.worker)
        if w is None or w.splitting is None or (w.splitting.source, w.splitting.unit) != (split.source, split.unit):
            return []
        w.splitting = None
        if w.closing:
            return []
        return self.want(split.worker, now, holding=w.holding)

    def _split_for(self, w: _Worker, now: float) -> Split | None:
        """With nothing pending, the tail of a unit another worker will still run for long:
        the split that ends the run soonest, of whole tests at the unit's mean test time,
        cut so that both end together (this worker once it is free, the piece's setup paid
        again). None when no split gains ``MIN_SPLIT_S``. Only a plain file's unit
        (``Unit.piece_setup_s``), with no fixture released after it, that is the last on
        its worker's queue; the test that worker runs and the one it holds next stay."""
        if len(self._workers) < 2:
            return None
        free = self._free_at(w, now) if w.queue else now
        best: tuple[float, int, float, _Worker, _Slot, float] | None = None
        for o in self._workers.values():
            if o is w or o.draining or o.closing or not o.queue:
                continue
            s = o.queue[-1]
            u = s.unit
            if (u.piece_setup_s is None or s.splitting or s.nosplit or s.release
                    or (o.holding and len(o.queue) == 1)):
                continue
            end, each, n_left = self._tail_of(o, s, now)
            if each <= 1e-9 or n_left < MIN_SPLIT_TESTS:
                continue
            again = u.piece_setup_s * self.slow
            even = (end - free - again) / 2 / each
            for k in {math.floor(even), math.ceil(even)}:
                k = min(k, n_left - 2)  # the test it runs and the one it holds next stay
                if k < 1:
                    continue
                gain = end - max(end - k * each, free + again + k * each)
                if gain >= MIN_SPLIT_S and (best is None or gain > best[0]):
                    best = (gain, k, end - now, o, s, each)
        if best is None:
            return None
        gain, k, left, o, s, each = best
        u = s.unit
        self._pieces += 1
        piece = Unit(name=f"{u.name}{TAIL}{self._pieces}", files=u.files,
                     wall_s=k * each / self.slow + (u.piece_setup_s or 0.0), peak_mb=u.peak_mb,
                     fork_mb=u.fork_mb, forks=u.forks, fork_of_mb=u.fork_of_mb,
                     reason=f"the last {k} test(s) of {u.name}, moved from {o.name}", last_s=u.last_s,
                     piece_setup_s=u.piece_setup_s, tests=k)
        ok, total = self._fits(w, _Slot(piece, self._fx_mb, -1, self.baseline_mb))
        if not ok or self._over_ceiling(total):  # a hog's tail beside its head: two of it at once
            self._pieces -= 1
            return None
        s.splitting = True
        return Split(w.name, o.name, u.name, piece,
                     f"nothing pending; {u.name} runs ~{fmt_s(left)} more on {o.name}: its last "
                     f"{k} test(s) move to {w.name}, the run ends ~{fmt_s(gain)} sooner")

    def _tail_of(self, o: _Worker, s: _Slot, now: float) -> tuple[float, float, int]:
        """When ``s`` (last on ``o``'s queue) ends, a test's time in it, and its tests left:
        from the runner's ``progress`` once it has done a test (it may be running long),
        else the prediction (the simulation's, and a run's until then)."""
        u = s.unit
        if s.seen is not None and s.start is not None and s.seen[0] >= 1:
            done, left, _ = s.seen
            each = max(now - s.start, 1e-9) / done  # the running test's time so far counts
            return now + left * each, each, left
        each = u.wall_s * self.slow / u.tests if u.tests > 0 else 0.0
        if each <= 0:  # not counted, or no time (a wall so small it rounds to none): nothing to split
            return s.end, 0.0, 0
        if s.start is not None:
            return s.end, each, min(u.tests, math.ceil(max(0.0, s.end - now) / each - 1e-9))
        return s.end, each, u.tests

    def _emit(self, now: float, ds: list[Decision]) -> list[Decision]:
        if self.log is not None:
            self.log.extend(Logged(now, d) for d in ds)
        return ds

    def _head_slot(self) -> _Slot | None:
        slots = self._slots
        while self._head < len(slots) and slots[self._head].taken:
            self._head += 1
        return slots[self._head] if self._head < len(slots) else None

    def _walk(self, w: _Worker, extra: _Slot | None = None) -> tuple[float, set[str]]:
        """Peak above baseline over ``w``'s queue (plus ``extra`` behind it), and the fixtures
        that stay resident. Each unit runs on what the ones before it kept. Decisions use
        the caches ``_refresh`` keeps and ``_peak_with``; this whole walk is what the tests
        check those against. ``extra`` is walked as ``_send`` would queue it: after the releases
        that sending it decides, found here from scratch, not from ``_freeable``'s cache."""
        if extra is None:
            steps, res, held, kept = self._steps(w, w.queue)
        else:
            gone: tuple[str, ...] = ()
            if w.queue:
                after = self._steps(w, w.queue)[1]
                gone = tuple(f for f in after if f in self._releasable and not self._users.get(f, 0)
                             and f not in extra.fx)
            steps, res, held, kept = self._steps(w, (*w.queue, extra), also=gone, at=len(w.queue) - 1)
        return max(steps, max(0.0, kept) + held), res

    def _steps(self, w: _Worker, slots: Sequence[_Slot], also: Collection[str] = (),
               at: int = -1) -> tuple[float, set[str], float, float]:
        """The peak over ``slots`` run from ``w``'s base, and the state after them: resident
        fixtures, their memory (carried along, not summed again at every unit) and kept.
        ``also``: fixtures released after ``slots[at]`` besides its own releases."""
        mb = self._fx_mb
        res = set(w.base)
        # Sums over sets are exact (fsum), and releases go in the order decided: a set's order
        # follows the hash seed, and a plan must not (`suitefit plan` and `suitefit run` are
        # two processes)
        held = math.fsum(mb[f] for f in res) if res else 0.0
        kept = w.kept
        peak = max(0.0, kept) + held
        for i, s in enumerate(slots):
            for f in s.fx:
                if f not in res:
                    res.add(f)
                    held += mb[f]
            peak = max(peak, max(0.0, kept) + held + self._own(s, kept))
            for f in (*s.release, *also) if i == at else s.release:
                if f in res:
                    res.remove(f)
                    held -= mb[f]
            kept += s.unit.kept_mb
        return peak, res, held, kept

    def _refresh(self, w: _Worker) -> None:
        """After any change of ``w``'s queue, base or kept memory (``done``, ``_send``): its
        cached walk, the sums over workers, and what it shows."""
        was = w.resident
        w.steps_peak, w.resident, w.held, w.kept_end = self._steps(w, w.queue)
        w.version += 1
        self._pin(was, -1)
        self._pin(w.resident, 1)
        self._kept_sum -= w.kept_after
        w.kept_after = max(0.0, w.kept_end)
        self._kept_sum += w.kept_after
        peak = max(w.steps_peak, w.kept_after + w.held)
        self._total += peak - w.peak
        w.peak = peak
        self._see(w)

    def _peak_with(self, w: _Worker, s: _Slot) -> float:
        """``_walk(w, s)``'s peak in O(s's fixtures), from the state ``_refresh`` keeps: asked
        for every pending unit of every waiting worker when none runs a test (at 64 workers,
        a walk of each queue there made planning take minutes)."""
        mb, res = self._fx_mb, w.resident
        # sending ``s`` here releases those first: ``_held_after``, with ``_freeable``'s check
        # inline (asked ~30 times a decision when memory is short)
        if w.freeable_version != w.version or w.freeable_freed != self._freed_version:
            self._freeable(w)
        held, kept = w.held - w.freeable_mb if w.freeable else w.held, w.kept_end
        new: tuple[str, ...] = ()
        for f in s.fx:
            if f not in res and f not in new:
                new = (*new, f)
                held += mb[f]
        peak = max(w.steps_peak, max(0.0, kept) + held + self._own(s, kept))
        for f in s.release:
            if f in res or f in new:
                held -= mb[f]
        kept += s.unit.kept_mb
        return max(peak, max(0.0, kept) + held)

    def _own(self, s: _Slot, kept: float) -> float:
        """``s``'s own peak on a worker that has kept ``kept`` MiB: its forks map that too."""
        if not s.fork or kept <= 0.0:
            return s.own
        return max(s.own, s.unit.peak_at(self.baseline_mb + kept) - s.fx_mb)

    def _freeable(self, w: _Worker) -> tuple[str, ...]:
        """Fixtures resident after ``w``'s queue that may be released and that no pending unit
        uses: whatever is sent to ``w`` next, the send releases them after its queue's last
        unit (``_send``). Kept until ``w`` changes or such a fixture's users reach or leave 0."""
        if w.freeable_version != w.version or w.freeable_freed != self._freed_version:
            w.freeable = tuple(sorted(f for f in w.resident if f in self._releasable
                                      and not self._users.get(f, 0))) if w.queue else ()
            w.freeable_mb = sum(self._fx_mb[f] for f in w.freeable)
            w.freeable_version, w.freeable_freed = w.version, self._freed_version
        return w.freeable

    def _freed(self, w: _Worker, s: _Slot) -> tuple[str, ...]:
        """What sending pending ``s`` to ``w`` releases (``_send``); every fit counts the same
        fixtures gone (``_held_after``): a pending unit's fixtures have users, so none of them
        is freeable, and the filter only guards what ``_send`` is handed."""
        return tuple(f for f in self._freeable(w) if f not in s.fx)

    def _held_after(self, w: _Worker) -> float:
        """The fixture memory a unit sent to ``w`` runs beside: what stays resident after the
        queue, less what the send releases (to a pending unit, which uses none of them)."""
        return w.held - w.freeable_mb if self._freeable(w) else w.held

    def _free_at(self, w: _Worker, now: float) -> float:
        """When ``w`` is predicted to need its next unit."""
        if w.holding and len(w.queue) == 1:  # it is at its unit's last test
            return now + w.queue[0].unit.last_s * self.slow
        return max([now] + [s.end for s in w.queue])

    def _free_sooner(self, w: _Worker, now: float, bar: float) -> bool:
        """Is a worker other than ``w`` predicted to need its next unit before ``bar``?
        ``_free_at`` of each, without building its list, stopping at the first end at or past
        ``bar``: asked at most decisions of a holding worker, over every worker (at 42
        workers, the one comparison written as ``any(_free_at(o) < bar)`` was a sixth of
        planning)."""
        if bar <= now:  # no worker is free before now
            return False
        slow = self.slow
        for o in self._workers.values():
            if o is w:
                continue
            q = o.queue
            if o.holding and len(q) == 1:  # ``_free_at``'s worker at its unit's last test
                if now + q[0].unit.last_s * slow < bar:
                    return True
                continue
            for s in q:
                if s.end >= bar:
                    break
            else:
                return True
        return False

    def _fits(self, w: _Worker, slot: _Slot) -> tuple[bool, float]:
        """Does ``slot`` fit queued on ``w``? And the tree it predicts then."""
        peak = self._peak_with(w, slot)
        total = self._total - w.peak + peak + self._excess
        ok = self.budget_mb is None or total <= self.budget_mb or peak <= w.peak
        return ok, total  # (adding nothing never makes anything worse)

    def _floor(self) -> float:
        return self.fixed_mb + (len(self._workers) + len(self._coming)) * self.baseline_mb

    def _pinned_mb(self, besides: Collection[str] = ()) -> float:
        """Resident memory no order can free: fixtures set up and never released, and what
        the workers keep."""
        if not besides:  # most units set up no fixture
            return self._pinned_total + self._kept_sum
        pinned, mb = self._pinned, self._fx_mb
        return (self._pinned_total - sum(mb[f] for f in dict.fromkeys(besides) if pinned.get(f))
                + self._kept_sum)

    def _pin(self, fixtures: Iterable[str], by: int) -> None:
        """Count the workers where each unreleasable fixture stays resident (``_refresh``,
        ``worker_down``): ``_pinned_mb`` is asked several times a decision, and a walk of
        every worker's fixtures there was a quarter of planning 64 workers."""
        for f in sorted(fixtures):
            if f not in self._releasable:
                was = self._pinned.get(f, 0)
                self._pinned[f] = was + by
                if (was > 0) != (was + by > 0):
                    self._pinned_total += self._fx_mb[f] if by > 0 else -self._fx_mb[f]

    def _ever_fits(self, slot: _Slot) -> bool:
        if self.budget_mb is None:
            return True
        return self._floor() + self._pinned_mb(slot.fx) + slot.peak0 <= self.budget_mb

    def leaving(self) -> tuple[str, ...]:
        """Workers down whose processes the last sample still read: their memory is in the
        tree until they have exited (a worker's end reaches the runner before its exit)."""
        return self._leaving

    def busy_besides(self, name: str) -> bool:
        """Is any worker but ``name`` running a test (not waiting with a held or no test), or
        ending (its memory goes once it is down)? Then waiting is not waiting forever.
        (From the set ``_mark`` keeps: asked at every decision, a look at every worker there
        made a 64-worker simulation quadratic in its workers.)"""
        return len(self._busy) > (name in self._busy)

    def _mark(self, w: _Worker) -> None:
        """After any change of ``w``'s queue, waiting or draining: is it busy (``busy_besides``)?"""
        if (w.queue and not w.waiting) or w.draining:
            self._busy.add(w.name)
        else:
            self._busy.discard(w.name)

    def _choose(self, w: _Worker, now: float) -> tuple[_Slot | None, str, bool, _Worker, bool]:
        head = self._head_slot()
        assert head is not None
        budget = self.budget_mb
        # a worker still starting (or up and about to ask) is not idle: its baseline is
        # counted, and once it asks its end can make room. Waiting for it is not waiting
        # forever; deciding without it sent a hog "alone, over the budget" beside a second
        # worker that came up 0.3 s later
        busy = self.busy_besides(w.name)
        others = busy or bool(self._coming) or len(self._unasked) > (w.name in self._unasked)
        # list scheduling by availability: a worker still holding a long test leaves the
        # long units to a worker that will be free sooner
        if w.holding and self._pending > 1 and len(self._workers) > 1:
            mine = self._free_at(w, now)
            if self._free_sooner(w, now, mine - 1e-9):
                s = self._last_fitting(w)
                if s is not None:
                    return s, (f"holds a test for ~{fmt_s(mine - now)} more and another worker "
                               f"is free sooner: the last unit in order, not the longest"), False, w, False
        if budget is None:
            return (*self._apart(w, head, self._fits(w, head)[1], "no memory budget"), False, w, False)
        ok, head_total = self._fits(w, head)
        if ok and not self._shuts_out_a_hog(head, w):
            return (*self._apart(w, head, head_total, f"fits: tree {fmt_mb(head_total)} of {fmt_mb(budget)}"),
                    False, w, False)
        blocked = self._blocked if (self._blocked and not self._blocked.taken) else None
        if not ok and others and self._ever_fits(head) and blocked is not head:
            self._blocked = blocked = head
            self._backfill = {}
            self.stats.waited.setdefault(head.unit.name, now)
        if blocked is not None and not self._ever_fits(blocked):
            blocked = None
        # others, in order: within what is free on this worker and (beside a unit that
        # waits for memory) within the reserve that lets it start once running units end
        reserve = math.inf
        if blocked is not None:
            reserve = budget - (self._floor() + self._pinned_mb(blocked.fx)
                                + sum(self._backfill.values()) + blocked.peak0)
        free = budget - (self._total - w.peak + self._excess) - self._held_after(w)
        limit = min(max(free, 0.0), reserve)
        i = self._head
        while True:
            i = self._tree.first_at_most(i, limit)
            if i < 0:
                break
            s = self._slots[i]
            i += 1
            if s is head:
                continue
            ok, total = self._fits(w, s)
            own = self._own(s, w.kept_end)
            if ok and own <= reserve and not self._shuts_out_a_hog(s, w):
                if blocked is not None:
                    self._backfill[s.unit.name] = own
                return s, (f"fits: tree {fmt_mb(total)} of {fmt_mb(budget)}; {head.unit.name} "
                           f"does not fit now"), False, w, False
        if others:  # (nothing above changed what ``_fits`` reads)
            why = "" if busy else " (and a worker is still starting)"
            return None, (f"nothing pending fits: {head.unit.name} would take the tree to "
                          f"{fmt_mb(head_total)} of {fmt_mb(budget)}{why}"), False, w, False
        # nobody else runs a test: waiting would wait forever. The least harmful (worker,
        # unit) among this worker and the others waiting goes; it may be another worker's
        # (a unit that adds nothing queued behind what that one holds)
        cands = [w, *(o for o in self._workers.values() if o.waiting and o is not w)]
        total, _, _, best, o = min(((self._total - o.peak + p + self._excess, o is not w, pos, s, o)
                                    for o in cands for p, pos, s in [self._cheapest(o)]),
                                   key=lambda c: c[:3])
        if self._fits(o, best)[0]:
            return best, f"fits: tree {fmt_mb(total)} of {fmt_mb(budget)}", False, o, False
        # waiting workers whose end would make room for it end (each runs what it holds),
        # the largest first: one now, the next once that one is down, if one is not enough
        ends = sorted((x for x in cands if x is not o), key=lambda x: -x.peak)
        if ends and total - sum(self.baseline_mb + x.peak for x in ends) <= budget:
            x = ends[0]
            more = total - (self.baseline_mb + x.peak) > budget
            return None, (f"{best.unit.name} fits only once {x.name}" + (" and others" if more else "")
                          + f" end: {x.name} is shut down to make room"), False, x, True
        limit = self.limit_mb if self.limit_mb is not None else budget
        if total <= limit + 1e-6:
            # into the headroom, not over the budget: no over-budget send (the run says nothing),
            # but a plan that needs its headroom does not fit (``Simulation.fits``)
            reason = (f"runs alone on {o.name}: it takes the tree to {fmt_mb(total)}, inside the "
                      f"{fmt_mb(limit)} budget but over the {fmt_mb(budget)} units are admitted against "
                      f"(its headroom), even with nothing else running")
            self.stats.warnings.append(f"{best.unit.name} {reason}")
            return best, reason, False, o, False
        return best, (f"runs alone on {o.name}: it takes the tree to {fmt_mb(total)}, over "
                      f"the {fmt_mb(limit)} budget, even with nothing else running"), True, o, False

    def _over_ceiling(self, total: float) -> bool:
        """Does a tree of ``total`` (as ``_fits`` reckons it, live excess included) go over the
        soft ceiling? Only its predicted part counts (``_apart`` says why)."""
        return self.spread_mb is not None and total - self._excess > self.spread_mb + 1e-6

    def _apart(self, w: _Worker, head: _Slot, total: float, reason: str) -> tuple[_Slot | None, str]:
        """``head`` (``total``: its tree as ``_fits`` reckons it), unless it takes the predicted
        tree over the soft ceiling. Then a later unit in order that does not goes first
        (``head`` stays first in line for the next ask); when none does, this worker waits
        (``None``) while another runs a unit whose end can make room for ``head`` under the
        ceiling: at the end only hogs are left. The plan keeps a ceiling only when its
        prediction, waits included, costs no wall.

        The prediction alone, not what the live tree shows beyond it: the planner chose the
        ceiling on its simulation, which has no such excess. Counted here, an excess that no
        order removes (the 50,000-test suite's workers growing from 205 MiB to 327 MiB beside
        their files, beyond what the files' kept memory predicts) kept one worker waiting 64 s
        of a 105 s run for room that never came."""
        if self.spread_mb is None or not self._over_ceiling(total):
            return head, reason
        total -= self._excess  # what the messages say: the prediction's tree
        ceiling = self.spread_mb + 1e-6  # (sums in another order differ in the last bits)
        # a unit queued here adds at least its own memory to what the worker holds after its
        # queue (what it kept, the fixtures still resident), over the rest of the tree: a
        # bound, so that units that cannot fit are never walked (a 5,000-file plan asked
        # ~100,000 of them, 3 s of its 4.3)
        room = ceiling - (self._total - w.peak)
        limit = room - w.kept_after - self._held_after(w)
        # nor below the peak its queue reaches anyway: when that is already over, no unit is
        # (at 64 workers, a scan of every small unit for nothing, most of planning's time)
        i = self._head if w.steps_peak <= room + 1e-3 else len(self._slots)
        while True:
            i = self._tree.first_at_most(i, limit)
            if i < 0:
                break
            s = self._slots[i]
            i += 1
            if s is head:
                continue
            ok, t = self._fits(w, s)
            if ok and not self._over_ceiling(t) and not self._shuts_out_a_hog(s, w):
                return s, (f"keeps hogs apart: {head.unit.name} would take the predicted tree to {fmt_mb(total)} "
                           f"now, over the {fmt_mb(ceiling)} this plan keeps under; this one first "
                           f"(tree {fmt_mb(t - self._excess)})")
        # waiting ends: a running unit ends (and each end asks again), or none runs and it goes
        if self.busy_besides(w.name) and self._floor() + self._pinned_mb(head.fx) + head.peak0 <= ceiling:
            return None, (f"keeps hogs apart: {head.unit.name} would take the predicted tree to {fmt_mb(total)} now, "
                          f"over the {fmt_mb(ceiling)} this plan keeps under, and nothing later fits "
                          f"under it: waits for a running unit to end")
        return head, reason

    def _last_fitting(self, w: _Worker) -> _Slot | None:
        """The last pending unit in order, if it fits here: anything earlier is longer, not
        what is wanted. (Slots are taken, never given back, until an insertion reindexes
        them: the last pending one is found from where the last look stopped, not from the
        end every time, which grew a 5,000-file plan with its square.)"""
        slots = self._slots
        while self._tail >= 0 and slots[self._tail].taken:
            self._tail -= 1
        if self._tail < 0:
            return None
        s = slots[self._tail]
        ok, total = self._fits(w, s)
        if ok and not self._shuts_out_a_hog(s, w) and not self._over_ceiling(total):
            return s
        return None

    def _cheapest(self, w: _Worker) -> tuple[float, int, _Slot]:
        """The pending unit that adds least to ``w``'s peak (the first in order among equals):
        kept from one such choice to the next until ``w`` or the slots change, so that when
        no worker runs a test the choice is not a walk of every (worker, unit) pair (at 64
        workers that made planning 5,000 files take minutes)."""
        # most often a unit fits under the peak ``w`` reaches anyway: the first such, in order
        floor = w.steps_peak
        limit = floor - (w.kept_after + self._held_after(w))
        i = self._head
        while limit >= 0 and (i := self._tree.first_at_most(i, limit * (1 + 1e-12) + 1e-9)) >= 0:
            s = self._slots[i]
            p = self._peak_with(w, s)
            if p <= floor:  # never below it
                return p, s.pos, s
            i += 1
        got = self._cheap.get(w.name)
        key = (w.version, self._slots_version, self._freed_version)
        if got is None or got[0] != key:
            # ``_peak_with`` inline for the units that set up no fixture (most of them): this
            # rebuild was a quarter of planning 64 workers
            held, kept, floor = self._held_after(w), w.kept_end, w.steps_peak
            base = max(0.0, kept) + held
            heap = []
            # from the head, before which none is pending; each ``max(a, b)`` written out as
            # ``b if b > a else a``, its exact answer (the calls were most of the rebuild)
            for s in itertools.islice(self._slots, self._head, None):
                if s.taken:
                    continue
                if s.fx:
                    p = self._peak_with(w, s)
                else:
                    p = base + (self._own(s, kept) if s.fork else s.own)
                    if not p > floor:
                        p = floor
                    k = kept + s.unit.kept_mb
                    k = (k if k > 0.0 else 0.0) + held
                    if k > p:
                        p = k
                heap.append((p, s.pos, s))
            heapq.heapify(heap)
            got = self._cheap[w.name] = (key, heap)
        heap = got[1]
        while heap[0][2].taken:  # the caller asks only while a unit is pending
            heapq.heappop(heap)
        return heap[0]

    def _shuts_out_a_hog(self, slot: _Slot, w: _Worker) -> bool:
        """Would the resident memory this unit sets up (and that is never released) leave a
        pending unit no room ever? Then that unit goes first."""
        if self.budget_mb is None:
            return False
        held = w.resident
        added = sum(self._fx_mb[f] for f in slot.fx if f not in held and f not in self._releasable)
        if added <= 0:
            return False
        room = self.budget_mb - self._floor() - self._pinned_mb()
        leasts = self._sorted_least
        lo = bisect.bisect_right(leasts, room - added)
        hi = bisect.bisect_right(leasts, room)
        n = hi - lo
        if n and lo <= bisect.bisect_left(leasts, slot.least) < hi:
            n -= 1
        return n > 0

    def _take(self, s: _Slot) -> None:
        s.taken = True
        self._pending -= 1
        self._tree.clear(s.pos)
        i = bisect.bisect_left(self._sorted_least, s.least)
        if i < len(self._sorted_least) and self._sorted_least[i] == s.least:
            del self._sorted_least[i]
        for f in s.fx:
            self._users[f] -= 1
            if self._users[f] == 0 and f in self._releasable:
                self._freed_version += 1

    def _send(self, w: _Worker, slot: _Slot, reason: str, over: bool, now: float) -> list[Decision]:
        freed = self._freed(w, slot)  # what every fit of ``slot`` here counted as gone
        self._take(slot)
        out: list[Decision] = []
        if freed:
            last = w.queue[-1]
            for f in freed:
                last.release[f] = None
                out.append(Release(w.name, f, last.unit.name,
                                   f"{last.unit.name} is its last user on {w.name}: "
                                   f"{fmt_mb(self._fx_mb[f])} returns before {slot.unit.name}"))
        start = self._free_at(w, now)
        slot.end = start + slot.unit.wall_s * self.slow
        w.queue.append(slot)
        w.waiting = False
        w.holding = False  # its held test runs now: it is at its last test only when it asks again
        self._mark(w)
        if slot is self._blocked:
            self._blocked = None
            self._backfill = {}
        self._refresh(w)
        if over:
            self.stats.warnings.append(f"{slot.unit.name} {reason}")
        out.append(Send(w.name, slot.unit, reason, over))
        return out
