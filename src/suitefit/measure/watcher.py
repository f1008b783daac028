"""The sampler process: one per measured run, outside every process that runs tests.

Started by the session's first process (``sampler.SamplerProcess``) as
``python -S -c "...watcher import main..." PATH CONFIG`` (``sampler.watcher_argv``; CONFIG
is a ``wire`` record). Every ``interval`` seconds it reads the
run's whole process tree from /proc (summed RSS, PSS when cheap enough, process
count), splits it into each worker's tree, and attributes each worker's samples to
the file that worker runs, which the workers announce on a FIFO (``channel.py``).
It writes the timeline (``samples``), the per-file rows (``files``) and each
worker's baseline and peak into the history in batches, and, for a one-process
``suitefit run``, the in-flight journal and the heartbeat lines in the job log.

It leaves itself out of the tree it measures, ignores Ctrl-C (the run decides when
it ends), and ends on the session's word on its stdin, when its stdin closes or its
parent changes without that word (the session's process died: it then says so in one line,
``Watcher.ended_line``), or on SIGTERM, writing what it holds before it goes. It removes
its FIFO and page when it ends, so that a session killed by a signal leaves nothing behind.
"""

from __future__ import annotations

# _signal: signal's own C module; ``signal`` wraps the same functions in enums (enum's
# import is ~1 ms of the start-up below)
import _signal
import math
import os
import select
import sys

from suitefit import timing
from suitefit.measure import page, proctree, wire
from suitefit.measure.channel import Receiver
from suitefit.measure.pssgate import PssGate
from suitefit.measure.treereader import Forks, TreeReader

# Started for every measured run: what it imports is its start-up cost, CPU time every
# measured run pays. The standard library's light modules and sqlite3; no json, re,
# contextlib, enum, dataclasses, pathlib or typing at run time
# (tests/test_overhead_imports.py keeps it so).
TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from typing import Any

    from suitefit.historydb import HistoryDB
    from suitefit.measure.channel import Message


_NO_FORKS: tuple[tuple[int, float], ...] = ()


class _Seg:
    """The file a worker runs now, as the worker announced it."""

    __slots__ = ("baseline_mb", "beside", "children_mb", "fork_mb", "forks", "path", "peak_mb", "pre", "t0",
                 "wall0")

    def __init__(self, path: str, t0: float, wall0: float, baseline_mb: float, children_mb: float,
                 peak_mb: float, beside: _Beside, pre: frozenset[int] = frozenset()) -> None:
        self.path = path
        self.t0 = t0  # monotonic, from the worker
        self.wall0 = wall0
        self.baseline_mb = baseline_mb
        self.children_mb = children_mb  # the worker's descendants when the file began (a session pool)
        self.peak_mb = peak_mb
        # at the sampled peak: the forks of the worker the file started (MiB, how many); not
        # those already there when it began (``pre``: a session's pool, a leaked one)
        self.fork_mb = 0.0
        self.forks = 0
        self.pre = pre
        self.beside = beside  # what the rest of the tree held around it


# Each sample's tree in parts: each worker's tree MiB, and "" the rest (the controller, what
# is in no worker's tree). One dict a sample, shared by every worker's late samples.
_Parts = dict[str, float]


class _Beside:
    """What the rest of the tree held around one file's run on one worker: of each part (each
    other worker's tree, and the rest) the least at a sample, from the last sample before the
    file began to the first after it ended. Beside the worker's exact peak (VmHWM, read at the
    file's end), a floor of the tree at that instant: a hog shorter than the interval on one
    worker is summed with what the others held all along, never with another worker's spike
    (the least of each part around the file, not the total at one sample)."""

    __slots__ = ("least", "me", "n", "peak_mb")

    def __init__(self, me: str, before: _Parts | None) -> None:
        self.me = me
        self.least: dict[str, float] | None = None
        self.n = 0  # samples seen
        self.peak_mb = -1.0  # the worker's exact peak of the file and its children then, once it ended
        if before is not None:
            self.add(before)

    def add(self, parts: _Parts) -> None:
        least = self.least
        if least is None:
            self.least = {k: v for k, v in parts.items() if k != self.me}
        else:  # a part missing from a sample (a worker not started or gone) held nothing then
            self.least = {k: min(v, parts[k]) for k, v in least.items() if k in parts}
        self.n += 1

    def total(self) -> float | None:
        """The tree's floor at the worker's exact peak; None without two samples around it."""
        if self.peak_mb < 0 or self.n < 2 or self.least is None:
            return None
        return self.peak_mb + sum(self.least.values())


