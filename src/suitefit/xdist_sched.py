"""The pytest-xdist scheduler of `suitefit run`: a thin adapter over the scheduling core.

xdist calls it with events (a node is ready, collected, finished a test, died); it turns
them into the core's events (``plan.core.Core``, the same core that made the plan's
prediction), applies the core's decisions (send a unit's tests, post a fixture release,
shut a node down) and keeps the bookkeeping xdist expects (the ``xdist.scheduler``
protocol). It decides nothing itself.

An xdist worker runs a test only once it knows the next one (for teardown), so a worker
needs two pending tests to be busy: a worker down to one holds it, and that is when it
asks the core for its next unit.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from suitefit import timing
from suitefit.measure.journal import Journal
from suitefit.model import Plan, Unit
from suitefit.plan.class_cuts import inside_class, snap_cuts, tail_start
from suitefit.plan.core import (
    Core,
    Decision,
    Release,
    Send,
    Shutdown,
    Split,
    Wait,
    chunk_cuts,
    even_cuts,
    piece_of,
)

EXIT_WAIT_S = 10.0  # a worker ended early has this long to finish its session's end and exit
LEAVE_WAIT_S = 1.0  # how long a decision waits for an ended worker's process to leave the tree
LEAVE_POLL_S = 0.02  # the sampler streams a sample every 0.1 s
LiveMemory = Callable[[], tuple[float, dict[str, float]]]  # (tree MiB, worker id -> its tree MiB)
DecisionSink = Callable[[str, str, str, str], None]  # kind, worker, unit, reason


class ReleasePoster(Protocol):
    def post(self, worker: str, after_nodeid: str, fixtures: Sequence[str]) -> None: ...


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def same_tests(first: list[str], other: list[str]) -> tuple[list[int], list[int]] | None:
    """If ``other`` holds exactly ``first``'s tests, each once, in another order: where each
    of ``first``'s tests is in ``other``, and the reverse; else None."""
    if len(other) != len(first):
        return None
    at = {nodeid: k for k, nodeid in enumerate(other)}
    if len(at) != len(other):
        return None
    to: list[int] = []
    for nodeid in first:
        k = at.get(nodeid)
        if k is None:
            return None
        to.append(k)
    back = [0] * len(to)
    for i, k in enumerate(to):
        back[k] = i
    return to, back


@dataclass
class _Assigned:
    unit: Unit
    indices: list[int]
    left: set[int] = field(default_factory=set)
    started: bool = False
    set_up: bool = False  # a test of it has ended: its fixtures are up (``Core.set_up``)


