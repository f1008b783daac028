"""What this machine gives a test run: the memory budget and the CPUs a process may use.

Read from the kernel (cgroup files, affinity), never from a table, so that a CI
container's limit wins over the host's RAM. ``root`` parameters let tests point the
readers at a folder laid out like ``/sys/fs/cgroup`` and ``/proc/self/cgroup``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import psutil

from suitefit.units import fmt_mb

# Values at or above this are "no limit" (cgroup v1 writes PAGE_COUNTER_MAX * page size).
_UNLIMITED_BYTES = 1 << 60


@dataclass(frozen=True)
class MemoryLimit:
    mb: float
    source: str  # e.g. "cgroup v2 memory.max /sys/fs/cgroup/ci/memory.max"


@dataclass(frozen=True)
class CpuFacts:
    logical: int  # logical CPUs of the machine
    physical: int | None  # physical cores (psutil), None when unknown
    usable: int  # CPUs this process may run on: affinity, capped by a cgroup CPU quota
    source: str


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _cgroup_paths(proc_cgroup: Path) -> tuple[str | None, str | None]:
    """(v2 path, v1 memory path) of this process from /proc/self/cgroup."""
    v2 = v1 = None
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None, None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hid, controllers, path = parts
        if hid == "0" and controllers == "":
            v2 = path
        elif "memory" in controllers.split(","):
            v1 = path
    return v2, v1


def _ancestors(base: Path, rel: str) -> list[Path]:
    """base/rel, then each parent folder up to base: a limit anywhere above applies too."""
    parts = [p for p in rel.strip("/").split("/") if p]
    return [base.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]


def cgroup_memory_limit(
    sys_cgroup: Path = Path("/sys/fs/cgroup"), proc_cgroup: Path = Path("/proc/self/cgroup")
) -> MemoryLimit | None:
    """The tightest cgroup memory limit over this process's cgroup and its parents, if any."""
    v2, v1 = _cgroup_paths(proc_cgroup)
    found: list[tuple[int, str]] = []
    if v2 is not None:
        for d in _ancestors(sys_cgroup, v2):
            value = _read_int(d / "memory.max")
            if value is not None and value < _UNLIMITED_BYTES:
                found.append((value, f"cgroup v2 {d / 'memory.max'}"))
    if v1 is not None:
        for d in _ancestors(sys_cgroup / "memory", v1):
            value = _read_int(d / "memory.limit_in_bytes")
            if value is not None and value < _UNLIMITED_BYTES:
                found.append((value, f"cgroup v1 {d / 'memory.limit_in_bytes'}"))
    if not found:
        return None
    value, source = min(found)
    return MemoryLimit(value / (1024 * 1024), source)


def detect_budget(
    margin: float = 0.10,
    *,
    sys_cgroup: Path = Path("/sys/fs/cgroup"),
    proc_cgroup: Path = Path("/proc/self/cgroup"),
) -> tuple[float, str]:
    """Memory a run may use, in MiB, and where that number came from.

    A cgroup limit (v2 ``memory.max`` or v1 ``memory.limit_in_bytes``) when one is set,
    else total RAM; ``margin`` of it is kept back for the OS and the runner's agent.
    """
    limit = cgroup_memory_limit(sys_cgroup, proc_cgroup)
    if limit is None:
        total = psutil.virtual_memory().total / (1024 * 1024)
        limit = MemoryLimit(total, "total RAM")
    budget = limit.mb * (1 - margin)
    return budget, f"{limit.source}: {fmt_mb(limit.mb)} minus {margin:.0%} margin"


def cgroup_cpu_quota(
    sys_cgroup: Path = Path("/sys/fs/cgroup"), proc_cgroup: Path = Path("/proc/self/cgroup")
) -> float | None:
    """CPUs allowed by a cgroup v2 ``cpu.max`` quota (e.g. "200000 100000" -> 2.0), if set."""
    v2, _ = _cgroup_paths(proc_cgroup)
    if v2 is None:
        return None
    quotas = []
    for d in _ancestors(sys_cgroup, v2):
        try:
            quota, period = (d / "cpu.max").read_text().split()
        except (OSError, ValueError):
            continue
        if quota != "max" and float(period) > 0:
            quotas.append(float(quota) / float(period))
    return min(quotas) if quotas else None


def cpu_facts() -> CpuFacts:
    logical = psutil.cpu_count(logical=True) or os.cpu_count() or 1
    physical = psutil.cpu_count(logical=False)
    try:
        usable = len(os.sched_getaffinity(0))
        source = "CPU affinity of this process"
    except (AttributeError, OSError):
        usable, source = logical, "logical CPUs"
    quota = cgroup_cpu_quota()
    if quota is not None and quota < usable:
        usable, source = max(1, int(quota)), f"cgroup cpu.max quota {quota:g} CPUs"
    return CpuFacts(logical=logical, physical=physical, usable=usable, source=source)
