"""The planner: PURE functions from measured costs and a budget to a Plan.

Nothing in this package touches processes, files, sqlite or pytest: plain data
in (``suitefit.model``), plain data out, so it is property-tested and fast.

The names below load on first use: the plugin's summary needs only the grouping
rules, and importing the whole planner there cost a measured 20 ms at the end of
every recorded run.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from suitefit.plan.dispatch import Dispatcher
    from suitefit.plan.grouping import GroupingRules
    from suitefit.plan.planner import make_plan, plan_shards, shard_split
    from suitefit.plan.shards import ShardSplit, hash_shard
    from suitefit.plan.simulate import Simulation, simulate

_WHERE = {
    "Dispatcher": "dispatch",
    "GroupingRules": "grouping",
    "ShardSplit": "shards",
    "Simulation": "simulate",
    "hash_shard": "shards",
    "make_plan": "planner",
    "plan_shards": "planner",
    "shard_split": "planner",
    "simulate": "simulate",
}

__all__ = [
    "Dispatcher",
    "GroupingRules",
    "ShardSplit",
    "Simulation",
    "hash_shard",
    "make_plan",
    "plan_shards",
    "shard_split",
    "simulate",
]


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'suitefit.plan' has no attribute {name!r}")
    return getattr(importlib.import_module(f"suitefit.plan.{mod}"), name)
