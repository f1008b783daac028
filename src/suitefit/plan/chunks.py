"""Split a long file into chunks of its tests, so that one file is not the long pole.

``--dist load`` never has this problem (it hands out single tests) and pays for it
with every module fixture set up on every worker. A chunk is a contiguous slice of the
file's collected tests (``Unit.chunk``, ``Unit.span``); each chunk pays the file's module-
and class-scoped fixture setup again, as the history measured it. A file is split only
when its time exceeds the ideal lane and the split saves more than run-to-run noise.

Chunks are cut where the history puts equal shares of the file's time, not at equal counts
of tests: real files are not even along their tests. scipy 1.17's sparse suite, cut at equal
counts into 5: ``test_64bit.py``'s largest chunk 1.58x the even fifth of its 84 s,
``test_lobpcg.py``'s 2.61x (its last fifth of tests holds half its time).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from itertools import pairwise

from suitefit.model import FileCost, FixtureCost, GroupingRules, Unit
from suitefit.plan.class_cuts import inside_runs, snap_cuts
from suitefit.plan.core import MIN_SPLIT_TESTS, even_cuts
from suitefit.plan.grouping import expensive_why
from suitefit.units import fmt_mb, fmt_s

PAYS_FRACTION = 0.02  # as for an extra worker: a saving below this is noise
REPEATED_SCOPES = ("module", "class")


def repeated_setup_s(path: str, fixtures: Sequence[FixtureCost]) -> float:
    """What a chunk of ``path`` pays again: its module/class fixtures' setup."""
    return sum(f.setup_s for f in fixtures if f.scope in REPEATED_SCOPES and path in f.files)


def plain(u: Unit) -> bool:
    """A plain file's unit: not a group's part (a pool's users, a declared or learned group),
    which stays whole, or its fixture would start again on every worker a piece went to."""
    return len(u.files) == 1 and u.chunk is None and u.name == u.files[0]


class Divisible:
    """Which units' tails may move to another worker at the run's end, and what a piece pays
    again there (``Unit.piece_setup_s``): a plain file or a chunk of one that uses no
    expensive session fixture (that one would start again, processes and memory, where the
    piece went); the piece pays the file's module/class fixtures' setup and its session
    fixtures'. Read from the fixtures once: the planner asks for every unit at every
    worker count it tries."""

    def __init__(self, fixtures: Sequence[FixtureCost], rules: GroupingRules) -> None:
        self._again: dict[str, float] = {}
        for f in fixtures:
            if f.scope in REPEATED_SCOPES:
                for path in dict.fromkeys(f.files):
                    self._again[path] = self._again.get(path, 0.0) + f.setup_s
        self._setup = {f.name: f.setup_s for f in fixtures}
        self._expensive = {f.name for f in fixtures if expensive_why(f, rules)}
        # unit id -> (the unit, its answer): the single-file units are the same objects at
        # every worker count, and a dataclass copy of each every time was a fifth of planning
        self._seen: dict[int, tuple[Unit, Unit]] = {}

    def __call__(self, u: Unit) -> Unit:
        got = self._seen.get(id(u))
        if got is not None and got[0] is u:
            return got[1]
        out = self._divisible(u)
        self._seen[id(u)] = (u, out)
        return out

    def _divisible(self, u: Unit) -> Unit:
        if (not (plain(u) or (u.chunk is not None and len(u.files) == 1)) or u.tests < MIN_SPLIT_TESTS
                or u.piece_setup_s is not None or any(f in self._expensive for f in u.fixtures)):
            return u
        again = self._again.get(u.files[0], 0.0) + sum(self._setup.get(f, 0.0) for f in u.fixtures)
        return replace(u, piece_setup_s=again)