class _FileRow:
    """One ``files`` row in the making (a file run in several stretches stays one row)."""

    __slots__ = ("baseline_mb", "cpu_s", "finished", "fork_mb", "fork_of_mb", "forks", "own_mb", "path", "peak_mb",
                 "started", "sys_s", "tests", "wall_s", "worker")

    def __init__(self, path: str, worker: str, started: float, finished: float, wall_s: float, cpu_s: float,
                 tests: int, baseline_mb: float, peak_mb: float, sys_s: float | None = None,
                 own_mb: float | None = None, fork_mb: float = 0.0, forks: int = 0, fork_of_mb: float = 0.0
                 ) -> None:
        self.path = path
        self.worker = worker
        self.started = started
        self.finished = finished
        self.wall_s = wall_s
        self.cpu_s = cpu_s
        self.sys_s = sys_s
        self.own_mb = own_mb
        self.tests = tests
        self.baseline_mb = baseline_mb
        self.peak_mb = peak_mb  # absolute
        self.fork_mb = fork_mb  # of the peak, the worker's forks' (``Forks``)
        self.forks = forks  # how many: each grows as the worker has grown
        self.fork_of_mb = fork_of_mb  # the worker's own RSS when the file began


class _Worker:
    """A process that runs tests, and what was seen of its tree."""

    __slots__ = ("baseline_mb", "children_mb", "done", "forks", "late", "name", "parts", "peak_mb", "pending",
                 "pid", "seg", "tree_mb")

    def __init__(self, name: str, pid: int) -> None:
        self.name = name
        self.pid = pid
        self.seg: _Seg | None = None
        # samples taken since messages were last read: (t, tree_mb, children_mb, its forks
        # (pid, MiB), the tree in parts); a message written before a sample but read after it
        # decides its file
        self.late: list[tuple[float, float, float, tuple[tuple[int, float], ...], _Parts]] = []
        self.parts: _Parts | None = None  # the tree in parts at the last folded sample
        self.pending: list[_Beside] = []  # files ended since the last folded sample
        self.forks: frozenset[int] = frozenset()  # its forks at the last folded sample
        self.children_mb = 0.0  # at the last folded sample
        self.tree_mb = 0.0  # at the last folded sample
        self.baseline_mb: float | None = None
        self.peak_mb = 0.0
        self.done = False


