"""Leftover processes: find what tests and fixtures started and left running, name it, end it.

An orphaned helper (a distributed rank, a server a fixture forgot) can keep a CI
job from exiting for minutes. The session's first process becomes a child
subreaper, so orphans re-parent to it instead of to init and stay findable.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from collections.abc import Iterable
from dataclasses import dataclass

import psutil

from suitefit.measure import proctree

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


@dataclass(frozen=True)
class Leftover:
    pid: int
    cmdline: str
    created: float  # epoch
    started_by: str  # a test id, "fixture NAME", or "unknown"


def describe(pids: Iterable[int], started_by: dict[int, str] | None = None) -> list[Leftover]:
    out = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            out.append(Leftover(pid, proctree.cmdline(pid), p.create_time(),
                                (started_by or {}).get(pid, "unknown")))
        except psutil.Error:
            continue
    return out


def leftovers_under(root: int, exclude: Iterable[int] = ()) -> list[int]:
    skip = {root, *exclude}
    return [p for p in proctree.tree(root) if p not in skip]


def reap(pids: list[int], grace_s: float, term_wait_s: float = 2.0) -> dict[int, str]:
    """Wait up to ``grace_s`` for ``pids`` to exit, then SIGTERM, then SIGKILL. Returns pid -> fate."""
    fate: dict[int, str] = {}
    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.Error:
            fate[pid] = "exited"
    gone, alive = psutil.wait_procs(procs, timeout=max(0.0, grace_s))
    for p in gone:
        fate[p.pid] = "exited by itself"
    for p in alive:
        _signal_group_or_proc(p, signal.SIGTERM)
    gone, alive = psutil.wait_procs(alive, timeout=term_wait_s)
    for p in gone:
        fate[p.pid] = f"terminated after the {grace_s:g} s grace period"
    for p in alive:
        _signal_group_or_proc(p, signal.SIGKILL)
        fate[p.pid] = f"killed after the {grace_s:g} s grace period (ignored SIGTERM)"
    psutil.wait_procs(alive, timeout=2)
    return fate


def _signal_group_or_proc(p: psutil.Process, sig: int) -> None:
    with contextlib.suppress(psutil.Error):
        p.send_signal(sig)


def attribute_by_time(created: float, windows: Iterable[tuple[str, float, float]]) -> str:
    """The test whose run window [start, end] holds ``created`` (latest start wins)."""
    best = ("unknown", -1.0)
    for nodeid, start, end in windows:
        if start - 0.05 <= created <= end + 0.05 and start > best[1]:
            best = (nodeid, start)
    return best[0]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False
