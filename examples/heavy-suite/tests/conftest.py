"""Generated: the costs every process pays, and the shared pool."""
import os
import subprocess
import sys
import time

import pytest

# A slow import that holds memory, paid by every process that imports this conftest.
_t = time.perf_counter()
while time.perf_counter() - _t < 0.5:
    pass
_BALLAST = bytearray(40 * 1024 * 1024)
for _i in range(0, len(_BALLAST), 4096):
    _BALLAST[_i] = 1

_HELPER = (
    "import sys, time\n"
    "b = bytearray(40 * 1024 * 1024)\n"
    "for i in range(0, len(b), 4096): b[i] = 1\n"
    "print('ready', flush=True)\n"
    "sys.stdin.read()\n"
)


def burn(ms):
    """Spend ``ms`` of CPU time (not sleep: a lost core shows as longer wall time)."""
    end = time.process_time() + ms / 1000
    x = 0
    while time.process_time() < end:
        x += 1
    return x


@pytest.fixture(scope="session")
def cpu_pool():
    """Like the first report's distributed-worker pool: starts once, shared by its users."""
    t = time.perf_counter()
    procs = [
        subprocess.Popen([sys.executable, "-c", _HELPER], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    for p in procs:
        p.stdout.readline()
    left = 0.8 - (time.perf_counter() - t)
    if left > 0:
        burn(left * 1000)
    yield procs
    for p in procs:
        p.stdin.close()
        p.wait(timeout=10)
