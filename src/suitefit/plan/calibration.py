"""Which files a profile's calibration runs side by side, to measure contention before any run does.

A serial profile cannot see how much longer a file takes when other workers run beside it
(scipy.sparse on this 2-CPU machine: 1.57x, so the first plan predicted 138 s for a 213 s
run). The calibration runs a slice of the suite's own files, each already timed alone in
the profile, on the workers a plan would use, through the same recording as any run: the
history then has a run with workers, and the cost model reads its slowdown and its
workers' start-up under contention the way it reads any run's (``costs._slowdown``,
``costs._worker``). Pure: data in, a choice out; ``cli/calibrate.py`` runs it.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from suitefit.model import FAULT_MIN_MB, CostModel, FileCost, FixtureCost

WINDOW_SHARE = 0.05  # each worker's window: this share of the suite's serial time ...
WINDOW_MIN_S = 1.5  # ... at least this (shorter, the noise of one window decides) ...
WINDOW_MAX_S = 15.0  # ... and at most this (a profile of a long suite grows by ~5%)
PIECES = 3  # a file is at most this share of a window (the last file on a worker runs alone) ...
# ... unless too few are: then the shortest that are at most a window
MIN_FILE_S = 0.05  # shorter files are left out of the slowdown (``costs.slowdown_factor``)
MIN_FILES = 3  # the fewest files ``costs.slowdown_factor`` reads a factor from
MAX_WORKERS = 8


@dataclass(frozen=True)
class Calibration:
    """The files to run side by side, on how many workers, and why (or why not: ``files`` empty)."""

    workers: int
    files: tuple[str, ...]  # in the order they are handed out: the longest first
    window_s: float  # serial seconds each worker is meant to run
    why: str


def choose(costs: CostModel, cpus: int, memory_mb: float, *, workers: int | None = None) -> Calibration:
    """Files that together take about ``window`` serial seconds a worker.

    Eligible: measured and passing (a failed test's time is not the file's), at least
    ``MIN_FILE_S`` alone, under ``FAULT_MIN_MB`` of memory (a file touching much memory is
    priced by its page faults, not by CPU sharing, and two of them could crowd the budget),
    and using no fixture that starts processes or holds that much memory (its set-up would be
    timed, not contention). The longest eligible files that fit come first, each at most a
    third of a window (where too few are, the shortest up to a whole window), in a stable
    order among equals.
    """
    w = workers if workers is not None else min(cpus, MAX_WORKERS)
    if w < 2:
        return Calibration(w, (), 0.0, f"{cpus} CPU(s): no workers to run side by side")
    measured = [f for f in costs.files if f.measured]
    work = sum(f.wall_s for f in measured)
    window = min(WINDOW_MAX_S, max(WINDOW_MIN_S, WINDOW_SHARE * work))
    heavy = _heavy_fixtures(costs.fixtures)
    light = [f for f in measured if _eligible(f, heavy)]
    # memory: xdist's controller (a baseline), and each worker's baseline and largest file
    base = costs.worker.baseline_mb
    per_worker = costs.worker.planned_mb + max((f.peak_mb for f in light), default=0.0)
    fits = int((memory_mb - base) // per_worker) if per_worker > 0 else w
    if fits < 2:
        return Calibration(w, (), window, f"two workers and xdist's controller ({2 * per_worker + base:.0f} MiB) "
                                          f"do not fit the budget ({memory_mb:.0f} MiB)")
    w = min(w, fits)
    need = max(MIN_FILES, w + 1)
    eligible = [f for f in light if f.wall_s <= window / PIECES]
    if len(eligible) < need:  # a suite of longer files: as long as a window, the shortest of them
        eligible = sorted((f for f in light if f.wall_s <= window), key=lambda f: f.wall_s)[:need]
    eligible.sort(key=lambda f: (-f.wall_s, zlib.crc32(f.path.encode())))
    chosen: list[FileCost] = []
    total = 0.0
    for f in eligible:
        if total + f.wall_s <= window * w:
            chosen.append(f)
            total += f.wall_s
    if len(chosen) < need:
        return Calibration(w, (), window, f"{len(chosen)} file(s) short and light enough to run side by "
                                          f"side (at most {window:.2f} s alone, under "
                                          f"{FAULT_MIN_MB:.0f} MiB, passing, no fixture that starts "
                                          f"processes); {need} are needed")
    return Calibration(w, tuple(f.path for f in chosen), window,
                       f"{len(chosen)} file(s), {total:.1f} s alone in all, on {w} workers")


def _heavy_fixtures(fixtures: Sequence[FixtureCost]) -> set[str]:
    return {fx.name for fx in fixtures if fx.procs > 0 or fx.mb >= FAULT_MIN_MB}


def _eligible(f: FileCost, heavy: set[str]) -> bool:
    return (f.trusted and f.wall_s >= MIN_FILE_S and f.peak_mb < FAULT_MIN_MB
            and not heavy.intersection(f.fixtures))
