"""When a fixture is expensive enough that its users should share a worker.

The planner groups by this rule (``plan.grouping``); the profile summary and ``compare``
apply the same rule to a recorded run. Its own small module, re-exported by ``model``:
a measured run's terminal summary reads it and should load neither the planner nor
the data model to do so.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GroupingRules:
    """When a fixture is expensive enough that its users should share a worker."""

    setup_s: float = 0.5  # slow to set up
    procs: int = 1  # starts processes
    mb: float = 100.0  # holds much memory


DEFAULT_RULES = GroupingRules()
