"""The run-time dispatch policy as a pure state machine.

The same object drives the simulation (``simulate.py``) and the real xdist
scheduler, so what the plan predicts is what the run does. It returns decisions;
it never sends anything anywhere.

Memory admission: a unit starts only if the tree's memory - the larger of the
live measurement and the prediction (worker baselines, fixtures resident on
workers, predicted peaks of running units) - plus the unit's predicted peak fits
the budget. When nothing is running the head unit starts regardless (alone, with a
warning if it does not fit), so the dispatcher always makes progress. A small unit
may run beside a hog that waits for memory only if the hog will still fit next to
it once the units running before it finish (so small units cannot starve a hog).
"""

from __future__ import annotations

import heapq
import statistics
from collections.abc import Collection, Sequence

from suitefit.model import Plan, Unit
from suitefit.units import fmt_mb

DEFAULT_WALL_S = 1.0
DEFAULT_PEAK_MB = 50.0


class _Slot:
    __slots__ = ("least", "taken", "unit")

    def __init__(self, unit: Unit, fx_mb: dict[str, float]) -> None:
        self.unit = unit
        self.taken = False
        # the least memory it can need: on a worker already holding all its fixtures
        self.least = unit.peak_mb - sum(fx_mb.get(f, 0.0) for f in unit.fixtures)


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
        self._slots = [_Slot(u, self._fx_mb) for u in plan.units]
        self._head = 0
        self._pending = len(self._slots)
        self._known = {f for u in plan.units for f in u.files}
        # (least need, tiebreak, slot) of every pending slot: skip scans nothing can pass
        self._least: list[tuple[float, int, _Slot]] = [
            (sl.least, i, sl) for i, sl in enumerate(self._slots)]
        heapq.heapify(self._least)
        self._tiebreak = len(self._slots)
        self._workers: list[str] = []
        self._held: dict[str, set[str]] = {}
        self._running: dict[str, tuple[Unit, float]] = {}  # worker -> (unit, mb it added)
        self._resident_mb = 0.0  # fixtures resident on workers
        self._running_mb = 0.0
        self._blocked: _Slot | None = None  # the first unit in order waiting for memory
        self._backfill: set[str] = set()  # units started beside the blocked one
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
            self._version += 1

    @property
    def floor_mb(self) -> float:
        return len(self._workers) * self.baseline_mb

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
        backfill_mb = sum(self._running[w][1] for w in self._running
                          if self._running[w][0].name in self._backfill)
        if self._running:
            room = self.budget_mb - effective
            if blocked is not None:
                room = min(room, self.budget_mb - (self.floor_mb + self._resident_mb + backfill_mb
                                                   + blocked.unit.peak_mb))
            least = self._least
            while least and least[0][2].taken:
                heapq.heappop(least)
            blocked_fits = blocked is not None and (
                effective + self._need(blocked.unit, worker) <= self.budget_mb)
            if least and least[0][0] > room and not blocked_fits:  # nothing can start now
                if blocked is None and self._head < len(slots):
                    self._block(slots[self._head], worker, effective)
                return None
        for i in range(self._head, len(slots)):
            slot = slots[i]
            if slot.taken:
                continue
            unit = slot.unit
            need = self._need(unit, worker)
            if not self._running:
                # nothing runs: the head starts, fitting or not (it never fits better than now)
                if effective + need > self.budget_mb:
                    msg = (f"{unit.name} needs {fmt_mb(need)} on top of {fmt_mb(effective)}: "
                           f"{fmt_mb(effective + need)} > budget {fmt_mb(self.budget_mb)}; "
                           f"it runs alone on {worker}")
                    self.warnings.append(msg)
                    self._note(f"{worker}: start {unit.name} ALONE over budget ({msg})")
                    return self._start(slot, worker, need, alone=True)
                return self._start(slot, worker, need, effective=effective)
            if effective + need > self.budget_mb:
                if blocked is None:
                    blocked = slot
                    self._block(slot, worker, effective)
                continue
            if blocked is not None and blocked is not slot:
                # backfill only if the waiting unit still fits beside everything backfilled
                reserve = (self.floor_mb + self._resident_mb + backfill_mb + need
                           + blocked.unit.peak_mb)
                if reserve > self.budget_mb:
                    continue
                self._backfill.add(unit.name)
            return self._start(slot, worker, need, effective=effective)
        self._fail_at[held_key] = effective
        return None

    def _block(self, slot: _Slot, worker: str, effective: float) -> None:
        if self._blocked is slot:
            return
        self._blocked = slot
        self._backfill = set()
        self.blocked_ever.add(slot.unit.name)
        self._note(f"{worker}: {slot.unit.name} waits for memory: needs "
                   f"{fmt_mb(self._need(slot.unit, worker))}, tree at {fmt_mb(effective)} "
                   f"of {fmt_mb(self.budget_mb)}")

    def _start(self, slot: _Slot, worker: str, need: float, *, alone: bool = False,
               effective: float = 0.0) -> Unit:
        unit = slot.unit
        slot.taken = True
        self._pending -= 1
        self._running[worker] = (unit, need)
        self._running_mb += need
        if self._blocked is slot:
            self._blocked = None
            self._backfill = set()
        self._version += 1
        if not alone:
            self._note(f"{worker}: start {unit.name} (+{fmt_mb(need)}: tree "
                       f"{fmt_mb(effective)} -> {fmt_mb(effective + need)} of {fmt_mb(self.budget_mb)})")
        return unit

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
        self._backfill.discard(unit_name)
        self._version += 1
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
            slot = _Slot(unit, self._fx_mb)
            self._slots.insert(pos, slot)
            self._tiebreak += 1
            heapq.heappush(self._least, (slot.least, self._tiebreak, slot))
            self._pending += 1
        if new:
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
                s.taken = True
                self._pending -= 1
        if dropped:
            self._version += 1
            self._note(f"dropped {dropped} planned file(s) that were not collected")
