"""BLAS/OpenMP thread pools: one thread per worker unless the user chose otherwise.

A light module on purpose: `suitefit run` stays resident while pytest runs, and
its memory counts against the budget, so it must not import pytest to do this.
"""

from __future__ import annotations

import os

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def pin_threads(env: dict[str, str] | os._Environ[str]) -> list[str]:
    """Set each thread variable to 1 unless the user set it; returns those set."""
    pinned = []
    for var in THREAD_VARS:
        if var not in env:
            env[var] = "1"
            pinned.append(var)
    return pinned
