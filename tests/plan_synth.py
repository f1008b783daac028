"""Synthetic histories for the planner's tests, written through the real History API."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from suitefit.history import FileRecord, FixtureRecord, History, TestRecord, WorkerRecord


@dataclass
class SynthFile:
    path: str
    wall_s: float
    peak_mb: float = 20.0
    tests: int = 2
    fixtures: tuple[str, ...] = ()
    sys_s: float | None = None  # of its wall (all CPU here), the kernel's; None: not recorded
    own_mb: float | None = None  # of its peak, its worker's own (not children's); None: not known


@dataclass
class SynthFixture:
    name: str
    setup_s: float
    procs: int = 0
    mb: float = 0.0
    scope: str = "session"


@dataclass
class SynthRun:
    placement: Mapping[str, Sequence[str]]  # worker -> files in order
    files: Mapping[str, SynthFile]
    fixtures: Sequence[SynthFixture] = ()
    startup_s: float = 1.5
    baseline_mb: float = 120.0
    kind: str = "profile"
    peak_rss_mb: float | None = None
    scale: float = 1.0  # multiply every wall time (run-to-run noise)
    extra: dict[str, float] = field(default_factory=dict)


def write_run(h: History, run: SynthRun, started: float = 1_000_000.0) -> int:
    """One finished run; a fixture's setup and memory land on the first file using it per worker."""
    n_workers = len(run.placement)
    run_id = h.new_run(run.kind, started=started, workers=0 if n_workers == 1 else n_workers)
    fx = {f.name: f for f in run.fixtures}
    tests: list[TestRecord] = []
    files: list[FileRecord] = []
    fixtures: list[FixtureRecord] = []
    wall_total = 0.0
    for worker, paths in run.placement.items():
        t = started + run.startup_s
        held: set[str] = set()
        seq = 0
        h.upsert_worker(WorkerRecord(run_id, worker, 1000 + seq, started, t, run.startup_s,
                                     run.baseline_mb, None, 0))
        for p in paths:
            sf = run.files[p]
            wall = sf.wall_s * run.scale
            peak = sf.peak_mb
            for name in sf.fixtures:
                if name in fx and name not in held:
                    held.add(name)
                    wall += fx[name].setup_s
                    peak += fx[name].mb
                    fixtures.append(FixtureRecord(run_id, worker, name, fx[name].scope, "",
                                                  fx[name].setup_s, 0.0, fx[name].procs, fx[name].mb))
            for i in range(sf.tests):
                tests.append(TestRecord(run_id, f"{p}::test_{i}", p, worker, seq, t + i * wall / sf.tests, 0.0,
                                        wall / sf.tests, 0.0, wall / sf.tests, wall / sf.tests,
                                        "passed"))
                seq += 1
            files.append(FileRecord(run_id, p, worker, t, t + wall, wall, wall, sf.tests,
                                    run.baseline_mb, peak, run.baseline_mb + peak,
                                    None if sf.sys_s is None else sf.sys_s * run.scale, sf.own_mb))
            t += wall
        wall_total = max(wall_total, t - started)
    h.add_tests(tests)
    h.add_files(files)
    h.add_fixtures(fixtures)
    h.add_fixture_files(run_id, [(n, f.path) for f in run.files.values() for n in f.fixtures])
    h.update_run(run_id, status="passed", exit_code=0, finished=started + wall_total,
                 wall_s=wall_total, collected=len(tests), peak_rss_mb=run.peak_rss_mb)
    return run_id


def write_history(path: Path, runs: Sequence[SynthRun]) -> Path:
    with History(path) as h:
        for i, r in enumerate(runs):
            write_run(h, r, started=1_000_000.0 + 1000 * i)
    return path


def pool_suite(n_files: int = 12, pool_files: int = 4) -> tuple[dict[str, SynthFile], list[SynthFixture]]:
    """A suite where ``pool_files`` files share an expensive session pool; one file is a hog."""
    files = {}
    for i in range(n_files):
        p = f"tests/test_{i:02d}.py"
        files[p] = SynthFile(p, wall_s=0.5 + (i % 5) * 0.4, peak_mb=800.0 if i == n_files - 1 else 20.0,
                             fixtures=("pool",) if i < pool_files else ())
    return files, [SynthFixture("pool", setup_s=2.0, procs=3, mb=300.0)]
