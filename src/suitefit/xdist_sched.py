"""The pytest-xdist scheduler that executes a suitefit plan.

xdist calls it with events (a node is ready, collected, finished a test, died);
it places whole units (a file, or a group of files that must share a worker) in
plan order, admitting each by live memory (``plan.admission``), and keeps an
in-flight journal. Decisions come from the pure policy; this class only applies
them and keeps the bookkeeping xdist expects (``xdist.scheduler`` protocol).

An xdist worker runs a test only once it knows the next one (for teardown), so
a worker needs two pending tests to be busy: a worker down to one is "about to
go idle" and is the moment its next unit is chosen.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from suitefit import timing
from suitefit.measure.journal import Journal
from suitefit.model import Plan, Unit
from suitefit.plan.admission import Admit, Wait, choose_next

LiveMemory = Callable[[], tuple[float, dict[str, float]]]  # (tree MiB, worker id -> its tree MiB)
DecisionSink = Callable[[str, str, str, str], None]  # kind, worker, unit, reason


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


@dataclass
class _Assigned:
    unit: Unit
    indices: list[int]
    left: set[int] = field(default_factory=set)
    started: bool = False
    start_mb: float = 0.0


class SuitefitScheduling:
    def __init__(self, config: Any, log: Any, plan: Plan, *, numnodes: int, live: LiveMemory,
                 journal: Journal | None = None, on_decision: DecisionSink | None = None,
                 floor: Callable[[], dict[str, float]] | None = None) -> None:
        self.config = config
        self.log = log
        self.plan = plan
        self.numnodes = numnodes
        self.live = live
        self.journal = journal
        self.on_decision = on_decision or (lambda *a: None)
        self.budget_mb: float | None = plan.budget.memory_mb or None
        self._fixture_mb = {f.name: f.mb for f in plan.fixtures}  # stays resident once set up
        self._node_fixtures: dict[Any, set[str]] = {}  # fixtures of the units a node was given
        self.floor = floor or (lambda: {})  # worker id -> its lowest measured memory (its idle floor)
        self.node2collection: dict[Any, list[str]] = {}
        self.node2pending: dict[Any, list[int]] = {}
        self.node2units: dict[Any, deque[_Assigned]] = {}
        self.collection: list[str] | None = None
        self.pending_units: list[Unit] = []
        self.unit_indices: dict[str, list[int]] = {}
        self.placement: dict[str, list[str]] = {}
        self._shutdown: set[Any] = set()
        self._waiting: dict[Any, str] = {}
        self._scheduled = False
        self.stopping = False  # a worker died and restarts are off: withdraw queued work

    # -- the Scheduling protocol ---------------------------------------------------------

    @property
    def nodes(self) -> list[Any]:
        return list(self.node2pending)

    @property
    def collection_is_completed(self) -> bool:
        # once complete it stays complete: nodes leave (finish or die) after collecting
        return self._scheduled or len(self.node2collection) >= self.numnodes

    @property
    def tests_finished(self) -> bool:
        if not self.collection_is_completed or self.pending_units:
            return False
        # xdist shuts every worker down once this is true, which releases each worker's
        # held last test at once: not while one is still held back for memory (_may_release).
        return all(not p or (len(p) == 1 and n in self._shutdown) for n, p in self.node2pending.items())

    @property
    def has_pending(self) -> bool:
        return bool(self.pending_units) or any(self.node2pending.values())

    def add_node(self, node: Any) -> None:
        assert node not in self.node2pending
        self.node2pending[node] = []
        self.node2units[node] = deque()

    def add_node_collection(self, node: Any, collection: Sequence[str]) -> None:
        if self.collection is not None and list(collection) != self.collection:
            from xdist.report import report_collection_diff

            msg = report_collection_diff(self.collection, list(collection),
                                         "first worker", node.gateway.id)
            self.log(msg)
            import pytest

            self.config.hook.pytest_collectreport(
                report=pytest.CollectReport(nodeid=node.gateway.id, outcome="failed", longrepr=msg, result=[])
            )
            return
        self.node2collection[node] = list(collection)
        if self.collection is None:
            self.collection = list(collection)

    def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
        pending = self.node2pending[node]
        pending.remove(item_index)
        units = self.node2units[node]
        for a in list(units):
            if item_index in a.left:
                a.left.discard(item_index)
                if not a.left:
                    units.remove(a)
                    self.on_decision("done", node.gateway.id, a.unit.name, "")
                break
        self._note_running(node)
        self._fill_all(first=node)

    def mark_test_pending(self, item: str) -> None:
        assert self.collection is not None
        idx = self.collection.index(item)
        unit = Unit(name=f"rerun:{item}", files=(file_of(item),), wall_s=0.0, peak_mb=0.0,
                    reason="put back by a plugin")
        self.unit_indices[unit.name] = [idx]
        self.pending_units.insert(0, unit)
        self._fill_all()

    def remove_pending_tests_from_node(self, node: Any, indices: Sequence[int]) -> None:
        """The worker gave back tests we asked for (only when the run is being stopped)."""
        pending = self.node2pending.get(node, [])
        for i in indices:
            if i in pending:
                pending.remove(i)
        for a in self.node2units.get(node, ()):
            a.left -= set(indices)
        if self.stopping and not indices:
            # The worker had moved on before the steal arrived (it gives back all or
            # nothing): ask again for what is still queued behind its current test.
            self.withdraw(node)

    def withdraw(self, node: Any) -> None:
        """Take back the tests queued on ``node`` behind the one it runs and the next."""
        self.stopping = True
        self.pending_units.clear()
        pending = self.node2pending.get(node, [])
        if len(pending) > 2:
            node.send_steal(pending[2:])  # the worker answers with `unscheduled`

    def remove_node(self, node: Any) -> str | None:
        pending = self.node2pending.pop(node)
        units = self.node2units.pop(node)
        self.node2collection.pop(node, None)
        self._shutdown.discard(node)
        self._waiting.pop(node, None)
        if self.journal is not None:
            self.journal.done(node.gateway.id)
        if not pending:
            return None
        assert self.collection is not None
        crashitem = self.collection[pending[0]]
        if self.stopping:
            # Restarts are off: xdist shuts every other worker down right after this returns,
            # so what the dead worker held is not run (like the work withdrawn from the others).
            return crashitem
        # Units it held go back to the front, minus the test it died in (xdist reports that one).
        for a in reversed(units):
            rest = [i for i in a.indices if i in a.left and i != pending[0]]
            if rest:
                name = f"{a.unit.name}:requeued"
                self.unit_indices[name] = rest
                self.pending_units.insert(0, Unit(name, a.unit.files, a.unit.wall_s, a.unit.peak_mb,
                                                  a.unit.fixtures, "requeued after its worker died"))
        self._fill_all()
        return crashitem

    def schedule(self) -> None:
        assert self.collection_is_completed
        if self._scheduled:
            return
        self._scheduled = True
        if self.collection is None:
            return
        self.pending_units = self._units_for(self.collection)
        self._fill_all()

    # -- placing units -------------------------------------------------------------------

    def _units_for(self, collection: list[str]) -> list[Unit]:
        """Plan units mapped to the collected tests; files the plan does not know go first."""
        by_file: dict[str, list[int]] = {}
        for i, nodeid in enumerate(collection):
            by_file.setdefault(file_of(nodeid), []).append(i)
        placed: set[str] = set()
        units: list[Unit] = []
        for u in self.plan.units:
            files = [f for f in u.files if f in by_file and f not in placed]
            if not files:
                continue
            placed.update(files)
            self.unit_indices[u.name] = [i for f in files for i in by_file[f]]
            units.append(u)
        peaks = [u.peak_mb for u in self.plan.units] or [0.0]
        unknown = [f for f in by_file if f not in placed]
        extra = []
        for f in unknown:
            name = f"new:{f}"
            self.unit_indices[name] = by_file[f]
            extra.append(Unit(name, (f,), 0.0, statistics.median(peaks),
                              reason="not in the plan (never measured): runs early at a median cost"))
            self.on_decision("unplanned", "-", name, "not in the plan: median predicted peak")
        return extra + units

    def _running(self, node: Any) -> bool:
        n = len(self.node2pending.get(node, ()))
        return n >= 2 or (n >= 1 and node in self._shutdown)

    def _others_busy(self, node: Any) -> bool:
        return any(self._running(n) for n in self.node2pending if n is not node)

    def _reserved(self, except_node: Any, worker_mb: dict[str, float]) -> float:
        """Predicted peaks other workers hold that their live memory does not show yet."""
        total = 0.0
        for node, units in self.node2units.items():
            if node is except_node:
                continue
            now = worker_mb.get(node.gateway.id, 0.0)
            for a in units:
                total += max(0.0, a.unit.peak_mb - (now - a.start_mb)) if a.started else a.unit.peak_mb
        return total

    def _leaves_before_next(self, node: Any, worker_mb: dict[str, float]) -> float:
        """Memory this node's running unit added that is gone before a unit queued behind it starts.

        A worker runs one test at a time, so the unit queued now starts only after the
        running one's last teardown: what the worker holds above its lowest measured
        memory, less the session fixtures its units leave resident (the plan's
        ``fixtures``), does not stand beside the queued unit. Without this a worker holding
        a hog could never queue the next hog, and under a tight budget hogs were left for
        the end instead of running back to back. The lowest reading, not the reading when
        the unit started: that one can still show the previous unit, freed since (the
        samples are 0.1 s apart). A unit the plan never measured keeps its growth counted.
        """
        wid = node.gateway.id
        now = worker_mb.get(wid, 0.0)
        running = next((a for a in self.node2units.get(node, ()) if a.started and a.left), None)
        low = self.floor().get(wid)
        if running is None or running.unit.name.startswith("new:") or low is None:
            return 0.0
        resident = sum(self._fixture_mb.get(f, 0.0) for f in self._node_fixtures.get(node, ()))
        return max(0.0, now - low - resident)

    def _fill_all(self, first: Any = None) -> None:
        order = [first] if first is not None and first in self.node2pending else []
        order += [n for n in self.node2pending if n is not first]
        for node in order:
            self._fill(node)
        if not self.pending_units and self._scheduled:
            for node in list(self.node2pending):
                if node not in self._shutdown and self._may_release(node):
                    self._shutdown.add(node)
                    node.shutdown()
                    self._note_running(node)  # its last queued test now runs

    def _may_release(self, node: Any) -> bool:
        """May ``node`` be shut down now, which also lets it run the one test it holds?

        A worker with a single pending test holds it until it gets a next one or is shut
        down. That test is a unit's (last) test and may be a hog: shutting every worker down
        at once released held hogs together, over the budget. So a held unit is released
        like any admission: when it fits beside what runs, or when nothing else runs (then
        it runs alone). Workers running two or more queued tests, or none, go at once.
        """
        pending = self.node2pending.get(node, [])
        if len(pending) != 1 or self.budget_mb is None:
            return True
        held = next((a for a in self.node2units.get(node, ()) if pending[0] in a.left), None)
        if held is None or held.started:
            return True
        tree_mb, worker_mb = self.live()
        others_busy = self._others_busy(node)
        room = self.budget_mb - tree_mb - self._reserved(node, worker_mb)
        if held.unit.peak_mb <= room or not others_busy:
            return True
        if self._waiting.get(node) != "release":
            self._waiting[node] = "release"
            self.on_decision("wait", node.gateway.id, held.unit.name,
                             f"held back at the end: {held.unit.peak_mb:.0f} MiB predicted, {room:.0f} MiB free")
        return False

    def _fill(self, node: Any) -> None:
        # Tests sent after xdist's shutdown land behind the worker's SHUTDOWN marker and never
        # run, yet would stay pending here: at the worker's `workerfinished`, xdist asserts that
        # `remove_node` names no test (its `assert not crashitem`).
        if getattr(node, "shutting_down", False):
            return
        while len(self.node2pending[node]) < 2 and self.pending_units:
            tree_mb, worker_mb = self.live()
            others_busy = self._others_busy(node)
            live_mb = tree_mb - self._leaves_before_next(node, worker_mb)
            d = choose_next(self.pending_units, live_mb=live_mb, reserved_mb=self._reserved(node, worker_mb),
                            budget_mb=self.budget_mb, others_busy=others_busy)
            wid = node.gateway.id
            if isinstance(d, Wait):
                if self._waiting.get(node) != d.reason:
                    self._waiting[node] = d.reason
                    self.on_decision("wait", wid, self.pending_units[0].name, d.reason)
                return
            assert isinstance(d, Admit)
            self._waiting.pop(node, None)
            del self.pending_units[d.index]
            indices = self.unit_indices[d.unit.name]
            self.node2units[node].append(_Assigned(d.unit, indices, set(indices)))
            self._node_fixtures.setdefault(node, set()).update(d.unit.fixtures)
            self.node2pending[node].extend(indices)
            self.placement.setdefault(wid, []).append(d.unit.name)
            self.on_decision("over-budget" if d.over_budget else "admit", wid, d.unit.name, d.reason)
            node.send_runtest_some(indices)
            self._note_running(node, worker_mb)

    def _note_running(self, node: Any, worker_mb: dict[str, float] | None = None) -> None:
        """Mark the unit whose test this node now runs as started, and tell the journal."""
        pending = self.node2pending.get(node)
        if not pending or not self._running(node):
            if self.journal is not None and not pending:
                self.journal.done(node.gateway.id)
            return
        head = pending[0]
        for a in self.node2units[node]:
            if head in a.left:
                if not a.started:
                    a.started = True
                    if worker_mb is None:
                        worker_mb = self.live()[1]
                    a.start_mb = worker_mb.get(node.gateway.id, 0.0)
                break
        if self.journal is not None and self.collection is not None:
            self.journal.start(node.gateway.id, self.collection[head], timing.wall())