def split_long_files(units: Sequence[Unit], file_costs: Mapping[str, FileCost],
                     fixtures: Sequence[FixtureCost], *, workers: int, lane_s: float,
                     fill: bool = False) -> tuple[list[Unit], list[str]]:
    """Units with each too-long single-file unit replaced by its chunks; and the reasons.

    Chunks of equal time, or with ``fill`` chunks of the ideal lane's time and the rest in a
    last one, to run beside another unit (McNaughton's wrap-around: no lane longer than the
    ideal one where the pieces fit); the planner simulates both and keeps the faster.
    """
    if workers <= 1:
        return list(units), []
    out: list[Unit] = []
    reasons: list[str] = []
    for u in units:
        fc = file_costs.get(u.files[0]) if plain(u) else None
        if fc is None or fc.tests < 2 or u.wall_s <= lane_s:
            out.append(u)
            continue
        setup = repeated_setup_s(fc.path, fixtures)
        m = min(fc.tests, workers, math.ceil(u.wall_s / max(lane_s, 1e-9)))
        targets = [min(1.0, k * lane_s / u.wall_s) for k in range(1, m)] if fill else None
        cuts = cut_points(fc.tests, m, fc.time_shares, targets) if m >= 2 else [0, fc.tests]
        counted = cuts
        if fc.classes:  # between its test classes where one is near, as the run cuts them
            cuts = snap_cuts(cuts, inside_runs(fc.classes, fc.tests))
        times = [u.wall_s * (share_at(fc.time_shares, hi / fc.tests) - share_at(fc.time_shares, lo / fc.tests))
                 for lo, hi in pairwise(cuts)]
        if m < 2 or max(times) + setup >= u.wall_s * (1 - PAYS_FRACTION):
            out.append(u)
            continue
        shaped = bool(fc.time_shares)
        moved = cuts != counted
        sliced = shaped or fill or moved  # not the k-th of m equal counts: the run needs the fractions
        # what the unit adds to its file's peak: its persistent fixtures' memory, which the parts
        # runs measured (as the file's peak) do not hold
        held = max(0.0, u.peak_mb - fc.peak_mb)
        for k, ((lo, hi), t) in enumerate(zip(pairwise(cuts), times, strict=True), start=1):
            # its own peak where runs that split the file measured it, else the file's
            own = fc.peak_between(lo / fc.tests, hi / fc.tests)
            peak = (u.peak_mb, u.fork_mb, u.forks, u.fork_of_mb) if own is None else (own[0] + held, *own[1:])
            out.append(Unit(
                name=f"{u.name}[{k}/{m}]", files=u.files, wall_s=t + (setup if k > 1 else 0.0),
                peak_mb=peak[0], fork_mb=peak[1], forks=peak[2], fork_of_mb=peak[3],
                fixtures=u.fixtures, chunk=(k, m),
                kept_mb=u.kept_mb / m,
                last_s=u.last_s if k == m else min(t / max(1, hi - lo), t),
                span=(lo / fc.tests, hi / fc.tests) if sliced else None, tests=hi - lo,
                reason=(f"chunk {k}/{m} of {fc.path} ({fc.tests} tests, {fmt_s(u.wall_s)}): longer "
                        f"than the ideal lane {fmt_s(lane_s)}; tests {lo + 1}-{hi}, {fmt_s(t)}"
                        + (" (cut to fill the ideal lane" if fill else " (cut at equal shares")
                        + (" of its measured time" if shaped else " of its tests")
                        + (", moved to a boundary between its test classes)" if moved else ")")
                        + f"; each chunk pays {fmt_s(setup)} of module/class fixture setup again"
                        + ("" if own is None else f"; its peak {fmt_mb(own[0])} as runs that split the file "
                                                  f"measured these tests (the file's {fmt_mb(fc.peak_mb)})")),
            ))
        reasons.append(f"{fc.path}: split into {m} chunks of its {fc.tests} tests "
                       f"({fmt_s(u.wall_s)} > ideal lane {fmt_s(lane_s)}; the longest {fmt_s(max(times))}"
                       + (", the rest beside another unit" if fill else "")
                       + (", cut by its measured time" if shaped else "")
                       + f"; {fmt_s(setup)} setup per extra chunk)")
    return out, reasons


def share_at(shares: Sequence[float], x: float) -> float:
    """The share of a file's time its tests up to count fraction ``x`` take (even if unknown)."""
    if len(shares) < 2:
        return min(1.0, max(0.0, x))
    q = len(shares) - 1
    pos = min(1.0, max(0.0, x)) * q
    i = min(int(pos), q - 1)
    return shares[i] + (shares[i + 1] - shares[i]) * (pos - i)


def fraction_at(shares: Sequence[float], y: float) -> float:
    """The count fraction of a file's tests by which ``y`` of its time is spent (``share_at``'s inverse)."""
    if len(shares) < 2:
        return min(1.0, max(0.0, y))
    q = len(shares) - 1
    for i in range(q):
        if shares[i + 1] >= y:
            seg = shares[i + 1] - shares[i]
            return (i + (0.0 if seg <= 0 else (y - shares[i]) / seg)) / q
    return 1.0


def cut_points(tests: int, m: int, shares: Sequence[float], targets: Sequence[float] | None = None) -> list[int]:
    """Test indices 0 = c0 < c1 < ... < cm = tests: the k-th cut where ``targets[k-1]`` of the
    time is spent (default k/m), each chunk at least one test. Without shares or targets, as
    ``core.chunk_of`` cuts by count."""
    if len(shares) < 2 and targets is None:
        return even_cuts(tests, m)
    cuts = [0]
    for k in range(1, m):
        c = round(fraction_at(shares, targets[k - 1] if targets is not None else k / m) * tests)
        cuts.append(max(cuts[-1] + 1, min(c, tests - (m - k))))
    cuts.append(tests)
    return cuts
