"""The single clock boundary: every measured time is read through here.

Tests can inject a clock; a test that mocks ``time`` cannot corrupt measurements,
because these references are bound at import.
"""

from __future__ import annotations

import os
import time
from time import monotonic as _monotonic
from time import perf_counter as _perf_counter
from time import time as _wall

__all__ = ["cpu_seconds", "monotonic", "perf_counter", "sleep", "times", "wall"]

monotonic = _monotonic
perf_counter = _perf_counter
wall = _wall
sleep = time.sleep


# (user, system, children_user, children_system, elapsed): the per-test path reads it
# directly (cpu_seconds' sum inline), one Python call fewer twice per test
times = os.times


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its reaped children."""
    t = times()
    return t[0] + t[1] + t[2] + t[3]
