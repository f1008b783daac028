"""Facts about a process tree, read straight from /proc (psutil where /proc lacks it).

RSS comes from ``/proc/PID/statm`` (cheap: sample it often); PSS from
``/proc/PID/smaps_rollup`` (walks page tables: sample it rarely). Children are
found through ``/proc/PID/task/TID/children``, which avoids scanning every
process on the machine the way a ppid map does.

Files are read with ``os.open``/``os.read``, not ``open()``: no Python file object per
read, which is most of the cost of a small /proc read (the sampler reads a few per
process every interval, a test process a few per file).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing's, without importing typing (the sampler process starts lean)
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

PAGE_MB = os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)
_HAS_CHILDREN_FILE = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")
_HAS_PROC_STAT = os.path.exists("/proc/self/stat") and os.path.exists("/proc/stat")
_RDONLY = os.O_RDONLY | os.O_CLOEXEC


def read_bytes(path: str) -> bytes:
    """The whole of a (small, /proc) file; OSError if it cannot be read."""
    fd = os.open(path, _RDONLY)
    try:
        chunk = os.read(fd, 4096)
        if not chunk:
            return chunk
        parts = [chunk]
        while chunk := os.read(fd, 4096):  # to the end: a read may return less than there is
            parts.append(chunk)
        return b"".join(parts)
    finally:
        os.close(fd)


def pread_all(fd: int) -> bytes:
    """A /proc file kept open, produced afresh (``pread`` at 0), to its end; OSError if it
    cannot be read (its process or thread gone, for most files)."""
    data = os.pread(fd, 4096, 0)
    if len(data) < 2048:  # /proc hands out about a page at a time: this short, it is all
        return data
    parts = [data]
    while part := os.pread(fd, 4096, sum(map(len, parts))):
        parts.append(part)
    return b"".join(parts)


def _field(data: bytes, key: bytes) -> int | None:
    """The number after ``key`` at a line's start in a ``Key:   123 kB`` file (status, smaps_rollup)."""
    if data.startswith(key):
        i = 0
    else:
        i = data.find(b"\n" + key)
        if i < 0:
            return None
        i += 1
    return int(data[i + len(key):].split(None, 1)[0])


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (all its threads'), [] if it is gone."""
    if not _HAS_CHILDREN_FILE:
        import psutil  # here, not at the top: the sampler process starts faster without it

        try:
            return [p.pid for p in psutil.Process(pid).children()]
        except psutil.Error:
            return []
    return [int(c) for data in thread_children(pid) for c in data.split()]


def thread_children(pid: int) -> list[bytes]:
    """Every thread's ``children`` file of ``pid``, as read (the main thread's included)."""
    out: list[bytes] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            out.append(read_bytes(f"/proc/{pid}/task/{tid}/children"))
        except OSError:
            continue
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


def worker_trees(parents: Mapping[int, int], rss: Mapping[int, float],
                 workers: Iterable[tuple[str, int]]) -> dict[str, tuple[float, float, list[int]]]:
    """Each worker's own tree, from one read of the whole tree (``tree_parents`` and each
    process's RSS): name -> (its tree's MiB, its own MiB, its descendants' pids).

    A worker not in the tree, or with no RSS (gone), is left out.
    """
    kids: dict[int, list[int]] = {}
    for p, parent in parents.items():
        kids.setdefault(parent, []).append(p)
    out: dict[str, tuple[float, float, list[int]]] = {}
    for name, pid in workers:
        self_mb = rss.get(pid, 0.0)
        if pid not in parents or self_mb <= 0:
            continue
        below: list[int] = []
        stack, tree_mb = list(kids.get(pid, ())), self_mb
        while stack:
            p = stack.pop()
            below.append(p)
            tree_mb += rss.get(p, 0.0)
            stack.extend(kids.get(p, ()))
        out[name] = (tree_mb, self_mb, below)
    return out


def proc_readable() -> bool:
    """Whether this system has a Linux-style /proc to read process memory from."""
    return os.path.exists(f"/proc/{os.getpid()}/statm")


def rss_mb(pid: int) -> float:
    """Resident set size of one process in MiB; 0 if it is gone."""
    try:
        fd = os.open(f"/proc/{pid}/statm", _RDONLY)
    except OSError:
        return 0.0
    try:  # seven numbers, made at once: one read holds them all
        return int(os.read(fd, 512).split()[1]) * PAGE_MB
    except (OSError, IndexError, ValueError):
        return 0.0
    finally:
        os.close(fd)


def pss_mb(pid: int) -> float | None:
    """Proportional set size in MiB (shared pages divided among their users)."""
    try:
        kb = _field(read_bytes(f"/proc/{pid}/smaps_rollup"), b"Pss:")
    except (OSError, ValueError, IndexError):
        return None
    return None if kb is None else kb / 1024


def sum_rss_mb(pids: Iterable[int]) -> float:
    return sum(rss_mb(p) for p in pids)


def hwm_mb(pid: int | None = None) -> float | None:
    """Peak RSS (VmHWM) of one process since start or since ``reset_hwm``."""
    try:
        kb = _field(read_bytes(f"/proc/{pid or 'self'}/status"), b"VmHWM:")
    except (OSError, ValueError, IndexError):
        return None
    return None if kb is None else kb / 1024


def reset_hwm() -> bool:
    """Reset this process's VmHWM to its current RSS (``5 > clear_refs``); False if not allowed."""
    try:
        fd = os.open("/proc/self/clear_refs", os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        os.write(fd, b"5")
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


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
    """When ``pid`` started (epoch seconds), None if it is gone.

    What psutil gives on Linux (its start tick in /proc/PID/stat over the boot time in
    /proc/stat), read here without importing psutil: a measured run asks at its start.
    """
    if not _HAS_PROC_STAT:
        import psutil

        try:
            return float(psutil.Process(pid or os.getpid()).create_time())
        except psutil.Error:
            return None
    try:
        ticks = int(read_bytes(f"/proc/{pid or os.getpid()}/stat").rsplit(b")", 1)[1].split()[19])
        boot = _field(read_bytes("/proc/stat"), b"btime")
    except (OSError, IndexError, ValueError):
        return None
    if boot is None:
        return None
    return ticks / os.sysconf("SC_CLK_TCK") + boot


def exited(pid: int) -> bool:
    """``pid`` is gone or a zombie: its memory is back (a zombie holds none)."""
    try:
        return read_bytes(f"/proc/{pid}/stat").rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def proc_cpu_ticks(pid: int) -> int | None:
    """User + system clock ticks one process has run; None if it is gone or a zombie."""
    try:
        f = read_bytes(f"/proc/{pid}/stat").rsplit(b")", 1)[1].split()
        return None if f[0] in (b"Z", b"X") else int(f[11]) + int(f[12])
    except (OSError, IndexError, ValueError):
        return None


def cpu_ticks() -> tuple[int, int] | None:
    """(busy, stolen) clock ticks of the whole machine since boot, from /proc/stat's ``cpu`` line.

    busy: user + nice + system + irq + softirq (guest time is inside user); stolen: steal,
    the time this machine's CPUs wanted to run while the hypervisor ran someone else. A
    shared cloud host took 1-15% here from minute to minute: every time measured during
    such a stretch is that much slower than the machine's own. None without /proc/stat
    (or a kernel that does not count steal).
    """
    try:
        f = read_bytes("/proc/stat").split(b"\n", 1)[0].split()
        busy = int(f[1]) + int(f[2]) + int(f[3]) + int(f[6]) + int(f[7])
        return busy, int(f[8])
    except (OSError, IndexError, ValueError):
        return None


def steal_share(before: tuple[int, int] | None, after: tuple[int, int] | None,
                min_ticks: int = 100) -> float | None:
    """The share of the CPU time wanted between two ``cpu_ticks`` readings that the host took:
    stolen / (busy + stolen). None without both readings, or with under ``min_ticks`` (1 s at
    the usual 100 Hz) of CPU wanted between them: too little to say."""
    if before is None or after is None:
        return None
    busy, stolen = after[0] - before[0], after[1] - before[1]
    if busy < 0 or stolen < 0 or busy + stolen < min_ticks:
        return None
    return stolen / (busy + stolen)
