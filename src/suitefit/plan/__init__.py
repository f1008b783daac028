"""The planner: PURE functions from measured costs and a budget to a Plan.

Nothing in this package touches processes, files, sqlite or pytest: plain data
in (``suitefit.model``), plain data out, so it is property-tested and fast.

The scheduling core and its simulation are imported with the package: every run under
a plan drives them. The rest (grouping, the planner, shards, the worker count) loads on
first use (PEP 562): a run's pytest process has its plan already and never needs it.
``simulate`` stays eager for another reason too: a lazy name loses to the submodule of
the same name, which the import system binds on the package once it is imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from suitefit.plan.core import Core
from suitefit.plan.simulate import Simulation, simulate

if TYPE_CHECKING:
    from suitefit.plan.grouping import GroupingRules
    from suitefit.plan.planner import make_plan, plan_shards, shard_split
    from suitefit.plan.shards import ShardSplit, hash_shard

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

_HOME = {"GroupingRules": "grouping", "make_plan": "planner", "plan_shards": "planner",
         "shard_split": "planner", "ShardSplit": "shards", "hash_shard": "shards"}


def __getattr__(name: str) -> object:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'suitefit.plan' has no attribute {name!r}")
    value = getattr(__import__(f"suitefit.plan.{home}", fromlist=[name]), name)
    globals()[name] = value  # once: later lookups never come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
