"""Split a suite into N CI shards: balanced by predicted time, groups whole.

With history, atoms (declared groups, fixture groups, single files; groups are
never split across shards) go longest first to the shard with the least predicted work (every shard also pays its own
worker startup, the same for all, so balancing work balances wall time). Without
history the split is a stable hash of each atom's name: a file stays in its shard
when others are added, but shards are balanced only by count, and it says so.
Files collected later that no shard knows go by the same hash (``ShardSplit.shard_of``),
so every shard agrees on them without talking to the others.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, replace

from suitefit.errors import SuitefitError
from suitefit.model import CostModel, FileCost, FixtureCost, Unit
from suitefit.plan.grouping import (
    DEFAULT_RULES,
    GroupingRules,
    Groups,
    find_groups,
    make_unit,
)
from suitefit.units import fmt_s


def hash_shard(name: str, n: int) -> int:
    """Stable 1-based shard of ``name`` among ``n`` (same on every machine and Python)."""
    digest = hashlib.sha1(name.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % n + 1


def check_shard(shard: int | None, shards: int) -> None:
    if shards < 1:
        raise SuitefitError(f"shard count must be at least 1, got {shards}")
    if shard is not None and not 1 <= shard <= shards:
        raise SuitefitError(f"shard {shard} is not in 1..{shards}")


@dataclass(frozen=True)
class ShardSplit:
    """Which shard runs each known file, and the predicted work per shard."""

    shards: int
    assignment: Mapping[str, int]  # file -> 1-based shard
    work_s: tuple[float, ...]  # predicted work per shard (sum of its atoms), index k-1
    atoms: tuple[tuple[Unit, int], ...]  # (atom, shard)
    balanced: bool  # False: hash split (no history)
    reasons: tuple[str, ...]

    def shard_of(self, file: str) -> int:
        """The shard of ``file``; files no shard knows go by the stable hash."""
        k = self.assignment.get(file)
        return k if k is not None else hash_shard(file, self.shards)

    def files(self, k: int) -> tuple[str, ...]:
        return tuple(f for f, s in self.assignment.items() if s == k)


def split_shards(costs: CostModel, shards: int, file_costs: Mapping[str, FileCost],
                 fixtures: Mapping[str, FixtureCost], rules: GroupingRules = DEFAULT_RULES,
                 groups: Groups | None = None) -> ShardSplit:
    """Split the files of ``file_costs`` into ``shards`` shards (see module doc)."""
    check_shard(None, shards)
    groups = groups or find_groups(costs, file_costs, rules)
    total = sum(fc.wall_s for fc in file_costs.values()) or 1.0
    target = total / shards
    atoms: list[Unit] = []
    for name, files in groups.declared:
        atoms.append(make_unit(f"group:{name}", files, file_costs, fixtures, "declared group"))
    big: list[str] = []
    for g in groups.fixture_groups:  # whole: a shard that splits a pool starts it again
        atom = make_unit(g.name, g.files, file_costs, fixtures, "fixture group")
        if shards > 1 and atom.wall_s > target:
            big.append(f"{g.name} ({fmt_s(atom.wall_s)} of work, more than a shard's share "
                       f"{fmt_s(target)}) stays whole in one shard and sets that shard's time")
        atoms.append(atom)
    for f in groups.singles:
        atoms.append(make_unit(f, (f,), file_costs, fixtures, "file"))
    placed: list[tuple[Unit, int]] = []
    work_s = [0.0] * shards
    if not costs.runs_used:
        for a in sorted(atoms, key=lambda a: a.name):
            k = hash_shard(a.name, shards)
            placed.append((a, k))
            work_s[k - 1] += a.wall_s
        reasons = [f"shards: {shards}, split by a stable hash of each file or group name - no "
                   f"history, so not balanced by time (run `suitefit profile` to balance)"]
    else:
        for a in sorted(atoms, key=lambda a: (-a.wall_s, a.name)):
            k = min(range(shards), key=lambda i: (work_s[i], i)) + 1
            placed.append((a, k))
            work_s[k - 1] += a.wall_s
        mean = sum(work_s) / shards
        reasons = [f"shards: {shards}, balanced by predicted work (longest first to the least "
                   f"loaded shard, groups whole): {fmt_s(min(work_s))} to {fmt_s(max(work_s))} of "
                   f"work each, mean {fmt_s(mean)}; each shard also pays its own worker startup"]
    reasons += big
    assignment = {f: k for a, k in placed for f in a.files}
    return ShardSplit(shards, assignment, tuple(work_s), tuple(placed), bool(costs.runs_used),
                      tuple(reasons))


def costs_for_shard(costs: CostModel, split: ShardSplit, k: int) -> CostModel:
    """The cost model restricted to shard ``k``'s files (declared groups go whole)."""
    files = tuple(fc for fc in costs.files if split.assignment.get(fc.path) == k)
    declared = {n: fs for n, fs in costs.declared_groups.items()
                if fs and split.assignment.get(fs[0]) == k}
    return replace(costs, files=files, declared_groups=declared)
