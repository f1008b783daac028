"""How long this machine takes to fault in a MiB of new memory: measured once per profile.

The plan charges a unit that touches much memory for the page faults of those that began
just before it (the machine faults them one at a time: ``costs.fault_cost``). From the
history alone, the rate is bounded by the least system CPU a MiB that any file cost. That
bound is close where some file's system time is mostly faulting (a hog: 0.5 ms a MiB here).
Where none is, it can be far off: in joblib's suite the only file to grow by 64 MiB spent
its system time starting processes, at 212 ms a MiB. The plan then predicted 443 s for two
workers against about 100, and ran one.

So a profile measures the rate itself, in its own process after its tests: one pass over
``PROBE_MB`` of fresh anonymous memory, writing a byte per page, then the same pass again
over memory already there. The difference is the faulting. Both passes use the
process's CPU clock; ``ru_stime`` is split from ``ru_utime`` by sampled clock ticks, too
coarse for a few tens of milliseconds.
"""

from __future__ import annotations

import mmap
import time

PROBE_MB = 64


def s_per_mb(mb: int = PROBE_MB) -> float | None:
    """CPU seconds (user and system) a MiB of new memory costs to fault in; None if it cannot
    be mapped."""
    size = mb * 2**20
    private = getattr(mmap, "MAP_PRIVATE", None)
    anonymous = getattr(mmap, "MAP_ANONYMOUS", None)
    if private is None or anonymous is None:  # not a POSIX mmap: nothing measured
        return None
    try:  # private and anonymous, as a test's own memory is (Python's default, -1, is shared)
        m = mmap.mmap(-1, size, flags=private | anonymous)
    except (OSError, ValueError, OverflowError):
        return None
    try:
        pages = range(0, size, mmap.PAGESIZE)
        t0 = time.process_time()
        for off in pages:
            m[off] = 1
        t1 = time.process_time()
        for off in pages:  # the loop alone: the pages are in now
            m[off] = 2
        t2 = time.process_time()
    finally:
        m.close()
    return max(0.0, (t1 - t0) - (t2 - t1)) / mb
