"""The CPUs of this machine as doctor reports them: logical, physical, and usable by the run.

``usable`` (affinity capped by a cgroup CPU quota) comes from ``suitefit.budget``, the
same detection the planner uses, so doctor and plan never disagree on the machine;
this module adds the logical/physical counts that ``-n auto``/``logical`` rest on.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil

from suitefit.budget import detect_cpus


@dataclass(frozen=True)
class CpuFacts:
    logical: int  # logical CPUs of the machine
    physical: int | None  # physical cores (psutil), None when unknown
    usable: int  # CPUs this process may run on: affinity, capped by a cgroup CPU quota
    source: str


def cpu_facts() -> CpuFacts:
    logical = psutil.cpu_count(logical=True) or os.cpu_count() or 1
    usable, source = detect_cpus()
    return CpuFacts(logical=logical, physical=psutil.cpu_count(logical=False), usable=usable, source=source)
