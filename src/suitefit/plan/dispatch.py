"""The run-time dispatch policy as a pure state machine.

It drives the simulation (``simulate.py``) that gives the plan its predictions. The
xdist executor applies the same admission rule in a more conservative form
(``admission.py``): an xdist worker must be handed its next unit before its current
one ends, which this one-unit-per-worker machine does not model. It returns
decisions; it never sends anything anywhere.

Memory admission: a unit starts only if the tree's memory - the larger of the
live measurement and the prediction (worker baselines, fixtures resident on
workers, predicted peaks of running units) - plus the unit's predicted peak fits
the budget. When nothing is running the head unit starts regardless (alone, with a
warning if it does not fit), so the dispatcher always makes progress. A small unit
may run beside a hog that waits for memory only if the hog will still fit next to
it once the units running before it finish (so small units cannot starve a hog),
and a unit does not set up session fixtures (resident until its worker ends) while
that would leave a waiting hog no room ever (the hog goes first). A unit that can
never fit, even alone, reserves nothing: it runs alone when nothing else runs.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Collection, Sequence

from suitefit.model import Plan, Unit
from suitefit.units import fmt_mb

DEFAULT_WALL_S = 1.0
DEFAULT_PEAK_MB = 50.0


class _Slot:
    __slots__ = ("least", "pos", "taken", "unit")

    def __init__(self, unit: Unit, fx_mb: dict[str, float], pos: int) -> None:
        self.unit = unit
        self.pos = pos  # index in the dispatch order
        self.taken = False
        # the least memory it can need: on a worker already holding all its fixtures
        self.least = unit.peak_mb - sum(fx_mb.get(f, 0.0) for f in unit.fixtures)


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

    @property
    def min(self) -> float:
        return self.t[1]

    def clear(self, i: int) -> None:
        t = self.t
        i += self.n
        t[i] = math.inf
        i //= 2
        while i:
            t[i] = min(t[2 * i], t[2 * i + 1])
            i //= 2

    def first_at_most(self, start: int, x: float) -> int:
        """The first position >= start whose value is <= x, or -1."""
        t, n = self.t, self.n
        if start >= n or t[1] > x:
            return -1
        if t[n + start] <= x:  # the common case: the first candidate already qualifies
            return start
        stack = [(1, 0, n)]
        while stack:
            node, lo, hi = stack.pop()
            if hi <= start or t[node] > x:
                continue
            if hi - lo == 1:
                return lo
            mid = (lo + hi) // 2
            stack.append((2 * node + 1, mid, hi))  # right later: left first
            stack.append((2 * node, lo, mid))
        return -1


class Dispatcher:
    """Hands units to idle workers in plan order under memory admission.

    ``baseline_mb`` is ONE worker's baseline: the tree's floor is
    ``len(workers) * baseline_mb``.
    """

    def __init__(self, plan: Plan, workers: Sequence[str], budget_mb: float,
                 baseline_mb: float, *, log: bool = True) -> None:
        self.budget_mb = float(budget_mb)
        self.baseline_mb = float(baseline_mb)
        self.decisions: list[str] = []
        self.warnings: list[str] = []
        self.blocked_ever: set[str] = set()  # units that waited for memory at least once
        self._log = log
        self._fx_mb = {f.name: f.mb for f in plan.fixtures}
        self._slots = [_Slot(u, self._fx_mb, i) for i, u in enumerate(plan.units)]
        self._head = 0
        self._pending = len(self._slots)
        self._known = {f for u in plan.units for f in u.files}
        self._tree = _MinTree([sl.least for sl in self._slots])
        self._sorted_least = sorted(sl.least for sl in self._slots)
        self._workers: list[str] = []
        self._floor_mb = 0.0
        self._held: dict[str, set[str]] = {}
        self._running: dict[str, tuple[Unit, float]] = {}  # worker -> (unit, mb it added)
        self._resident_mb = 0.0  # fixtures resident on workers
        self._running_mb = 0.0
        self._blocked: _Slot | None = None  # the first unit in order waiting for memory
        self._backfill: dict[str, float] = {}  # units started beside the blocked one -> mb
        # fruitless scans since the last state change: held fixtures -> effective memory
        self._fail_at: dict[frozenset[str], float] = {}
        self._fail_version = -1
        self._version = 0
        for w in workers:
            self._add_worker(w)
        walls = [u.wall_s for u in plan.units if len(u.files) == 1]
        peaks = [u.peak_mb for u in plan.units if len(u.files) == 1]
        self.default_wall_s = statistics.median(walls) if walls else DEFAULT_WALL_S
        self.default_peak_mb = statistics.median(peaks) if peaks else DEFAULT_PEAK_MB

    # -- state ----------------------------------------------------------------------------

    def _add_worker(self, w: str) -> None:
        if w not in self._held:
            self._workers.append(w)
            self._held[w] = set()
            self._floor_mb = len(self._workers) * self.baseline_mb
            self._version += 1

    @property
    def floor_mb(self) -> float:
        return self._floor_mb

    @property
    def predicted_mb(self) -> float:
        """Predicted tree memory now: baselines, resident fixtures, running units' peaks."""
        return self.floor_mb + self._resident_mb + self._running_mb

    @property
    def finished(self) -> bool:
        return self._pending == 0 and not self._running

    @property
    def pending(self) -> int:
        return self._pending

    @property
    def running(self) -> dict[str, str]:
        """worker -> name of the unit it runs."""
        return {w: u.name for w, (u, _) in self._running.items()}

    @property
    def blocked(self) -> str | None:
        """The unit currently waiting for memory, if any."""
        return self._blocked.unit.name if self._blocked else None

    def _need(self, unit: Unit, worker: str) -> float:
        if not unit.fixtures:
            return unit.peak_mb
        held = self._held[worker]
        return unit.peak_mb - sum(self._fx_mb.get(f, 0.0) for f in unit.fixtures if f in held)

    def _note(self, line: str) -> None:
        if self._log:
            self.decisions.append(line)

    # -- decisions ------------------------------------------------------------------------

    def next_unit(self, worker: str, live_mb: float) -> Unit | None:
        """The next unit for idle ``worker`` given the live tree memory, or None (wait/done)."""
        if worker in self._running:
            raise ValueError(f"worker {worker} asked for work while running {self._running[worker][0].name}")
        self._add_worker(worker)
        if self._pending == 0:
            return None
        predicted = self.predicted_mb
        effective = max(float(live_mb), predicted)
        held_key = frozenset(self._held[worker])
        if self._fail_version != self._version:
            self._fail_at = {}
            self._fail_version = self._version
        elif effective >= self._fail_at.get(held_key, float("inf")):
            return None
        slots = self._slots
        while self._head < len(slots) and slots[self._head].taken:
            self._head += 1
        blocked = self._blocked if (self._blocked and not self._blocked.taken) else None
        if blocked is not None and not self._can_ever_fit(blocked):
            blocked = None  # it can never fit, even alone: it runs alone at the end, reserve nothing
        backfill_mb = sum(self._backfill.values())
        free = self.budget_mb - effective
        room = free
        if blocked is not None:
            room = min(room, self.budget_mb - (self.floor_mb + self._resident_mb + backfill_mb
                                               + blocked.unit.peak_mb))
        head = slots[self._head] if self._head < len(slots) else None
        if head is not None and self._running and blocked is None and self._can_ever_fit(head) \
                and self._need(head.unit, worker) > free:
            blocked = head  # the first unit in order waits for memory
            self._block(head, worker, effective)
            room = min(room, self.budget_mb - (self.floor_mb + self._resident_mb + backfill_mb
                                               + head.unit.peak_mb))
        if blocked is not None:
            need = self._need(blocked.unit, worker)
            if need <= free and not self._shuts_out_a_hog(blocked, worker):
                return self._start(blocked, worker, need, effective=effective)
        # others: within what is free, and (beside a waiting unit) within its reserve
        limit = free if blocked is None else min(free, room)
        tree = self._tree
        i = self._head
        while True:
            i = tree.first_at_most(i, limit)
            if i < 0:
                break
            slot = slots[i]
            i += 1
            if slot is blocked:
                continue
            unit = slot.unit
            need = slot.least if not unit.fixtures else self._need(unit, worker)
            if need > limit or self._shuts_out_a_hog(slot, worker):
                continue
            started = self._start(slot, worker, need, effective=effective)
            if blocked is not None:
                self._backfill[unit.name] = need
            return started
        if not self._running and head is not None:
            # nothing runs and nothing passed: the head starts anyway (it never fits better)
            return self._start_alone(head, worker, effective)
        self._fail_at[held_key] = effective
        return None

    def _can_ever_fit(self, slot: _Slot) -> bool:
        return self.floor_mb + self._resident_mb + slot.least <= self.budget_mb

    def _start_alone(self, slot: _Slot, worker: str, effective: float) -> Unit:
        need = self._need(slot.unit, worker)
        if effective + need <= self.budget_mb:
            return self._start(slot, worker, need, effective=effective)
        msg = (f"{slot.unit.name} needs {fmt_mb(need)} on top of {fmt_mb(effective)}: "
               f"{fmt_mb(effective + need)} > budget {fmt_mb(self.budget_mb)}; "
               f"it runs alone on {worker}")
        self.warnings.append(msg)
        self._note(f"{worker}: start {slot.unit.name} ALONE over budget ({msg})")
        return self._start(slot, worker, need, alone=True)

    def _shuts_out_a_hog(self, slot: _Slot, worker: str) -> bool:
        """Would the fixtures this unit leaves resident stop a pending unit from ever fitting?

        Session fixtures stay until the worker ends, so memory they hold is never freed
        for a hog still waiting: run such hogs before setting up more resident memory.
        """
        unit = slot.unit
        if not unit.fixtures:
            return False
        held = self._held[worker]
        added = sum(self._fx_mb.get(f, 0.0) for f in unit.fixtures if f not in held)
        if added <= 0:
            return False
        room = self.budget_mb - self.floor_mb - self._resident_mb  # what a hog can ever get
        leasts = self._sorted_least
        # a pending unit (not this one) with least in (room - added, room] fits now, not after
        lo = bisect.bisect_right(leasts, room - added)
        hi = bisect.bisect_right(leasts, room)
        n = hi - lo
        if n and lo <= bisect.bisect_left(leasts, slot.least) < hi:
            n -= 1  # that one is the unit itself
        return n > 0

    def _block(self, slot: _Slot, worker: str, effective: float) -> None:
        if self._blocked is slot:
            return
        self._blocked = slot
        self._backfill = {}
        self.blocked_ever.add(slot.unit.name)
        if self._log:
            self._note(f"{worker}: {slot.unit.name} waits for memory: needs "
                   f"{fmt_mb(self._need(slot.unit, worker))}, tree at {fmt_mb(effective)} "
                   f"of {fmt_mb(self.budget_mb)}")

    def _start(self, slot: _Slot, worker: str, need: float, *, alone: bool = False,
               effective: float = 0.0) -> Unit:
        unit = slot.unit
        self._take(slot)
        self._running[worker] = (unit, need)
        self._running_mb += need
        if self._blocked is slot:
            self._blocked = None
            self._backfill = {}
        self._version += 1
        if not alone and self._log:
            self._note(f"{worker}: start {unit.name} (+{fmt_mb(need)}: tree "
                       f"{fmt_mb(effective)} -> {fmt_mb(effective + need)} of {fmt_mb(self.budget_mb)})")
        return unit

    def _take(self, slot: _Slot) -> None:
        slot.taken = True
        self._pending -= 1
        self._tree.clear(slot.pos)
        i = bisect.bisect_left(self._sorted_least, slot.least)
        del self._sorted_least[i]

    def unit_done(self, worker: str, unit_name: str) -> None:
        """``worker`` finished ``unit_name``; its persistent fixtures stay resident there."""
        cur = self._running.get(worker)
        if cur is None or cur[0].name != unit_name:
            raise ValueError(f"worker {worker} is not running {unit_name}")
        unit, need = cur
        del self._running[worker]
        self._running_mb -= need
        held = self._held[worker]
        for f in unit.fixtures:
            if f not in held:
                held.add(f)
                self._resident_mb += self._fx_mb.get(f, 0.0)
        self._backfill.pop(unit_name, None)
        self._version += 1
        if self._log:
            self._note(f"{worker}: done {unit_name}")

    def add_unknown(self, files: Sequence[str]) -> None:
        """Collected files the plan does not know: single-file units at a default cost."""
        new = [f for f in dict.fromkeys(files) if f not in self._known]
        for f in new:
            self._known.add(f)
            unit = Unit(name=f, files=(f,), wall_s=self.default_wall_s, peak_mb=self.default_peak_mb,
                        reason="not in the plan: default cost (median of the plan's files)")
            # longest-first position among what is still pending
            pos = len(self._slots)
            for i in range(self._head, len(self._slots)):
                s = self._slots[i]
                if not s.taken and s.unit.wall_s < unit.wall_s:
                    pos = i
                    break
            slot = _Slot(unit, self._fx_mb, pos)
            self._slots.insert(pos, slot)
            bisect.insort(self._sorted_least, slot.least)
            self._pending += 1
        if new:
            for i, sl in enumerate(self._slots):
                sl.pos = i
            self._tree = _MinTree([math.inf if sl.taken else sl.least for sl in self._slots])
            self._version += 1
            self._note(f"added {len(new)} file(s) missing from the plan at the default "
                       f"{self.default_wall_s:.2f} s / {fmt_mb(self.default_peak_mb)} each")

    def restrict_to(self, collected: Collection[str]) -> None:
        """Drop planned files that were not collected (deselected, removed); empty units go."""
        keep = set(collected)
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
                s.unit = Unit(u.name, files, u.wall_s, u.peak_mb, u.fixtures, u.reason)
            else:
                self._take(s)
        if dropped:
            self._version += 1
            self._note(f"dropped {dropped} planned file(s) that were not collected")
