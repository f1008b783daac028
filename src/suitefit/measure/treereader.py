"""The sampler process's reader of one process tree, read again and again.

Its own module, beside ``proctree`` (whose one-off readers it matches): only the
sampler process uses it, and every process that runs tests imports ``proctree`` (where
PYTHONDONTWRITEBYTECODE is set, pytest compiles what its plugins import on every run).
"""

from __future__ import annotations

import os

from suitefit.measure.proctree import (
    _HAS_CHILDREN_FILE,
    _RDONLY,
    PAGE_MB,
    pread_all,
    read_bytes,
    rss_mb,
    thread_children,
    tree_parents,
)

TYPE_CHECKING = False  # typing's, without importing typing (the sampler process starts lean)
if TYPE_CHECKING:
    from collections.abc import Collection, Iterable


class TreeReader:
    """One process tree read again and again (the sampler process, every interval), cheaply.

    The same answer as ``tree_parents`` and ``rss_mb`` of each process, with a fraction of
    the system calls: each process's ``stat`` (its RSS, the count ``statm`` gives too, and
    its number of threads) and its main thread's ``children`` file stay open between reads
    and are read again with ``pread`` at offset 0, which makes /proc produce them afresh. A
    process that is gone (or whose pid a new process now has) fails to read its ``stat``:
    its files are closed, and opened afresh if the pid is in the tree again.

    A process lists its children per thread, and xdist's processes have two to four (execnet's
    I/O threads): each other thread's ``children`` file stays open too, with its ``comm``
    file, which fails to read once that thread is gone (its ``children`` reads empty then,
    as a live thread's without children does). The threads are listed again when their
    number (``stat``) is not the number kept, or when one of them is gone (a thread that
    ended and another that began between two reads: the same number). Reading them from
    kept files took the tree read of three three-thread processes, every 0.1 s, from ~300 to
    ~175 µs of CPU (~120 µs a sample: 1.2 ms a second of a run).
    """

    MAX_OPEN = 256  # beyond this many open files, read the rest without keeping them

    def __init__(self) -> None:
        self._open: dict[int, tuple[int, int | None]] = {}  # pid -> (stat fd, children fd)
        # pid -> its threads but the main one: (children fd, comm fd) each
        self._threads: dict[int, list[tuple[int, int]]] = {}
        self._fds = 0  # open in all

    def read(self, root: int, skip: Iterable[int] = ()) -> tuple[dict[int, int], dict[int, float]]:
        """``tree_parents(root, skip)``, and each of those processes' RSS in MiB (0: gone)."""
        if not _HAS_CHILDREN_FILE:
            parents = tree_parents(root, skip)
            return parents, {p: rss_mb(p) for p in parents}
        skipped = set(skip)
        parents = {root: 0}
        rss: dict[int, float] = {}
        order = [root]
        i = 0
        while i < len(order):
            pid = order[i]
            i += 1
            threads, pages, kids = self._read(pid)
            rss[pid] = pages * PAGE_MB
            if threads > 1:
                kids = self._all_threads(pid, threads, kids)
            elif pid in self._threads:  # one thread left
                self._drop_threads(pid)
            for c in map(int, kids.split()):
                if c not in parents and c not in skipped:
                    parents[c] = pid
                    order.append(c)
        for pid in [p for p in self._open if p not in parents]:
            self._close(pid)
        for pid in [p for p in self._threads if p not in parents]:
            self._drop_threads(pid)
        return parents, rss

    def _read(self, pid: int) -> tuple[int, int, bytes]:
        """(threads, resident pages, its main thread's children); (0, 0, b"") when it is gone."""
        fds = self._open.get(pid)
        if fds is not None:
            try:
                return self._parse(fds)
            except OSError:  # gone, or a new process with this pid: open afresh
                self._close(pid)
        try:
            stat = os.open(f"/proc/{pid}/stat", _RDONLY)
        except OSError:
            return 0, 0, b""
        try:
            kids: int | None = os.open(f"/proc/{pid}/task/{pid}/children", _RDONLY)
        except OSError:
            kids = None
        fds = (stat, kids)
        try:
            got = self._parse(fds)
        except OSError:
            got = (0, 0, b"")
            _close_fds(fds)
        else:
            if self._fds + 2 <= self.MAX_OPEN:
                self._open[pid] = fds
                self._fds += 2
            else:
                _close_fds(fds)
        return got

    @staticmethod
    def _parse(fds: tuple[int, int | None]) -> tuple[int, int, bytes]:
        fields = os.pread(fds[0], 4096, 0).rsplit(b")", 1)[1].split()
        kids = pread_all(fds[1]) if fds[1] is not None else b""
        return int(fields[17]), int(fields[21]), kids  # num_threads, rss (pages)

    def _all_threads(self, pid: int, threads: int, main: bytes) -> bytes:
        """The children of every thread of ``pid`` (``main``: its main thread's, as just read)."""
        kept = self._threads.get(pid)
        if kept is not None and len(kept) == threads - 1:
            parts = [main]
            try:
                for kids, comm in kept:
                    parts.append(pread_all(kids))
                    os.pread(comm, 64, 0)  # fails once the thread is gone
                return b" ".join(parts)
            except OSError:
                pass
        self._drop_threads(pid)
        if pid not in self._open:  # read without keeping (the process's own files were not kept)
            return b" ".join(thread_children(pid))
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return main
        parts = [main]
        kept = []
        for tid in tids:
            if tid == str(pid):
                continue
            try:
                kids = os.open(f"/proc/{pid}/task/{tid}/children", _RDONLY)
            except OSError:
                continue
            try:
                parts.append(pread_all(kids))
                comm = os.open(f"/proc/{pid}/task/{tid}/comm", _RDONLY)
            except OSError:
                os.close(kids)
                continue
            if self._fds + 2 <= self.MAX_OPEN:
                kept.append((kids, comm))
                self._fds += 2
            else:
                _close_fds((kids, comm))
        if len(kept) == len(tids) - 1:  # all of them kept: read from these next time
            self._threads[pid] = kept
        else:
            self._fds -= 2 * len(kept)
            for fds in kept:
                _close_fds(fds)
        return b" ".join(parts)

    def _drop_threads(self, pid: int) -> None:
        for fds in self._threads.pop(pid, ()):
            _close_fds(fds)
            self._fds -= 2

    def _close(self, pid: int) -> None:
        self._drop_threads(pid)
        fds = self._open.pop(pid, None)
        if fds is not None:
            _close_fds(fds)
            self._fds -= 2

    def close(self) -> None:
        for pid in list(self._open):
            self._close(pid)
        for pid in list(self._threads):
            self._drop_threads(pid)


