"""BLAS/OpenMP thread pools: the CPUs shared out among the workers unless the user chose.

Two workers on two CPUs, each with a pool as large as the machine (the libraries'
default), run four busy threads on two CPUs: on Model-Optimizer's torch suite plain
`pytest -n 2` took 1.7-2x as long as the same with one thread a worker
(benchmarks/README.md). A single worker runs as plain pytest, and as the serial profile
its plan was priced from: the libraries' default.

A light module on purpose: `suitefit run` stays resident while pytest runs, and
its memory counts against the budget, so it must not import pytest to do this.
"""

from __future__ import annotations

import os

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def threads_per_worker(cpus: int, workers: int) -> int | None:
    """Threads each worker's pools get, so that all of them together fit the CPUs; None for
    one worker, which runs as plain pytest does (pools sized by the library)."""
    if workers <= 1:
        return None
    return max(1, cpus // workers)


def pin_threads(env: dict[str, str] | os._Environ[str], threads: int | None) -> list[str]:
    """Set each thread variable the user left unset to ``threads``; returns those set."""
    if threads is None:
        return []
    pinned = []
    for var in THREAD_VARS:
        if var not in env:
            env[var] = str(threads)
            pinned.append(var)
    return pinned