class SuitefitScheduling:
    def __init__(self, config: Any, log: Any, plan: Plan, *, numnodes: int, live: LiveMemory,
                 journal: Journal | None = None, on_decision: DecisionSink | None = None,
                 releases: ReleasePoster | None = None, names: Sequence[str] = ()) -> None:
        self.config = config
        self.log = log
        self.plan = plan
        self.live = live
        self._awaited: set[str] = set()  # ended workers a decision has waited for (``_await_leaving``)
        self.journal = journal
        self.on_decision = on_decision or (lambda *a: None)
        self.releases = releases
        self.core = Core(plan.units, plan.fixtures, budget_mb=plan.admit_mb,
                         baseline_mb=plan.baseline_mb, fixed_mb=plan.fixed_mb,
                         releasable=plan.releasable if releases is not None else (),
                         slow=plan.slow, spread_mb=plan.spread_mb, limit_mb=plan.budget.memory_mb)
        # the workers' gateways (``names``, as xdist started them; else ``-n N``'s gw0..gw{N-1}):
        # each is up in the core once it has collected (its first ``want``), its baseline
        # counted from the start
        self.core.expect(names or [f"gw{i}" for i in range(numnodes)])
        self._replacing = 0  # workers died, their replacements not started yet (``node_down``)
        self._t0 = timing.monotonic()
        self.node2collection: dict[Any, list[str]] = {}
        self.node2pending: dict[Any, list[int]] = {}
        self.node2units: dict[Any, deque[_Assigned]] = {}
        self._by_id: dict[str, Any] = {}
        self.collection: list[str] | None = None
        # a worker that collected the run's tests in another order (hash-randomised
        # parametrisation: joblib's suite): its index of each test, and back
        self._order: dict[Any, tuple[list[int], list[int]]] = {}
        self._reordered = False  # once one has: what a dead one held goes back in its order
        self._by_file: dict[str, list[int]] = {}
        self._explicit: dict[str, list[int]] = {}  # units whose tests are given, not by file
        self.placement: dict[str, list[str]] = {}
        self._shutdown: set[Any] = set()
        self._scheduled = False
        self.stopping = False  # a worker died and restarts are off: withdraw queued work
        self._closing: set[str] = set()  # workers xdist is ending on its own (told to the core)
        self._splits: dict[Any, Split] = {}  # node -> the split whose tail was asked of it
        self._cuts: dict[str, list[int]] = {}  # a chunked file -> its chunks' cuts (_file_cuts)

    def _now(self) -> float:
        return timing.monotonic() - self._t0

    # -- the Scheduling protocol ---------------------------------------------------------

    @property
    def nodes(self) -> list[Any]:
        return list(self.node2pending)

    @property
    def collection_is_completed(self) -> bool:
        # The first worker's collection is enough to start: each worker is sent its first
        # unit as soon as it has collected (xdist's own schedulers wait for the last one,
        # and xdist starts its workers one after another). Once true it stays true: nodes
        # leave (finish or die) after collecting.
        return self._scheduled or bool(self.node2collection)

    @property
    def started(self) -> bool:
        """Has a test been sent to any worker?"""
        return bool(self.placement)

    @property
    def tests_finished(self) -> bool:
        # xdist shuts every node down once this is true, which also releases each node's
        # held last test: only once the core has nothing left to place. xdist asks at every
        # turn of its loop (about six times a test): the cheap answer first.
        if self.core.pending or not self.collection_is_completed:
            return False
        return all(not p or (len(p) == 1 and n in self._shutdown) for n, p in self.node2pending.items())

    @property
    def has_pending(self) -> bool:
        # xdist asks once, at the first collection, to end its status line before any test's
        # output: as its own schedulers, nothing is pending before the first ``schedule()``
        if not self._scheduled:
            return False
        return bool(self.core.pending) or any(self.node2pending.values())

    def add_node(self, node: Any) -> None:
        # Not up in the core yet: a worker that has not collected is not free for work (the
        # core would count it as idle, and leave it the long units); it is once it asks.
        assert node not in self.node2pending
        self.node2pending[node] = []
        self.node2units[node] = deque()
        self._by_id[node.gateway.id] = node

    def add_node_collection(self, node: Any, collection: Sequence[str]) -> None:
        ids = list(collection)
        if self.collection is not None and ids != self.collection:
            order = same_tests(self.collection, ids)
            if order is None:
                self._end_other_collection(node, ids)
                return
            # Tests go to a worker as indices into its own collection: the same tests in another
            # order can run there (xdist's schedulers share one index and end the session)
            self._order[node] = order
            self._reordered = True
            self.on_decision("note", node.gateway.id, "-",
                             f"collected the run's {len(ids)} tests in another order than the first worker "
                             "(a parametrisation over a set?): each test is sent as its index there")
        self.node2collection[node] = ids
        if self.collection is None:
            self.collection = ids

    def _end_other_collection(self, node: Any, ids: list[str]) -> None:
        """Report a collection of other tests, as xdist does, and end its worker."""
        from xdist.report import report_collection_diff

        assert self.collection is not None
        msg = report_collection_diff(self.collection, ids, "first worker", node.gateway.id)
        self.log(msg)
        import pytest

        self.config.hook.pytest_collectreport(
            report=pytest.CollectReport(nodeid=node.gateway.id, outcome="failed", longrepr=msg, result=[])
        )
        # it runs nothing: it ends now rather than hold its memory idle until the run's end
        self._shutdown.add(node)
        node.shutdown()

    def schedule(self) -> None:
        """xdist calls this after each worker's collection once ``collection_is_completed``:
        the first call places the plan; a later one starts the worker that has just collected."""
        assert self.collection_is_completed
        if self._scheduled:
            self._ask_all()
            return
        self._scheduled = True
        if self.collection is None:
            return
        for i, nodeid in enumerate(self.collection):
            self._by_file.setdefault(file_of(nodeid), []).append(i)
        for note in self.core.reconcile(list(self._by_file)):
            self.on_decision("note", "-", "-", note)
        self._ask_all()

    def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
        order = self._order.get(node)
        if order is not None:
            item_index = order[1][item_index]
        pending = self.node2pending[node]
        pending.remove(item_index)
        units = self.node2units[node]
        for a in units:
            if item_index in a.left:
                a.left.discard(item_index)
                if not a.left:  # then out of the loop at once: no iterator goes on
                    self._unit_done(node, a, self._now())
                elif not a.set_up:  # its first test is done: what it sets up at its start is up
                    a.set_up = True
                    self.core.set_up(node.gateway.id, a.unit.name)
                break
        self._note_running(node)
        self._ask(node)
        self._ask_waiting()

    def mark_test_pending(self, item: str) -> None:
        assert self.collection is not None
        idx = self.collection.index(item)
        unit = Unit(name=f"rerun:{item}", files=(file_of(item),), wall_s=0.0, peak_mb=0.0,
                    reason="put back by a plugin")
        self._explicit[unit.name] = [idx]
        self.core.requeue(unit)
        self._ask_all()

    def remove_pending_tests_from_node(self, node: Any, indices: Sequence[int]) -> None:
        """The worker gave back tests we asked for: a unit's tail for another worker (a
        ``Split``), or what it queued when the run is being stopped."""
        indices = self._from_node(node, indices)
        pending = self.node2pending.get(node, [])
        for i in indices:
            if i in pending:
                pending.remove(i)
        for a in self.node2units.get(node, ()):
            a.left -= set(indices)
        if node in self._splits:
            self._split_answered(node, list(indices))
            return
        if self.stopping and not indices:
            # The worker had moved on before the steal arrived (it gives back all or
            # nothing): ask again for what is still queued behind its current test.
            self.withdraw(node)

    def withdraw(self, node: Any) -> None:
        """Stop the run: nothing new is placed; take back what ``node`` queued behind its next test."""
        self.stopping = True
        self.core.stop()
        pending = self.node2pending.get(node, [])
        if len(pending) > 2:
            node.send_steal(self._to_node(node, pending[2:]))  # the worker answers with `unscheduled`

    def node_down(self, node: Any, died: bool) -> None:
        """xdist's ``pytest_testnodedown``, before its ``remove_node``. A worker that ``died``
        is replaced (xdist starts another unless its restarts are used up, and then the run
        ends): until the replacement has started (``coming``), nothing is sent, or what fits
        now would not beside it. A worker that ended before it was ready never reaches
        ``remove_node``: the core counted it as coming, and a worker may wait for it to come
        up and make room. Its place is free now."""
        if died:
            self._replacing += 1
        if node in self.node2pending:
            return
        self.core.worker_down(node.gateway.id)
        self._ask_waiting()

    def coming(self, name: str) -> None:
        """xdist started the worker ``name`` after the scheduler was made (one in place of a
        dead one): its baseline counts from now, and what waited for its start is asked."""
        self.core.expect([name])
        self._replacing = max(0, self._replacing - 1)
        self._ask_waiting()

    def remove_node(self, node: Any) -> str | None:
        if node in self._shutdown and self.core.pending:
            self._end_process(node)
        split = self._splits.pop(node, None)
        pending = self.node2pending.pop(node)
        units = self.node2units.pop(node)
        self.node2collection.pop(node, None)
        self._order.pop(node, None)
        self._shutdown.discard(node)
        wid = node.gateway.id
        self._by_id.pop(wid, None)
        again = {u.name for u in self.core.worker_down(wid)}  # none when the run is stopping
        if self.journal is not None:
            self.journal.done(wid)
        if split is not None:  # it died before it answered: its unit goes back whole below
            self._answer_thief(split, self.core.split_done(split, False, self._now()))
        if not pending:
            self._ask_waiting()
            return None
        assert self.collection is not None
        crashitem = self.collection[pending[0]]
        # What it held goes back first, minus the test it died in (xdist reports that one).
        for a in reversed(units):
            rest = [i for i in a.indices if i in a.left and i != pending[0]]
            if rest and a.unit.name in again:
                u = a.unit
                name = f"{u.name}:requeued"
                self._explicit[name] = rest
                self.core.requeue(replace(u, name=name, reason="requeued after its worker died", chunk=None,
                                          kept_mb=0.0, span=None, piece_setup_s=None, tests=0))
        self._ask_waiting()
        return crashitem

    def _end_process(self, node: Any) -> None:
        """End the process of a worker the core shut down while work is left, and wait for it.

        xdist keeps a finished worker's process, and the memory it holds (its baseline:
        the interpreter, the conftest's imports), until the session ends. The core ends a
        worker early to make room for a unit that does not fit beside it: the room must be
        there before that unit starts, so the process goes now (xdist's own teardown of a
        node: it closes its channel and ends its gateway; the group joins it at the end).
        """
        from suitefit.measure.proctree import exited

        pid = None
        with contextlib.suppress(AttributeError, TypeError, ValueError):
            pid = int(node.gateway._io.popen.pid)
        try:
            node.ensure_teardown()
        except (AttributeError, OSError, ValueError):
            return
        deadline = timing.monotonic() + EXIT_WAIT_S
        while pid is not None and not exited(pid) and timing.monotonic() < deadline:
            time.sleep(0.005)

    # -- a worker that collected in another order ---------------------------------------

    def _to_node(self, node: Any, indices: Sequence[int]) -> list[int]:
        order = self._order.get(node)
        return list(indices) if order is None else [order[0][i] for i in indices]

    def _from_node(self, node: Any, indices: Sequence[int]) -> list[int]:
        order = self._order.get(node)
        return list(indices) if order is None else [order[1][i] for i in indices]

    def _in_its_order(self, node: Any, indices: list[int]) -> list[int]:
        """A unit's tests as that worker collected them, file by file in the unit's order: its
        pytest ordered them (by fixture, parametrisation), and they run in the order sent."""
        first = self.collection
        assert first is not None
        order = self._order.get(node)
        at = order[0] if order is not None else range(len(first))
        rank: dict[str, int] = {}
        for i in indices:
            rank.setdefault(file_of(first[i]), len(rank))
        return sorted(indices, key=lambda i: (rank[file_of(first[i])], at[i]))

    # -- asking the core and applying its decisions -------------------------------------

    def _indices(self, unit: Unit) -> list[int]:
        if unit.name in self._explicit:
            return self._explicit.pop(unit.name)
        if unit.chunk is not None:
            k = unit.chunk[0]
            cuts = self._file_cuts(unit)
            return self._by_file.get(unit.files[0], [])[cuts[k - 1]:cuts[k]]
        return [i for f in unit.files for i in self._by_file.get(f, [])]

    def _file_cuts(self, unit: Unit) -> list[int]:
        """Where ``unit``'s file is cut into its chunks: as the plan cut it (each chunk's span,
        read as ``chunk_of`` reads one), each cut then moved off the inside of a test class
        (``class_cuts.snap_cuts``). Once a file: all its chunks read the same cuts."""
        path = unit.files[0]
        got = self._cuts.get(path)
        if got is not None:
            return got
        assert unit.chunk is not None and self.collection is not None
        indices = self._by_file.get(path, [])
        m = unit.chunk[1]
        spans = {u.chunk[0]: u.span for u in self.plan.units
                 if u.chunk is not None and u.chunk[1] == m and u.files[0] == path}
        ends = [spans.get(k) for k in range(1, m + 1)]
        cuts = (chunk_cuts(len(indices), [e[1] for e in ends if e is not None]) if all(ends)
                else even_cuts(len(indices), m))
        got = self._cuts[path] = snap_cuts(cuts, inside_class([self.collection[i] for i in indices]))
        return got

    def _ask_all(self) -> None:
        for node in list(self.node2pending):
            self._ask(node)

    def _ask_waiting(self) -> None:
        if self._replacing:  # a replacement is starting: its baseline is not counted yet
            return
        for wid in self.core.waiting():
            node = self._by_id.get(wid)
            if node is not None:
                self._ask(node)

    def _await_leaving(self) -> None:
        """A worker that has ended is still in the tree until its process exits (xdist hears
        of its end first), and nobody else runs a test: decide once it has left, at most
        ``LEAVE_WAIT_S`` from now. Decided before, its memory counted against what is sent
        (a hog went "over the budget" while the tree stayed 6% under it); nothing else could
        ask the core again, so the wait is here, on the samples the sampler streams."""
        waited = set(self.core.leaving()) - self._awaited
        if not waited:  # once for each ended worker: one whose process stays does not stall every decision
            return
        self._awaited |= waited
        deadline = timing.monotonic() + LEAVE_WAIT_S
        while waited & set(self.core.leaving()) and timing.monotonic() < deadline:
            time.sleep(LEAVE_POLL_S)
            self.core.sample(*self.live())

    def _ask(self, node: Any) -> None:
        """A node with fewer than two pending tests needs its next unit: the core says which.
        Not before it has collected: tests are sent as indices into its collection."""
        if not self._scheduled or node in self._shutdown or node not in self.node2collection:
            return
        self._note_closing()
        while len(self.node2pending[node]) < 2 and node not in self._shutdown:
            if self.core.pending and self.plan.admit_mb:
                self.core.sample(*self.live())
                if self.core.leaving() and not self.core.busy_besides(node.gateway.id):
                    self._await_leaving()
            holding = len(self.node2pending[node]) == 1
            if not self.core.pending:  # the tail: what a split decides on is how far units are
                self._tell_progress()
            sent = self._apply(node, self.core.want(node.gateway.id, self._now(), holding=holding))
            if not sent:
                return

    def _apply(self, node: Any, decisions: list[Decision]) -> bool:
        """Carry out the core's decisions (each names its worker); True if ``node`` got tests."""
        sent = False
        for d in decisions:
            target = self._by_id.get(d.worker)
            if target is None:
                continue
            wid = d.worker
            if isinstance(d, Release):
                self._post_release(target, d)
            elif isinstance(d, Send):
                indices = self._indices(d.unit)
                self.on_decision("over-budget" if d.over_budget else "send", wid, d.unit.name, d.reason)
                if not indices:  # nothing of it was collected: done at once
                    self.core.done(wid, d.unit.name, self._now())
                    sent = sent or target is node
                    continue
                if self._reordered:
                    indices = self._in_its_order(target, indices)
                self.node2units[target].append(_Assigned(d.unit, indices, set(indices)))
                self.node2pending[target].extend(indices)
                self.placement.setdefault(wid, []).append(d.unit.name)
                target.send_runtest_some(self._to_node(target, indices))
                self._note_running(target)
                sent = sent or target is node
            elif isinstance(d, Shutdown):
                self.on_decision("shutdown", wid, "-", d.reason)
                self._shutdown.add(target)
                target.shutdown()
                self._note_running(target)  # its held test now runs
            elif isinstance(d, Wait):
                self.on_decision("wait", wid, d.unit, d.reason)
            elif isinstance(d, Split):
                self._steal_tail(d)
        for d in decisions:
            # another worker given a unit of one test holds it: it needs its next answer too
            other = self._by_id.get(d.worker)
            if isinstance(d, Send) and other is not None and other is not node \
                    and len(self.node2pending.get(other, ())) < 2:
                self._ask(other)
        return sent

    def _tell_progress(self) -> None:
        now = self._now()
        for node, units in self.node2units.items():
            if units and units[-1].started:
                a = units[-1]
                self.core.progress(node.gateway.id, a.unit.name, len(a.indices) - len(a.left), len(a.left), now)

    def _steal_tail(self, d: Split) -> None:
        """Ask ``d.source`` for the last tests of ``d.unit`` that it has not started (xdist's
        steal: the worker gives back all of them or none, and answers ``unscheduled``)."""
        src = self._by_id.get(d.source)
        a = next((a for a in self.node2units.get(src, ()) if a.unit.name == d.unit), None)
        behind = set(self.node2pending.get(src, [])[2:])  # it runs one and holds the next
        tail = [i for i in a.indices if i in a.left and i in behind] if a is not None else []
        take = tail[-d.piece.tests:] if d.piece.tests > 0 else []
        if take and a is not None and self.collection is not None:  # not inside a test class
            offset = a.indices.index(tail[0])
            before = a.indices[offset - 1:offset]  # the test ahead of the tail (runs or is held)
            inside = inside_class([self.collection[i] for i in (*before, *tail)])
            take = tail[tail_start(len(take), len(tail), lambda j: inside(j + len(before))):]
        if src is None or not take or self.stopping:
            self._answer_thief(d, self.core.split_done(d, False, self._now()))
            return
        self._splits[src] = d
        src.send_steal(self._to_node(src, take))

    def _unit_done(self, node: Any, a: _Assigned, now: float) -> None:
        """``a`` has no test left on ``node``: it leaves the node's queue and the core hears it."""
        self.node2units[node].remove(a)
        self.core.done(node.gateway.id, a.unit.name, now)
        self.on_decision("done", node.gateway.id, a.unit.name, "")

    def _split_answered(self, node: Any, given: list[int]) -> None:
        d = self._splits.pop(node)
        now = self._now()
        if given and not self.stopping:
            piece = piece_of(d, len(given))
            self.on_decision("split", d.worker, d.unit, d.reason)  # recorded once it moved
            self._explicit[piece.name] = sorted(given)
            gone = set(given)
            for a in self.node2units.get(node, ()):
                if a.unit.name == d.unit:  # they are the piece's now
                    a.indices = [i for i in a.indices if i not in gone]
            decisions = self.core.split_done(replace(d, piece=piece), True, now)
        else:  # it had started them (or the run is stopping: nothing new runs)
            decisions = self.core.split_done(d, False, now)
        for a in list(self.node2units.get(node, ())):
            if a.unit.name == d.unit and not a.left:  # what it kept is done already
                self._unit_done(node, a, now)
        self._answer_thief(d, decisions)
        self._ask(node)

    def _answer_thief(self, d: Split, decisions: list[Decision]) -> None:
        thief = self._by_id.get(d.worker)
        if thief is not None:
            self._apply(thief, decisions)
            self._ask(thief)
        self._ask_waiting()

    def _note_closing(self) -> None:
        """Tell the core of nodes xdist is shutting down itself (restarts off after a death,
        ``-x``, ``--maxfail``).

        Tests sent to such a node would land behind its shutdown marker, never run, and stay
        pending: xdist then fails ``assert not crashitem`` when the worker finishes. The core
        decides nothing for it any more, and stops the run.
        """
        for n in self.node2pending:
            if getattr(n, "shutting_down", False) and n not in self._shutdown \
                    and n.gateway.id not in self._closing:
                self._closing.add(n.gateway.id)
                self.stopping = True
                self.core.closing(n.gateway.id)

    def _post_release(self, node: Any, d: Release) -> None:
        a = next((a for a in self.node2units[node] if a.unit.name == d.after), None)
        if a is None or self.releases is None or self.collection is None:
            return
        self.on_decision("release", d.worker, d.fixture, d.reason)
        # posted before the next unit is sent: the worker runs the unit's last test (and
        # its teardown, where the release happens) only once it has that next test
        self.releases.post(d.worker, self.collection[a.indices[-1]], [d.fixture])

    def _note_running(self, node: Any) -> None:
        """Tell the core and the journal which test this node runs now."""
        pending = self.node2pending.get(node)
        wid = node.gateway.id
        if not pending:
            if self.journal is not None:
                self.journal.done(wid)
            return
        if len(pending) < 2 and node not in self._shutdown:
            return  # it holds that test: it is not running yet
        head = pending[0]
        a = next((a for a in self.node2units[node] if head in a.left), None)
        if a is not None and not a.started:
            a.started = True
            self.core.started(wid, a.unit.name, self._now())
        if self.journal is not None and self.collection is not None:
            self.journal.start(wid, self.collection[head], timing.wall())
