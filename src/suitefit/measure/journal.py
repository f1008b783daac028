"""What is in flight, kept where it survives: a file on disk and lines in the log.

When a CI runner is killed for memory its disk goes with it; only what already
reached the job log survives. So the journal is a small JSON file rewritten in
place at each test's start (for `suitefit history`/`report`/`bisect` after a crash
the job survived), and
the heartbeat prints a line naming the tests in flight each time the tree's
memory crosses 70%, 85% and 95% of the budget.
"""

from __future__ import annotations

import json
import os
import threading

from suitefit import timing
from suitefit.units import fmt_mb

# The sampler process keeps the journal of a one-process `suitefit run` (``watcher.py``), and
# what this module imports is CPU every such run pays there: no dataclasses (which imports
# inspect), pathlib or the session's sampler module (its CPU on a 1-test run went 77-100 ms
# -> 43-64 ms on the 2-CPU machine; tests/test_overhead_imports.py keeps it so).
TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable

    from suitefit.measure.sampler import Sample

LEVELS = (0.70, 0.85, 0.95)
REARM = 0.05  # a level fires again only after memory fell this far below it


class InFlight:
    """A test a worker runs now, since when, and its worker's tree memory when last seen."""

    __slots__ = ("mb", "nodeid", "since", "worker")

    def __init__(self, worker: str, nodeid: str, since: float, mb: float | None) -> None:
        self.worker = worker
        self.nodeid = nodeid
        self.since = since  # epoch
        self.mb = mb  # the worker's tree RSS when last seen

    def as_dict(self) -> dict[str, object]:
        return {"worker": self.worker, "nodeid": self.nodeid, "since": self.since, "mb": self.mb}

    def __repr__(self) -> str:
        return f"InFlight({self.worker!r}, {self.nodeid!r}, {self.since!r}, {self.mb!r})"


class Journal:
    """Each worker's current test; written to ``path`` at most every ``min_interval`` s."""

    def __init__(self, path: str | os.PathLike[str], run_id: int, min_interval: float = 0.25,
                 at_once_from_mb: float = 0.0) -> None:
        self.path = os.fspath(path)
        self.run_id = run_id
        self.min_interval = min_interval
        # a test's start is written at once while the tree holds at least this much (0:
        # always), else with the next throttled write: see ``start``
        self.at_once_from_mb = at_once_from_mb
        self._lock = threading.Lock()
        self._inflight: dict[str, InFlight] = {}
        self._last_write = 0.0
        self._dirty = False
        self._fd: int | None = None
        self._size = 0  # the longest text written: shorter ones are padded to it
        self.tree_mb: float | None = None

    def start(self, worker: str, nodeid: str, since: float | None = None, mb: float | None = None) -> None:
        with self._lock:
            self._inflight[worker] = InFlight(worker, nodeid, since or timing.wall(), mb)
            self._dirty = True
        # At once, not throttled: a test killed within the interval would be blamed on the one
        # before. Under xdist (``at_once_from_mb`` > 0) only near the budget, where a kill is
        # likely: its controller names a crashed test itself, and one write per test is ~40 µs
        # of the controller's CPU, which on 2 CPUs is the workers' too.
        self.maybe_write(force=(self.tree_mb or 0.0) >= self.at_once_from_mb)

    def done(self, worker: str) -> None:
        with self._lock:
            if self._inflight.pop(worker, None) is None:
                return
            self._dirty = True
        self.maybe_write(force=True)

    def update_memory(self, worker_mb: dict[str, float], tree_mb: float) -> None:
        with self._lock:
            self.tree_mb = tree_mb
            for w, mb in worker_mb.items():
                if w in self._inflight:
                    self._inflight[w].mb = mb
            self._dirty = True
        self.maybe_write()

    def snapshot(self) -> list[InFlight]:
        with self._lock:
            return sorted((InFlight(x.worker, x.nodeid, x.since, x.mb) for x in self._inflight.values()),
                          key=lambda x: x.worker)

    def maybe_write(self, force: bool = False) -> None:
        now = timing.monotonic()
        if not force and (not self._dirty or now - self._last_write < self.min_interval):
            return
        with self._lock:  # one writer at a time: the sampler thread writes too
            data = {"run_id": self.run_id, "written": timing.wall(), "tree_mb": self.tree_mb,
                    "inflight": [x.as_dict() for x in self._inflight.values()]}
            self._dirty = False
            self._last_write = now
            # One pwrite into the open file, not a temp file renamed over it: the rename cost
            # ~4 ms on ext4 (it flushes the data first), too much once per test. A process killed
            # mid-write still leaves a whole text: the kernel finishes a write() the process began.
            # Padding with spaces (valid after JSON) replaces a longer text without a truncate
            # that a kill between two calls could leave half done.
            text = json.dumps(data).encode()
            try:
                if self._fd is None:
                    os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
                    self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.pwrite(self._fd, text.ljust(self._size), 0)
                self._size = max(self._size, len(text))
            except OSError:
                pass  # the log line is the record that matters; never fail the run for this

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


class JournalFile:
    """What a journal file held when its run ended: the record a killed run leaves."""

    __slots__ = ("inflight", "tree_mb", "written")

    def __init__(self, written: float | None, tree_mb: float | None, inflight: list[InFlight]) -> None:
        self.written = written  # epoch
        self.tree_mb = tree_mb
        self.inflight = inflight


def read_journal(path: str | os.PathLike[str]) -> JournalFile | None:
    """The journal at ``path``; None when it is missing or not a journal (nothing to name)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.loads(f.read())
        items = [InFlight(str(x["worker"]), str(x["nodeid"]), float(x["since"]),
                          None if x.get("mb") is None else float(x["mb"])) for x in data["inflight"]]
        written = data.get("written")
        tree = data.get("tree_mb")
        return JournalFile(float(written) if written is not None else None,
                           float(tree) if tree is not None else None, items)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def describe_inflight(items: list[InFlight], now: float | None = None) -> str:
    now = now or timing.wall()
    if not items:
        return "no test in flight"
    return "; ".join(
        f"{x.worker}: {x.nodeid} ({now - x.since:.1f} s, {fmt_mb(x.mb)})" for x in items
    )


class Heartbeat:
    """Fires ``emit(line)`` when the tree's memory crosses a level of the budget, upward."""

    def __init__(self, budget_mb: float, journal: Journal, emit: Callable[[str, float, float], None],
                 levels: tuple[float, ...] = LEVELS) -> None:
        self.budget_mb = budget_mb
        self.journal = journal
        self.emit = emit
        self.levels = levels
        self._armed = {lv: True for lv in levels}

    def __call__(self, s: Sample) -> None:
        self.observe(s.rss_mb)

    def observe(self, rss_mb: float) -> None:
        """The tree's summed RSS now (the sampler process calls this without a ``Sample``)."""
        frac = rss_mb / self.budget_mb
        for lv in self.levels:
            if self._armed[lv] and frac >= lv:
                self._armed[lv] = False
                line = (f"suitefit: heartbeat: tree memory {fmt_mb(rss_mb)} crossed {lv:.0%} of the "
                        f"{fmt_mb(self.budget_mb)} budget; in flight: {describe_inflight(self.journal.snapshot())}")
                self.journal.maybe_write(force=True)
                self.emit(line, lv, rss_mb)
            elif not self._armed[lv] and frac < lv - REARM:
                self._armed[lv] = True
