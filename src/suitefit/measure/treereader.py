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
    rss_mb,
    thread_children,
    tree_parents,
)

TYPE_CHECKING = False  # typing's, without importing typing (the sampler process starts lean)
if TYPE_CHECKING:
    from collections.abc import Iterable


class TreeReader:
    """One process tree read again and again (the sampler process, every interval), cheaply.

    The same answer as ``tree_parents`` and ``rss_mb`` of each process, with a fraction of
    the system calls: each process's ``stat`` (its RSS, the count ``statm`` gives too, and
    its number of threads) and its main thread's ``children`` file stay open between reads
    and are read again with ``pread`` at offset 0, which makes /proc produce them afresh;
    a process with one thread needs no listing of its threads. A process that is gone (or
    whose pid a new process now has) fails to read its ``stat``: both its files are closed,
    and opened afresh if the pid is in the tree again. Other threads' ``children`` files
    are opened for each read, as ``children`` does (a thread's id can be used again).
    """

    MAX_OPEN = 256  # beyond this many open files, read the rest without keeping them

    def __init__(self) -> None:
        self._open: dict[int, tuple[int, int | None]] = {}  # pid -> (stat fd, children fd)

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
                kids = b" ".join(thread_children(pid))
            for c in map(int, kids.split()):
                if c not in parents and c not in skipped:
                    parents[c] = pid
                    order.append(c)
        for pid in [p for p in self._open if p not in parents]:
            self._close(pid)
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
            if 2 * len(self._open) < self.MAX_OPEN:
                self._open[pid] = fds
            else:
                _close_fds(fds)
        return got

    @staticmethod
    def _parse(fds: tuple[int, int | None]) -> tuple[int, int, bytes]:
        fields = os.pread(fds[0], 4096, 0).rsplit(b")", 1)[1].split()
        kids = b""
        if fds[1] is not None:
            kids = os.pread(fds[1], 4096, 0)
            if len(kids) >= 2048:  # /proc hands out about a page at a time: read on to the end
                parts = [kids]
                while part := os.pread(fds[1], 4096, sum(map(len, parts))):
                    parts.append(part)
                kids = b"".join(parts)
        return int(fields[17]), int(fields[21]), kids  # num_threads, rss (pages)

    def _close(self, pid: int) -> None:
        fds = self._open.pop(pid, None)
        if fds is not None:
            _close_fds(fds)

    def close(self) -> None:
        for pid in list(self._open):
            self._close(pid)


def _close_fds(fds: tuple[int, int | None]) -> None:
    for fd in fds:
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
