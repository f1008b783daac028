"""The budget: the memory and CPUs this runner really gives, and where each number came from.

Memory defaults to the tightest limit that applies - the cgroup (v2 ``memory.max``
up the hierarchy, or v1 ``memory.limit_in_bytes``) or else total RAM - minus a
safety margin. CPUs default to the CPUs this process may run on (affinity),
capped by a cgroup v2 CPU quota. Flags beat ``[tool.suitefit]``, which beats detection.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from suitefit.config import Config
from suitefit.errors import SuitefitError
from suitefit.model import Budget
from suitefit.units import fmt_mb, parse_size_mb

CGROUP_FS = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")
UNLIMITED_BYTES = 1 << 60  # v1 reports "no limit" as a huge page-aligned number


def _read(p: Path) -> str | None:
    try:
        return p.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _cgroup_paths(proc_cgroup: Path) -> tuple[str | None, str | None]:
    """(v2 path, v1 memory path) of this process, from /proc/self/cgroup."""
    text = _read(proc_cgroup) or ""
    v2 = v1 = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            v2 = path
        elif "memory" in controllers.split(","):
            v1 = path
    return v2, v1


def _ancestors(base: Path, rel: str) -> list[Path]:
    parts = [p for p in rel.split("/") if p]
    return [base.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]


def cgroup_memory_limit_mb(proc_cgroup: Path = PROC_CGROUP,
                           fs: Path = CGROUP_FS) -> tuple[float, str] | None:
    """The tightest cgroup memory limit on this process in MiB and its source, or None."""
    v2, v1 = _cgroup_paths(proc_cgroup)
    if v2 is not None:
        limits = []
        for d in _ancestors(fs, v2):
            raw = _read(d / "memory.max")
            if raw and raw != "max" and raw.isdigit():
                limits.append((int(raw), d / "memory.max"))
        if limits:
            b, src = min(limits)
            return b / (1024 * 1024), f"cgroup v2 {src}"
    if v1 is not None:
        limits = []
        for d in _ancestors(fs / "memory", v1):
            raw = _read(d / "memory.limit_in_bytes")
            if raw and raw.isdigit() and int(raw) < UNLIMITED_BYTES:
                limits.append((int(raw), d / "memory.limit_in_bytes"))
        if limits:
            b, src = min(limits)
            return b / (1024 * 1024), f"cgroup v1 {src}"
    return None


def total_ram_mb() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1024 * 1024)
    except (ValueError, OSError, AttributeError):
        import psutil

        return float(psutil.virtual_memory().total) / (1024 * 1024)


def cgroup_cpu_quota(proc_cgroup: Path = PROC_CGROUP, fs: Path = CGROUP_FS) -> tuple[int, str] | None:
    """CPUs allowed by a cgroup v2 ``cpu.max`` quota (rounded up), or None."""
    v2, _ = _cgroup_paths(proc_cgroup)
    if v2 is None:
        return None
    for d in _ancestors(fs, v2):
        raw = _read(d / "cpu.max")
        if raw:
            quota, _, period = raw.partition(" ")
            if quota != "max" and quota.isdigit() and period.isdigit() and int(period) > 0:
                return max(1, math.ceil(int(quota) / int(period))), f"cgroup v2 {d / 'cpu.max'}"
    return None


def detect_cpus(proc_cgroup: Path = PROC_CGROUP, fs: Path = CGROUP_FS) -> tuple[int, str]:
    try:
        n, src = len(os.sched_getaffinity(0)), "CPUs this process may use (affinity)"
    except (AttributeError, OSError):
        n, src = os.cpu_count() or 1, "os.cpu_count()"
    quota = cgroup_cpu_quota(proc_cgroup, fs)
    if quota and quota[0] < n:
        return quota[0], f"{quota[1]} quota (affinity allows {n})"
    return n, src


def detect_budget(memory: str | float | None = None, workers: int | None = None,
                  cfg: Config | None = None, *, proc_cgroup: Path = PROC_CGROUP,
                  fs: Path = CGROUP_FS) -> Budget:
    """The Budget for this run: flags, else ``[tool.suitefit]``, else what the runner has."""
    if memory is not None:
        mb = parse_size_mb(memory, "--memory-budget")
        msrc = f"--memory-budget {fmt_mb(mb)}"
    elif cfg is not None and cfg.memory_budget_mb is not None:
        mb = cfg.memory_budget_mb
        msrc = f"[tool.suitefit] memory_budget {fmt_mb(mb)}"
    else:
        margin = cfg.memory_margin if cfg is not None else 0.10
        ram = total_ram_mb()
        lim = cgroup_memory_limit_mb(proc_cgroup, fs)
        if lim and lim[0] < ram:
            raw, src = lim
        else:
            raw, src = ram, "total RAM"
        mb = raw * (1 - margin)
        msrc = f"{src} {fmt_mb(raw)} minus {margin:.0%} margin"
    if not mb > 0:
        raise SuitefitError(f"memory budget must be positive, got {fmt_mb(mb)} ({msrc})")
    if workers is not None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise SuitefitError(f"--workers must be a positive integer, got {workers!r}")
        w: int | None = workers
        wsrc = f"--workers {workers}"
    elif cfg is not None and cfg.workers is not None:
        w = cfg.workers
        wsrc = f"[tool.suitefit] workers = {w}"
    else:
        w, wsrc = None, ""
    cpus, csrc = detect_cpus(proc_cgroup, fs)
    if wsrc:
        csrc += f"; workers pinned by {wsrc}"
    return Budget(memory_mb=mb, cpus=cpus, workers=w, memory_source=msrc, cpus_source=csrc)
