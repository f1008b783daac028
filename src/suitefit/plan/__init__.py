"""The planner: PURE functions from measured costs and a budget to a Plan.

Nothing in this package touches processes, files, sqlite or pytest: plain data
in (``suitefit.model``), plain data out, so it is property-tested and fast.
"""

from __future__ import annotations

from suitefit.plan.core import Core
from suitefit.plan.grouping import GroupingRules
from suitefit.plan.planner import make_plan, plan_shards, shard_split
from suitefit.plan.shards import ShardSplit, hash_shard
from suitefit.plan.simulate import Simulation, simulate

__all__ = [
    "Core",
    "GroupingRules",
    "ShardSplit",
    "Simulation",
    "hash_shard",
    "make_plan",
    "plan_shards",
    "shard_split",
    "simulate",
]