class Watcher:
    def __init__(self, cfg: dict[str, Any], receiver: Receiver | None) -> None:
        self.root = int(cfg["root"])
        self.parent = int(cfg.get("parent") or self.root)
        self.run_id = int(cfg["run_id"])
        self.interval = float(cfg.get("interval", 0.1))
        # PSS every pss_every samples and at the tree's highs, within pss_budget of the time
        self.pss = PssGate(max(0, int(cfg.get("pss_every", 10))), float(cfg["pss_budget"]), timing.monotonic())
        self.started_wall = float(cfg["started_wall"])
        self.threshold_mb = cfg.get("threshold_mb")
        self.stream = bool(cfg.get("stream"))
        self.flush_interval = float(cfg.get("flush_interval", 2.0))
        self.history_path = str(cfg["history"])
        self.receiver = receiver
        self.me = os.getpid()
        self.proc = bool(cfg.get("proc", True)) and proctree.proc_readable()
        self.tree = TreeReader()  # keeps the tree's /proc files open between samples
        self.forks = Forks()
        self.workers: dict[str, _Worker] = {}
        self.files: dict[tuple[str, str], _FileRow] = {}
        self.dirty: set[tuple[str, str]] = set()
        self.samples: list[tuple[int, float, float, float | None, int]] = []  # SAMPLE_COLUMNS
        self.count = 0
        self.peak_rss = 0.0
        # a worker's exact peak (VmHWM) beside the least each other part of the tree held around
        # that file (``_Beside``): a spike shorter than the interval, missed by the sampled totals
        self.peak_exact = 0.0
        self.peak_pss: float | None = None
        self.peak_procs = 0
        self.secs_above = 0.0
        self.last_total: float | None = None
        # the session's word to end (a byte on stdin before its EOF): an EOF without it, or
        # this process orphaned, says the session's process died (``ended_line``)
        self.told_to_end = False
        self.said_ended = False  # its one line on the session's death is out (``ended_line``)
        self._finished = False
        self._prev_t: float | None = None
        self._last_flush = timing.monotonic()
        self._history: HistoryDB | None = None
        self._opened = False  # the history opened ahead of the first flush (run)
        self.page = self._open_page(cfg.get("page"))
        self.journal: Any = None
        self.heartbeat: Any = None
        if cfg.get("journal"):
            self._start_journal(str(cfg["journal"]), cfg.get("budget_mb"))

    # -- outputs ---------------------------------------------------------------------------

    def _open_page(self, path: str | None) -> Any:
        if not path:
            return None
        import mmap

        fd = os.open(path, os.O_RDWR)
        try:
            return mmap.mmap(fd, page.PAGE.size)
        finally:
            os.close(fd)

    def _start_journal(self, path: str, budget_mb: float | None) -> None:
        """One process runs the tests under ``suitefit run``: the journal and heartbeat are ours."""
        from suitefit.measure.journal import Heartbeat, Journal

        self.journal = Journal(path, self.run_id)
        if budget_mb:
            self.heartbeat = Heartbeat(float(budget_mb), self.journal, self._heartbeat_line)
            self.budget_mb = float(budget_mb)

    def _heartbeat_line(self, line: str, level: float, tree_mb: float) -> None:
        try:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        self.db().add_event(self.run_id, timing.wall(), "heartbeat", level=level, tree_mb=tree_mb,
                            budget_mb=self.budget_mb,
                            inflight=[x.as_dict() for x in self.journal.snapshot()])

    def db(self) -> HistoryDB:
        if self._history is None:
            from suitefit.historydb import HistoryDB

            self._history = HistoryDB(self.history_path)
            self._history.defer_refused_writes(f"run {self.run_id}'s sampler process")
        return self._history

    # -- the loop --------------------------------------------------------------------------

    def read_messages(self) -> None:
        if self.receiver is None:
            return
        for m in self.receiver.read():
            try:
                self.handle(m)
            except (ValueError, IndexError):
                continue  # a malformed line is dropped, never fatal
        for w in self.workers.values():
            self._fold_late(w)

    def handle(self, m: Message) -> None:
        w = self.workers.get(m.worker)
        if m.kind == "H":
            self.workers[m.worker] = _Worker(m.worker, int(m.fields[0]))
            return
        if w is None:
            return
        if m.kind == "B":
            t0, wall0, self_mb = float(m.fields[0]), float(m.fields[1]), float(m.fields[2])
            children, path = float(m.fields[3]), m.fields[4]
            self._fold_late(w, until=t0)
            if self_mb < 0:  # the worker could not read itself: the last sample of it will do
                self_mb = max(0.0, self._last_tree(w) - children)
            base = self_mb + children
            w.seg = _Seg(path, t0, wall0, base, children, base, _Beside(w.name, w.parts), w.forks)
            if w.baseline_mb is None:
                w.baseline_mb = base
            w.peak_mb = max(w.peak_mb, base)
        elif m.kind == "E" and w.seg is not None:
            t1, wall1, hwm = float(m.fields[0]), float(m.fields[1]), float(m.fields[2])
            cpu, tests = float(m.fields[3]), int(m.fields[4])
            sys_s = float(m.fields[5]) if len(m.fields) > 5 else None
            self._fold_late(w, until=t1)
            seg, w.seg = w.seg, None
            peak = seg.peak_mb
            forks = (seg.fork_mb, seg.forks, seg.baseline_mb - seg.children_mb)
            if hwm >= 0 and hwm + seg.children_mb > peak:
                # The worker's own exact peak plus the children there when the file began (a
                # session pool); children the file started itself are in the samples. Not the
                # children at the end: the last file's teardown may have stopped them.
                peak, forks = hwm + seg.children_mb, (0.0, 0, 0.0)
            w.peak_mb = max(w.peak_mb, peak)
            if hwm >= 0:  # summed with the rest at the next sample
                seg.beside.peak_mb = hwm + seg.children_mb
                w.pending.append(seg.beside)
            # the worker's own growth: its exact peak over its own RSS when the file began
            own = max(0.0, hwm - (seg.baseline_mb - seg.children_mb)) if hwm >= 0 else None
            self._add_file(_FileRow(seg.path, w.name, seg.wall0, wall1, max(0.0, t1 - seg.t0), cpu, tests,
                                    seg.baseline_mb, peak, sys_s, own, *forks))
        elif m.kind == "T" and self.journal is not None:
            self.journal.start(w.name, m.fields[1], float(m.fields[0]), self._last_tree(w) or None)
        elif m.kind == "D":
            w.done = True
            if self.journal is not None:
                self.journal.done(w.name)

    def _last_tree(self, w: _Worker) -> float:
        return w.late[-1][1] if w.late else w.tree_mb

    def _fold_late(self, w: _Worker, until: float = math.inf) -> None:
        """Give the samples taken up to ``until`` to the file in flight then."""
        keep = []
        for sample in w.late:
            t, tree_mb, children_mb, forks, parts = sample
            if t > until:
                keep.append(sample)
                continue
            w.children_mb = children_mb
            w.tree_mb = tree_mb
            w.peak_mb = max(w.peak_mb, tree_mb)
            w.forks = frozenset(pid for pid, _ in forks) if forks else frozenset()
            w.parts = parts
            self._settle(w, parts)  # the first sample after those files ended
            seg = w.seg
            if seg is not None:
                seg.beside.add(parts)
            if seg is not None and tree_mb > seg.peak_mb:
                seg.peak_mb = tree_mb
                new = [mb for pid, mb in forks if pid not in seg.pre]
                seg.fork_mb, seg.forks = sum(new), len(new)
        w.late = keep

    def _settle(self, w: _Worker, after: _Parts | None) -> None:
        """Count the files ``w`` ended since its last sample into the run's peak, with the
        sample ``after`` them (None: there is none, the run ends)."""
        for b in w.pending:
            if after is not None:
                b.add(after)
            got = b.total()
            if got is not None and got > self.peak_exact:
                self.peak_exact = got
        w.pending.clear()

    def _add_file(self, r: _FileRow) -> None:
        """A file run in several stretches on one worker stays one row (summed time, max peak)."""
        key = (r.path, r.worker)
        m = self.files.get(key)
        if m is None:
            self.files[key] = r
        else:
            m.started = min(m.started, r.started)
            m.finished = max(m.finished, r.finished)
            m.wall_s += r.wall_s
            m.cpu_s += r.cpu_s
            m.sys_s = None if m.sys_s is None or r.sys_s is None else m.sys_s + r.sys_s
            m.own_mb = None if m.own_mb is None or r.own_mb is None else max(m.own_mb, r.own_mb)
            m.tests += r.tests
            if r.peak_mb - r.baseline_mb > m.peak_mb - m.baseline_mb:
                m.peak_mb, m.baseline_mb = r.peak_mb, r.baseline_mb
                m.fork_mb, m.forks, m.fork_of_mb = r.fork_mb, r.forks, r.fork_of_mb
        self.dirty.add(key)

    def sample(self) -> None:
        if not self.proc:
            return
        t0 = timing.monotonic()
        wall = timing.wall()
        parents, rss = self.tree.read(self.root, skip=(self.me,))
        total = sum(rss.values())
        pss: float | None = None
        if self.pss.due(t0, total):
            t1 = timing.monotonic()
            vals = [v for v in (proctree.pss_mb(p) for p in parents) if v is not None]
            pss = sum(vals) if vals else None
            self.pss.read(timing.monotonic() - t1, total, pss)
        procs = sum(1 for v in rss.values() if v > 0)
        per_worker, below = self._per_worker(t0, parents, rss, total)
        self._record(t0, wall, total, rss.get(self.root, 0.0), pss, procs, per_worker, below)

    def _per_worker(self, t: float, parents: dict[int, int], rss: dict[int, float],
                    total: float) -> tuple[dict[str, float], dict[str, list[int]]]:
        """Each worker's tree MiB, and its descendants (the controller reaps a dead worker's)."""
        out: dict[str, float] = {}
        below: dict[str, list[int]] = {}
        if not self.workers:
            return out, below
        trees = proctree.worker_trees(parents, rss, [(w.name, w.pid) for w in self.workers.values()])
        parts: _Parts = {name: tree[0] for name, tree in trees.items()}
        parts[""] = max(0.0, total - sum(parts.values()))
        for name, (tree_mb, self_mb, kids) in trees.items():
            w = self.workers[name]
            w.late.append((t, tree_mb, tree_mb - self_mb, self.forks.of(w.pid, kids, rss) if kids else _NO_FORKS,
                           parts))
            out[name] = tree_mb
            below[name] = kids
        self.forks.keep(parents)
        return out, below

    def _record(self, t: float, wall: float, total: float, root_mb: float, pss: float | None, procs: int,
                per_worker: dict[str, float], below: dict[str, list[int]]) -> None:
        self.count += 1
        self.samples.append((self.run_id, round(wall - self.started_wall, 4), total, pss, procs))
        self.peak_rss = max(self.peak_rss, total)
        if root_mb > 0:  # a dead session's process reads as nothing: not the tree's last memory
            self.last_total = total
        self.peak_procs = max(self.peak_procs, procs)
        if pss is not None:
            self.peak_pss = max(self.peak_pss or 0.0, pss)
        if self._prev_t is not None and self.threshold_mb and total > float(self.threshold_mb):
            self.secs_above += t - self._prev_t
        self._prev_t = t
        if self.page is not None:
            page.write(self.page, t, wall, total, root_mb, pss, procs)
        if self.stream:
            line = wire.encode({"t": t, "wall": wall, "rss": total, "root": root_mb, "pss": pss,
                                "procs": procs, "workers": per_worker, "kids": below})
            try:
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
            except (OSError, ValueError):
                self.stream = False  # the controller stopped reading; keep measuring
        if self.journal is not None:
            self.journal.update_memory(per_worker, total)
        if self.heartbeat is not None:
            self.heartbeat.observe(total)

    def flush(self, *, final: bool = False) -> None:
        rows = [self.files[k] for k in sorted(self.dirty)]
        samples, self.samples = self.samples, []
        self.dirty.clear()
        self._last_flush = timing.monotonic()
        if not rows and not samples and not final:
            return
        h = self.db()
        if samples:
            h.add_sample_rows(samples)
        if rows:  # FILE_COLUMNS
            h.add_file_rows([(self.run_id, r.path, r.worker, r.started, r.finished, r.wall_s, r.cpu_s, r.tests,
                              r.baseline_mb, max(0.0, r.peak_mb - r.baseline_mb), r.peak_mb, r.sys_s,
                              r.own_mb, round(r.fork_mb, 3), r.forks, round(r.fork_of_mb, 3)) for r in rows])
        if final:
            for w in self.workers.values():
                if w.baseline_mb is not None or w.peak_mb:
                    h.set_worker_memory(self.run_id, w.name, w.baseline_mb, w.peak_mb or None)

    def summary(self) -> dict[str, Any]:
        import resource

        ru = resource.getrusage(resource.RUSAGE_SELF)  # what measuring cost, outside the tests
        # the run's peak: the highest sampled total, or a worker's exact peak beside the least
        # each other part held around its file (two workers' spikes are not summed)
        return {"summary": True, "peak_rss": max(self.peak_rss, self.peak_exact), "peak_pss": self.peak_pss,
                "pss_reads": self.pss.reads, "pss_at_peak": self.pss.pss_at_peak(self.peak_rss),  # (RSS, PSS)
                "peak_procs": self.peak_procs, "secs_above": self.secs_above, "samples": self.count,
                "proc": self.proc, "cpu_s": round(ru.ru_utime + ru.ru_stime, 3),
                # its own peak (a runner's limit counts it): VmHWM, per address space, not
                # ru_maxrss, which Linux carries over exec from the process it was forked from
                "rss_mb": round(proctree.hwm_mb() or 0.0, 1)}

    def run(self, stdin_fd: int) -> None:
        next_t = timing.monotonic()
        while True:
            self.read_messages()
            try:
                self.sample()
            except Exception:  # a vanished process mid-read must not end sampling
                pass
            if timing.monotonic() - self._last_flush >= self.flush_interval:
                self.flush()
            elif not self._opened:
                # Opened now, after the first sample, while the session still starts up: at
                # the session's end (which waits for this process) only the writes are left.
                # A short run's end otherwise also paid sqlite3's import and the open.
                self._opened = True  # tried once: a broken history is the flushes' to report
                try:
                    self.db()
                except Exception:
                    pass
            if os.getppid() != self.parent:  # the session's process is gone (killed): end with it
                break
            next_t += self.interval
            delay = next_t - timing.monotonic()
            if delay < 0:  # fell behind (a slow PSS read): skip, don't burst
                next_t = timing.monotonic()
                delay = 0
            r, _, _ = select.select([stdin_fd], [], [], delay)
            if r:  # the session's word to end, or an EOF without it
                self.told_to_end = bool(os.read(stdin_fd, 4096))
                break
        try:
            self.say_ended()  # first: the job's log may be all that survives
        finally:
            self.finish()

    def say_ended(self, *, terminated: bool = False, wait_s: float = 1.0) -> None:
        """The one line (``ended_line``) if the session's process died without telling this
        one to end (it is orphaned within ``wait_s``), and it was not said yet."""
        try:
            if not (self.told_to_end or self.said_ended) and self._orphaned(wait_s):
                self.read_messages()  # what it last said it runs
                self.said_ended = True
                sys.stderr.write("\n" + self.ended_line(terminated) + "\n")
                sys.stderr.flush()
        except Exception:  # saying so must not cost what is left to write
            pass

    def _orphaned(self, wait_s: float = 1.0) -> bool:
        """Whether the session's process died: this process was handed to another parent.
        The kernel closes a dying process's descriptors (our stdin's EOF) before it hands its
        children on, so that can lag the EOF a little; an EOF with the parent still there a
        moment later is its stdin closed by something else (a test closing inherited
        descriptors), not its death."""
        until = timing.monotonic() + wait_s
        while os.getppid() == self.parent:
            if timing.monotonic() >= until:
                return False
            select.select([], [], [], 0.01)
        return True

    def finish(self) -> None:
        if self._finished:  # (a SIGTERM during the end of ``run``: ``main`` asks again)
            return
        self._finished = True
        self.read_messages()
        for w in self.workers.values():
            self._fold_late(w)
            self._settle(w, None)  # the last files: no sample after them, what was around them before
        self.flush(final=True)
        if self.journal is not None:
            self.journal.maybe_write(force=True)
        if self.page is not None:
            self.page.close()
        self.tree.close()
        if self._history is not None:
            self._history.write_waiting()
            self._history.close()
            self._history = None

    def ended_line(self, terminated: bool = False) -> str:
        """One line for the job's log when the session's process died before its end (killed
        by a signal, by a runner's memory limit): it cannot say so itself, and the next
        command's word (``History.settle_abandoned``) comes only if there is a next command on
        that machine. What was in flight: the journal's tests (a planned run), else each
        worker's file."""
        from suitefit.units import fmt_mb

        inflight = [(x.worker, x.nodeid) for x in self.journal.snapshot()] if self.journal is not None else []
        running = inflight or [(w.name, w.seg.path) for w in self.workers.values() if w.seg is not None]
        what = ", ".join(name if worker == "main" else f"{name} ({worker})" for worker, name in running)
        held = [f"{fmt_mb(self.last_total)} at the last reading"] if self.last_total else []
        if self.peak_rss:
            held.append(f"{fmt_mb(self.peak_rss)} at its highest")
        how = ("terminated with this sampler process: a SIGTERM to the whole job, such as a runner's cancel "
               "or timeout" if terminated else
               "killed: a signal, a runner's memory limit; or an exit that skipped it")
        return (f"suitefit: run {self.run_id}: pytest's process (pid {self.parent}) ended before its session "
                f"did ({how})"
                + (f" while running {what}" if what else "")
                + (f"; the tree held {', '.join(held)}" if held else "")
                + f"; the sampler process writes what it measured to {self.history_path}")