def _close_fds(fds: tuple[int, int | None]) -> None:
    for fd in fds:
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


class Forks:
    """Which of a worker's descendants are forks of it, and their RSS.

    A fork (``multiprocessing``'s default start on Linux before Python 3.14, a pool of
    ``os.fork`` children) starts with its parent's anonymous pages mapped (its heap: what a
    worker keeps as it runs), and they count in its RSS: what a file that forks adds to the
    tree grows by its number of forks for each MiB its worker has grown (pytest's own
    ``testing/_py/test_local.py``, with a two-process ``Pool``: +182 MiB on a 94 MiB
    process, +271 MiB on a 146 MiB one).

    A fork is a descendant whose command line and memory layout (where its stack and its
    heap start: exec lays them out afresh, at random places where the kernel randomises
    them) are the worker's. The command line alone took pytester's inner xdist workers
    (``python -c "import sys;exec(eval(sys.stdin.readline()))"``, as the worker's own) for
    forks. One judged a fork is read once more, in the next sample, and then kept as judged:
    ``subprocess`` forks and then execs, and a sample in between takes that child for a fork
    once, not for good. Whatever is judged not a fork stays so (one read a process).
    """

    def __init__(self) -> None:
        self._fork: dict[int, bool] = {}  # pid -> a fork of its worker
        self._sure: set[int] = set()  # judged a fork twice
        self._id: dict[int, tuple[bytes, bytes, bytes] | None] = {}  # each worker's identity

    def of(self, worker: int, kids: Iterable[int], rss: dict[int, float]) -> tuple[tuple[int, float], ...]:
        """The ``kids`` (``worker``'s descendants, as just read) that are forks of it, with
        their MiB."""
        out: list[tuple[int, float]] = []
        own: tuple[bytes, bytes, bytes] | int | None = self._id.get(worker, 0)  # 0: not read yet
        for pid in kids:
            fork = self._fork.get(pid)
            if fork is None or (fork and pid not in self._sure):
                if fork:
                    self._sure.add(pid)
                if own == 0:
                    own = self._id[worker] = _identity(worker)
                fork = self._fork[pid] = own is not None and _identity(pid) == own
            if fork and rss.get(pid, 0.0) > 0.0:
                out.append((pid, rss[pid]))
        return tuple(out)

    def keep(self, alive: Collection[int]) -> None:
        """Forget the processes that are gone (their pids may be used again)."""
        for d in (self._fork, self._id):
            for pid in [p for p in d if p not in alive]:
                del d[pid]
        self._sure.intersection_update(alive)


def _identity(pid: int) -> tuple[bytes, bytes, bytes] | None:
    """Its command line, and where its stack and its heap start (``stat``'s startstack and
    start_brk): what a fork shares with its parent until it execs. None where unreadable."""
    try:
        cmd = read_bytes(f"/proc/{pid}/cmdline")
        fields = read_bytes(f"/proc/{pid}/stat").rsplit(b")", 1)[1].split()
        return (cmd, fields[25], fields[44]) if cmd else None  # empty: a zombie, a kernel thread
    except (OSError, IndexError):
        return None
