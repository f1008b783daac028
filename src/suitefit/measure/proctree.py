"""Facts about a process tree, read straight from /proc (psutil where /proc lacks it).

RSS comes from ``/proc/PID/statm`` (cheap: sample it often); PSS from
``/proc/PID/smaps_rollup`` (walks page tables: sample it rarely). Children are
found through ``/proc/PID/task/TID/children``, which avoids scanning every
process on the machine the way a ppid map does.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

PAGE_MB = os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)
_HAS_CHILDREN_FILE = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (all its threads'), [] if it is gone."""
    if not _HAS_CHILDREN_FILE:
        import psutil  # here, not at the top: the sampler process starts faster without it

        try:
            return [p.pid for p in psutil.Process(pid).children()]
        except psutil.Error:
            return []
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                data = f.read()
        except OSError:
            continue
        out.extend(int(x) for x in data.split())
    return out


def tree(root: int) -> list[int]:
    """``root`` and all its descendants, root first."""
    seen = [root]
    i = 0
    while i < len(seen):
        for c in children(seen[i]):
            if c not in seen:
                seen.append(c)
        i += 1
    return seen


def tree_parents(root: int, skip: Iterable[int] = ()) -> dict[int, int]:
    """``root`` and its descendants mapped to their parent (root maps to 0), root first.

    ``skip`` prunes a process and everything under it (the sampler process leaves itself out).
    """
    skipped = set(skip)
    out = {root: 0}
    order = [root]
    i = 0
    while i < len(order):
        parent = order[i]
        for c in children(parent):
            if c not in out and c not in skipped:
                out[c] = parent
                order.append(c)
        i += 1
    return out


def proc_readable() -> bool:
    """Whether this system has a Linux-style /proc to read process memory from."""
    return os.path.exists(f"/proc/{os.getpid()}/statm")


def rss_mb(pid: int) -> float:
    """Resident set size of one process in MiB; 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * PAGE_MB
    except (OSError, IndexError, ValueError):
        return 0.0


def pss_mb(pid: int) -> float | None:
    """Proportional set size in MiB (shared pages divided among their users)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        return None
    return None


def sum_rss_mb(pids: Iterable[int]) -> float:
    return sum(rss_mb(p) for p in pids)


def hwm_mb(pid: int | None = None) -> float | None:
    """Peak RSS (VmHWM) of one process since start or since ``reset_hwm``."""
    try:
        with open(f"/proc/{pid or 'self'}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        return None
    return None


def reset_hwm() -> bool:
    """Reset this process's VmHWM to its current RSS (``5 > clear_refs``); False if not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def cmdline(pid: int) -> str:
    import psutil

    try:
        return " ".join(psutil.Process(pid).cmdline()) or psutil.Process(pid).name()
    except psutil.Error:
        return "?"


def age_s(pid: int | None = None) -> float | None:
    """Seconds since ``pid`` started, to 10 ms: /proc's start tick against the uptime clock.

    Not ``time() - create_time()``: create_time adds the start tick to a boot time that
    /proc gives in whole seconds, so that difference can be off by up to a second.
    """
    try:
        with open(f"/proc/{pid or os.getpid()}/stat", "rb") as f:
            start_ticks = int(f.read().rsplit(b")", 1)[1].split()[19])
        with open("/proc/uptime", "rb") as f:
            uptime = float(f.read().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))


def is_running(pid: int, started: float | None) -> bool:
    """``pid`` exists and, when ``started`` is known, is the same process (not a reused pid)."""
    t = create_time(pid)
    if t is None:
        return False
    return started is None or abs(t - started) < 1.0


def create_time(pid: int | None = None) -> float | None:
    import psutil

    try:
        return psutil.Process(pid or os.getpid()).create_time()
    except psutil.Error:
        return None


def exited(pid: int) -> bool:
    """``pid`` is gone or a zombie: its memory is back (a zombie holds none)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except (OSError, IndexError):
        return True