def main(argv: list[str]) -> int:
    cfg = wire.decode(argv[0])
    _signal.signal(_signal.SIGINT, _signal.SIG_IGN)  # Ctrl-C ends the run, and the run ends us

    stop = {"now": False}

    def _term(signum: int, frame: Any) -> None:
        if stop["now"]:  # once: a second SIGTERM (a supervisor's, passed on) must not cut the last writes
            return
        stop["now"] = True
        raise SystemExit(0)

    _signal.signal(_signal.SIGTERM, _term)
    receiver = None
    if cfg.get("fifo"):
        receiver = Receiver(int(cfg["fifo_fd"]), cfg["fifo"])
    w = Watcher(cfg, receiver)
    try:
        w.run(sys.stdin.fileno())
    except SystemExit:  # SIGTERM: ended on purpose, or with the whole job (a runner's cancel, `timeout`)
        # SIGTERM to the job's process group ends pytest's process (it has no handler) and
        # this one together: then nobody else says that the run stopped, or in what (the
        # parent may take a moment to die and be reaped on a loaded machine: up to 3 s, a
        # wait only a stopped job pays)
        w.say_ended(terminated=True, wait_s=3.0)
        w.finish()
    finally:
        try:
            sys.stdout.write(wire.encode(w.summary()) + "\n")
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
        _remove_channel(cfg)
    return 0


def _remove_channel(cfg: dict[str, Any]) -> None:
    """Remove the FIFO, the page and their directory: the last user of them is this process.
    The session removes them at its end too, but a session killed by a signal (a runner's
    memory limit) never gets there, and each such run left a directory in the temp dir.
    (Open descriptors and the session's mapping of the page outlive the names.)"""
    paths = [p for p in (cfg.get("fifo"), cfg.get("page")) if p]
    for p in paths:
        try:
            os.unlink(p)
        except OSError:
            pass
    if paths:
        try:  # only if empty: never anything it did not make
            os.rmdir(os.path.dirname(paths[0]))
        except OSError:
            pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
