"""Budget detection against fake cgroup trees on disk, and the order of overrides."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from suitefit.budget import cgroup_memory_limit_mb, detect_budget, detect_cpus, total_ram_mb
from suitefit.config import load_config
from suitefit.errors import SuitefitError

GiB = 1024 ** 3


def _v2(tmp_path: Path, limits: dict[str, str], rel: str = "/ci/job") -> tuple[Path, Path]:
    proc = tmp_path / "cgroup"
    proc.write_text(f"0::{rel}\n")
    fs = tmp_path / "fs"
    for sub, value in limits.items():
        d = fs / sub if sub else fs
        d.mkdir(parents=True, exist_ok=True)
        (d / "memory.max").write_text(value + "\n")
    return proc, fs


def test_v2_takes_the_tightest_limit_up_the_tree(tmp_path: Path) -> None:
    proc, fs = _v2(tmp_path, {"ci": str(4 * GiB), "ci/job": "max"})
    mb, src = cgroup_memory_limit_mb(proc, fs)  # type: ignore[misc]
    assert mb == pytest.approx(4096.0)
    assert "cgroup v2" in src and str(fs / "ci" / "memory.max") in src


def test_v2_unlimited_is_none(tmp_path: Path) -> None:
    proc, fs = _v2(tmp_path, {"": "max", "ci/job": "max"})
    assert cgroup_memory_limit_mb(proc, fs) is None


def test_v1_limit_and_unlimited(tmp_path: Path) -> None:
    proc = tmp_path / "cgroup"
    proc.write_text("4:memory:/docker/abc\n0::/\n")
    fs = tmp_path / "fs"
    d = fs / "memory" / "docker" / "abc"
    d.mkdir(parents=True)
    (d / "memory.limit_in_bytes").write_text(str(2 * GiB))
    (fs / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712")
    mb, src = cgroup_memory_limit_mb(proc, fs)  # type: ignore[misc]
    assert mb == pytest.approx(2048.0) and "cgroup v1" in src
    (d / "memory.limit_in_bytes").write_text("9223372036854771712")
    assert cgroup_memory_limit_mb(proc, fs) is None


def test_detected_budget_applies_margin_and_names_source(tmp_path: Path) -> None:
    proc, fs = _v2(tmp_path, {"ci/job": str(8 * GiB)})
    (tmp_path / "pyproject.toml").write_text("[tool.suitefit]\nmemory_margin = 0.25\n")
    b = detect_budget(cfg=load_config(tmp_path), proc_cgroup=proc, fs=fs)
    limit = min(8192.0, total_ram_mb())
    assert b.memory_mb == pytest.approx(limit * 0.75)
    assert "minus 25% margin" in b.memory_source
    assert b.cpus == len(os.sched_getaffinity(0)) and "affinity" in b.cpus_source
    assert b.workers is None


def test_flags_beat_config_beat_detection(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.suitefit]\nmemory_budget = "3GiB"\nworkers = 3\n')
    cfg = load_config(tmp_path)
    b = detect_budget(cfg=cfg)
    assert (b.memory_mb, b.workers) == (3072.0, 3)
    assert "[tool.suitefit] memory_budget" in b.memory_source and "workers = 3" in b.cpus_source
    b = detect_budget("6GiB", 2, cfg)
    assert (b.memory_mb, b.workers) == (6144.0, 2)
    assert b.memory_source.startswith("--memory-budget")


def test_cpu_quota_caps_affinity(tmp_path: Path) -> None:
    proc, fs = _v2(tmp_path, {"ci/job": "max"})
    (fs / "ci" / "job" / "cpu.max").write_text("50000 100000\n")
    n, src = detect_cpus(proc, fs)
    assert n == 1 and ("quota" in src or len(os.sched_getaffinity(0)) == 1)


@pytest.mark.parametrize(("memory", "workers", "match"), [
    ("lots", None, "not a size"),
    ("0MiB", None, "must be positive"),
    (None, 0, "positive integer"),
])
def test_bad_overrides_are_one_line_errors(memory: str | None, workers: int | None, match: str) -> None:
    with pytest.raises(SuitefitError, match=match):
        detect_budget(memory, workers)
