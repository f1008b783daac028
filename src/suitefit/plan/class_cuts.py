"""Where a file's tests are cut into pieces at run time: between test classes, not inside one.

A long file's chunks (``plan/chunks.py``) and a tail moved to a free worker are cut by test
count, where the history puts a share of the file's time. A cut inside a class sets the
class's fixtures up again where the second part runs, and breaks a class whose tests rely
on the ones before them (state kept on the class: what ``--dist loadscope`` users count
on). So the runner moves each cut to the nearest boundary between classes (or between
module-level tests), within a quarter of the smaller part it cuts: the split keeps its
balance, and a class much longer than that is cut as before, paying its class fixtures
again as the plan priced them. The plan cuts its chunks the same way, from the classes the
cost model keeps for a long file (``FileCost.classes``), so a run of the suite it planned
finds its cuts already between classes; the runner's own snapping, from the node ids it
collected, covers a suite changed since. Pure: node ids in, positions out.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence


def class_of(nodeid: str) -> str | None:
    """The outermost class a test is in (``file::Class``), None for a module-level test.
    A parametrized test's id may hold ``::`` in its brackets (read before them), and a
    file's name may hold brackets (read after it)."""
    path, _, rest = nodeid.partition("::")
    parts = rest.split("[", 1)[0].split("::")
    return f"{path}::{parts[0]}" if len(parts) >= 2 else None


def inside_class(nodeids: Sequence[str]) -> Callable[[int], bool]:
    """``inside(p)``: does a cut before position ``p`` of ``nodeids`` (one file's tests, in
    order) fall inside a class, between two tests of it?"""
    keys = [class_of(n) for n in nodeids]

    def inside(p: int) -> bool:
        return 0 < p < len(keys) and keys[p] is not None and keys[p] == keys[p - 1]

    return inside


MAX_CLASS_RUNS = 512  # a file with more is cut by its tests at plan time (the run still snaps)


def class_runs(nodeids: Sequence[str]) -> list[tuple[int, int]]:
    """The test classes of two tests or more in ``nodeids`` (one file's tests, in order) as
    (start, end) positions; [] where there are more than ``MAX_CLASS_RUNS`` (a plan keeps
    them for its long files)."""
    out: list[tuple[int, int]] = []
    inside = inside_class(nodeids)
    start, n = 0, len(nodeids)
    for p in range(1, n + 1):
        if p == n or not inside(p):  # a run of two or more with every cut inside: one class
            if p - start >= 2:
                out.append((start, p))
            start = p
    return out if len(out) <= MAX_CLASS_RUNS else []


def inside_runs(runs: Sequence[tuple[float, float]], tests: int) -> Callable[[int], bool]:
    """``inside`` (as ``inside_class``) from the count fractions of a file's classes, as the
    cost model keeps them (``FileCost.classes``, in order), for a file of ``tests`` tests."""
    spans = [(round(a * tests), round(b * tests)) for a, b in runs]
    starts = [a for a, _ in spans]

    def inside(p: int) -> bool:
        i = bisect.bisect_left(starts, p) - 1  # the last class that starts before p
        return i >= 0 and p < spans[i][1]

    return inside


def snap_cuts(cuts: Sequence[int], inside: Callable[[int], bool]) -> list[int]:
    """``cuts`` (0 = c0 <= c1 <= ... <= cm = n: the file's m parts) with each inner cut that
    falls inside a class moved to the nearest one that does not, at most a quarter of the
    smaller part beside it away (at least one test) and never past a neighbouring cut; the
    earlier position among equals. The cuts stay in order, so the parts cover the file once.

    Passes repeat until none moves a cut: a move widens its neighbours' parts, and so their
    reach. The result is then a fixed point, so the run, which snaps the plan's cuts again
    from the node ids it collected, finds them where the plan put them. A cut moves only
    onto a clean position and never again, so there are at most m passes.
    """
    out = list(cuts)
    while True:
        before = list(out)
        for k in range(1, len(out) - 1):
            c = before[k]
            if not inside(c):
                continue
            reach = max(1, min(c - before[k - 1], before[k + 1] - c) // 4)
            lo, hi = max(out[k - 1] + 1, c - reach), min(before[k + 1] - 1, c + reach)
            for d in range(1, reach + 1):
                p = next((p for p in (c - d, c + d) if lo <= p <= hi and not inside(p)), None)
                if p is not None:
                    out[k] = p
                    break
        if out == before:
            return out


def tail_start(asked: int, length: int, inside: Callable[[int], bool]) -> int:
    """Where a tail of ``asked`` tests out of ``length`` begins once moved off a class's
    inside (positions 0..length-1 of the tests it may take, ``inside`` over the same
    positions): the nearest clean start within a quarter of the tail (at least one test),
    the later (a shorter tail) among equals; unmoved where there is none."""
    start = length - asked
    if not inside(start):
        return start
    reach = max(1, asked // 4)
    for d in range(1, reach + 1):
        p = next((p for p in (start + d, start - d) if 0 <= p < length and not inside(p)), None)
        if p is not None:
            return p
    return start
