"""What a report shows, read from the history once: one ``RunView`` per run.

The HTML page, the Markdown summary and the compare view all render a ``RunView``;
none of them reads the history themselves, so every figure they print is traced
to a row here. Time bases differ in the history: ``samples.t`` is seconds since
``runs.started``, while tests, files and workers carry epoch seconds; this module
turns all of them into seconds since the run started.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from suitefit.errors import SuitefitError
from suitefit.history import (
    EventRecord,
    FileRecord,
    History,
    RunRecord,
    SampleRecord,
    TestRecord,
    WorkerRecord,
)
from suitefit.model import Plan
from suitefit.summary import FailedTest, failed_tests

MAX_POINTS = 2000  # timeline points drawn at most (min and max of each bucket)
EPOCH_FLOOR = 1e9  # an event time above this is epoch seconds, below it seconds since start
DRAWN = ("worker_died", "worker_down", "inflight")  # events marked on the memory timeline besides heartbeats
CRASH = DRAWN


@dataclass(frozen=True)
class Point:
    t: float  # seconds since the run started
    rss_mb: float
    pss_mb: float | None
    procs: int


@dataclass(frozen=True)
class TestSpan:
    """One test as a span on the run's clock, with the tree memory around it."""

    nodeid: str
    file: str
    worker: str
    start: float  # seconds since the run started
    wall_s: float
    cpu_s: float
    outcome: str
    tree_mb: float | None  # max summed tree RSS while it ran (the samples either side if none inside)

    @property
    def end(self) -> float:
        return self.start + self.wall_s


@dataclass(frozen=True)
class FileSpan:
    """One files row (a file on one worker) on the run's clock."""

    path: str
    worker: str
    start: float
    end: float
    wall_s: float
    cpu_s: float
    tests: int
    baseline_mb: float
    peak_mb: float
    peak_abs_mb: float


@dataclass(frozen=True)
class FileTotal:
    """A file over all the workers it ran on: summed time, the highest peak."""

    path: str
    workers: tuple[str, ...]
    tests: int
    wall_s: float
    cpu_s: float
    peak_mb: float  # above the worker's baseline, the highest over its workers
    peak_abs_mb: float


@dataclass(frozen=True)
class FixtureTotal:
    """A fixture over the workers that set it up, with the files that use it."""

    name: str
    scope: str
    setups: int  # how many times it was set up (once per worker and baseid)
    workers: tuple[str, ...]
    setup_s: float  # summed over its set-ups: what it cost the run
    max_setup_s: float
    teardown_s: float
    procs: int  # the most processes one set-up left running
    mb: float  # the most memory one set-up held
    files: tuple[str, ...]


@dataclass(frozen=True)
class Marker:
    """A moment worth a mark on the timeline: a heartbeat crossing, a death, an in-flight record."""

    t: float
    kind: str
    worker: str | None
    nodeid: str | None
    mb: float | None
    tests: tuple[str, ...]  # the tests the event names as in flight
    detail: Mapping[str, Any]

    def describe(self) -> str:
        parts = [f"{self.kind} at {self.t:.1f} s"]
        if self.mb is not None:
            parts.append(f"tree {self.mb:.0f} MiB")
        if self.worker:
            parts.append(f"worker {self.worker}")
        rest = text_of(self.detail)
        return ", ".join([*parts, rest] if rest else parts)


@dataclass(frozen=True)
class Crash:
    """Who died and what was in flight, from the workers table and the journal events."""

    dead_workers: tuple[WorkerRecord, ...]
    events: tuple[Marker, ...]
    inflight: tuple[tuple[str, str], ...]  # (worker, nodeid) named by the journal, in order
    run_status: str


@dataclass(frozen=True)
class UnitCheck:
    """One planned unit: what the plan predicted, what its files measured."""

    name: str
    files: tuple[str, ...]
    predicted_wall_s: float
    predicted_peak_mb: float
    wall_s: float | None  # summed wall of its files in this run (None: none of them ran)
    peak_mb: float | None
    planned_worker: str | None
    workers: tuple[str, ...]  # where its files actually ran
    reason: str


@dataclass(frozen=True)
class PlanCheck:
    plan: Plan
    wall_s: float | None  # what the plan predicts: the whole command, else the session
    peak_mb: float | None
    workers: int
    units: tuple[UnitCheck, ...]
    part: bool = False  # the run left files out or ran some in part: not the plan's whole


@dataclass
class RunView:
    """Everything one run's report shows, on the run's own clock."""

    run: RunRecord
    history_path: str
    points: list[Point]  # downsampled for drawing
    samples_total: int
    peak: Point | None
    duration_s: float
    workers: list[WorkerRecord]
    tests: list[TestSpan]
    files: list[FileSpan]
    file_totals: list[FileTotal]
    fixtures: list[FixtureTotal]
    heartbeats: list[Marker]
    markers: list[Marker]  # every other event drawn on the timeline
    peak_tests: list[TestSpan]  # in flight at the peak sample
    peak_files: list[FileSpan]
    crash: Crash | None
    plan: PlanCheck | None
    plan_error: str | None = None
    notes: list[str] = field(default_factory=list)
    leftovers: list[Marker] = field(default_factory=list)  # processes tests left running
    decisions: list[Marker] = field(default_factory=list)  # the scheduler's sched_* events
    failed: list[FailedTest] = field(default_factory=list)  # in the order they happened

    @property
    def budget_mb(self) -> float | None:
        return self.run.budget_mb if self.run.budget_mb is not None else self.run.threshold_mb

    @property
    def peak_rss_mb(self) -> float | None:
        if self.run.peak_rss_mb is not None:
            return self.run.peak_rss_mb
        return self.peak.rss_mb if self.peak else None

    @property
    def peak_pss_mb(self) -> float | None:
        if self.run.peak_pss_mb is not None:
            return self.run.peak_pss_mb
        known = [p.pss_mb for p in self.points if p.pss_mb is not None]
        return max(known) if known else None

    @property
    def peak_procs(self) -> int | None:
        if self.run.peak_procs is not None:
            return self.run.peak_procs
        return max((p.procs for p in self.points), default=None)

    def outcome_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.tests:
            out[t.outcome] = out.get(t.outcome, 0) + 1
        return out


# -- choosing the run -------------------------------------------------------------------------


def pick_run(history: History, run_id: int | None) -> RunRecord:
    """The asked run, or the newest one that ran the suite (a profile's calibration after it
    ran a slice: `suitefit profile && suitefit report` shows the profile); one clear line
    when there is none."""
    from suitefit.costs import CALIBRATION

    if run_id is not None:
        return history.run(run_id)
    runs = history.runs(limit=20)
    if not runs:
        raise SuitefitError(
            f"history {history.path} holds no runs: record one with `suitefit profile` "
            "or `pytest --suitefit` first"
        )
    return next((r for r in runs if r.kind != CALIBRATION), runs[0])


# -- building the view --------------------------------------------------------------------------


def load_view(history: History, run: RunRecord, *, max_points: int = MAX_POINTS) -> RunView:
    """Read one run's rows and derive what the report shows."""
    rid = run.id
    samples = history.samples(rid)
    tests_raw = history.tests(rid)
    files_raw = history.files(rid)
    workers = history.workers(rid)
    events = history.events(rid)
    t0 = run.started

    times = [s.t for s in samples]
    rmq = _RangeMax([s.rss_mb for s in samples])
    tests = sorted((_test_span(t, t0, times, rmq) for t in tests_raw), key=lambda s: (s.start, s.worker))
    files = [_file_span(f, t0) for f in files_raw]
    peak = _peak(samples)
    duration = _duration(run, samples, tests, files)

    markers = sorted((_marker(e, t0) for e in events), key=lambda m: m.t)
    heartbeats = [m for m in markers if m.kind == "heartbeat"]
    others = [m for m in markers if m.kind in DRAWN]
    leftovers = [m for m in markers if m.kind == "leftover"]
    decisions = [m for m in markers if m.kind.startswith("sched_")]

    peak_tests: list[TestSpan] = []
    peak_files: list[FileSpan] = []
    if peak is not None:
        peak_tests = [s for s in tests if s.start <= peak.t <= s.end]
        peak_files = [f for f in files if f.start <= peak.t <= f.end]

    view = RunView(
        run=run,
        history_path=str(history.path),
        points=downsample(samples, max_points),
        samples_total=len(samples),
        peak=peak,
        duration_s=duration,
        workers=workers,
        tests=tests,
        files=files,
        file_totals=file_totals(files),
        fixtures=_fixtures(history, rid),
        heartbeats=heartbeats,
        markers=others,
        peak_tests=peak_tests,
        peak_files=peak_files,
        crash=_crash(run, workers, others),
        plan=None,
        leftovers=leftovers,
        decisions=decisions,
    )
    view.failed = failed_tests(history, rid, t0)
    if run.plan:
        try:
            plan = Plan.from_json(json.loads(run.plan))
        except (ValueError, KeyError, TypeError) as e:
            view.plan_error = f"the run's plan could not be read ({type(e).__name__}: {e})"
        else:
            view.plan = _plan_check(plan, view)
    if not samples:
        view.notes.append("no memory samples were recorded for this run")
    return view


def downsample(samples: Sequence[SampleRecord], max_points: int = MAX_POINTS) -> list[Point]:
    """At most ``max_points`` points: each bucket keeps its lowest and highest sample.

    Keeping both extremes (in time order) means the drawn line still reaches every
    peak, which a plain stride would skip. PSS, read rarely, is kept wherever a kept
    sample has it, plus the highest PSS reading of each bucket.
    """
    pts = [Point(s.t, s.rss_mb, s.pss_mb, s.procs) for s in samples]
    if len(pts) <= max_points:
        return pts
    buckets = max(1, max_points // 2)
    size = len(pts) / buckets
    out: list[Point] = []
    for b in range(buckets):
        chunk = pts[int(b * size): int((b + 1) * size)]
        if not chunk:
            continue
        lo = min(chunk, key=lambda p: p.rss_mb)
        hi = max(chunk, key=lambda p: p.rss_mb)
        with_pss = [p for p in chunk if p.pss_mb is not None]
        keep = {id(lo): lo, id(hi): hi}
        if with_pss and not any(p.pss_mb is not None for p in keep.values()):
            best = max(with_pss, key=lambda p: p.pss_mb or 0.0)
            # carry the bucket's PSS on the high point rather than adding a third point
            keep[id(hi)] = Point(hi.t, hi.rss_mb, best.pss_mb, hi.procs)
        out.extend(sorted(keep.values(), key=lambda p: p.t))
    return out


def file_totals(files: Iterable[FileSpan]) -> list[FileTotal]:
    acc: dict[str, list[FileSpan]] = {}
    for f in files:
        acc.setdefault(f.path, []).append(f)
    out = []
    for path, rows in acc.items():
        out.append(
            FileTotal(
                path=path,
                workers=tuple(sorted({r.worker for r in rows})),
                tests=sum(r.tests for r in rows),
                wall_s=sum(r.wall_s for r in rows),
                cpu_s=sum(r.cpu_s for r in rows),
                peak_mb=max(r.peak_mb for r in rows),
                peak_abs_mb=max(r.peak_abs_mb for r in rows),
            )
        )
    return out


def rel_time(t: float, t0: float) -> float:
    """An event time on the run's clock: epoch seconds are shifted, relative ones kept."""
    return t - t0 if t > EPOCH_FLOOR else t


# -- helpers ----------------------------------------------------------------------------------


class _RangeMax:
    """Sparse table: the max of any slice of the sample series in O(1)."""

    def __init__(self, values: Sequence[float]) -> None:
        self.levels: list[list[float]] = [list(values)]
        k = 1
        while (1 << k) <= len(values):
            prev = self.levels[-1]
            half = 1 << (k - 1)
            self.levels.append([max(prev[i], prev[i + half]) for i in range(len(values) - (1 << k) + 1)])
            k += 1

    def query(self, lo: int, hi: int) -> float | None:
        """Max over values[lo:hi]."""
        if hi <= lo:
            return None
        k = (hi - lo).bit_length() - 1
        row = self.levels[k]
        return max(row[lo], row[hi - (1 << k)])


def _test_span(t: TestRecord, t0: float, times: Sequence[float], rmq: _RangeMax) -> TestSpan:
    start = t.started - t0
    end = start + t.wall_s
    tree: float | None = None
    if times:
        lo, hi = bisect_left(times, start), bisect_right(times, end)
        if hi <= lo:  # no sample fell inside a short test: take the ones either side of it
            lo, hi = max(0, lo - 1), min(len(times), hi + 1)
        tree = rmq.query(lo, hi)
    return TestSpan(t.nodeid, t.file, t.worker, start, t.wall_s, t.cpu_s, t.outcome, tree)


def _file_span(f: FileRecord, t0: float) -> FileSpan:
    return FileSpan(
        f.path, f.worker, f.started - t0, f.finished - t0, f.wall_s, f.cpu_s, f.tests,
        f.baseline_mb, f.peak_mb, f.peak_abs_mb,
    )


def _peak(samples: Sequence[SampleRecord]) -> Point | None:
    if not samples:
        return None
    s = max(samples, key=lambda s: s.rss_mb)
    return Point(s.t, s.rss_mb, s.pss_mb, s.procs)


def _duration(run: RunRecord, samples: Sequence[SampleRecord], tests: Sequence[TestSpan],
              files: Sequence[FileSpan]) -> float:
    ends = [0.0]
    if run.wall_s is not None:
        ends.append(run.wall_s)
    if run.finished is not None:
        ends.append(run.finished - run.started)
    if samples:
        ends.append(samples[-1].t)
    ends.extend(t.end for t in tests)
    ends.extend(f.end for f in files)
    d = max(ends)
    return d if d > 0 and math.isfinite(d) else 1.0


def _marker(e: EventRecord, t0: float) -> Marker:
    try:
        detail = e.detail_dict
    except (ValueError, TypeError):
        detail = {"raw": e.detail}
    mb = None
    for key in ("tree_mb", "rss_mb", "mb", "memory_mb"):
        v = detail.get(key)
        if isinstance(v, (int, float)):
            mb = float(v)
            break
    return Marker(rel_time(e.t, t0), e.kind, e.worker, e.nodeid, mb, _named_tests(e, detail), detail)


def _named_tests(e: EventRecord, detail: Mapping[str, Any]) -> tuple[str, ...]:
    """The node ids an event names, whatever shape its detail took (list, mapping or one)."""
    names: list[str] = []
    if e.nodeid:
        names.append(e.nodeid)
    for key in ("tests", "inflight", "in_flight", "nodeids", "nodeid", "test"):
        v = detail.get(key)
        if isinstance(v, str):
            names.append(v)
        elif isinstance(v, Mapping):
            names.extend(str(x) for x in v.values() if isinstance(x, str))
            for x in v.values():
                if isinstance(x, (list, tuple)):
                    names.extend(str(y) for y in x if isinstance(y, str))
        elif isinstance(v, (list, tuple)):
            for x in v:
                if isinstance(x, str):
                    names.append(x)
                elif isinstance(x, Mapping) and isinstance(x.get("nodeid"), str):
                    names.append(x["nodeid"])
    # "no test (between tests)" and the like say that nothing was in flight
    return tuple(dict.fromkeys(n for n in names if n and not n.startswith("no test")))


def _fixtures(history: History, run_id: int) -> list[FixtureTotal]:
    shared = history.fixture_files(run_id)
    acc: dict[str, list[Any]] = {}
    for f in history.fixtures(run_id):
        acc.setdefault(f.name, []).append(f)
    out = []
    for name, rows in acc.items():
        out.append(
            FixtureTotal(
                name=name,
                scope=rows[0].scope,
                setups=len(rows),
                workers=tuple(sorted({r.worker for r in rows})),
                setup_s=sum(r.setup_s for r in rows),
                max_setup_s=max(r.setup_s for r in rows),
                teardown_s=sum(r.teardown_s or 0.0 for r in rows),
                procs=max(r.procs for r in rows),
                mb=max(r.mb for r in rows),
                files=tuple(shared.get(name, ())),
            )
        )
    for name, files in shared.items():  # used by files but never timed: still worth naming
        if name not in acc:
            out.append(FixtureTotal(name, "?", 0, (), 0.0, 0.0, 0.0, 0, 0.0, tuple(files)))
    out.sort(key=lambda x: (x.setup_s + x.teardown_s, x.mb), reverse=True)
    return out


def _crash(run: RunRecord, workers: Sequence[WorkerRecord], markers: Sequence[Marker]) -> Crash | None:
    dead = tuple(w for w in workers if w.status == "died")
    evs = tuple(m for m in markers if m.kind in CRASH)
    if not dead and not evs and run.status != "crashed":
        return None
    inflight: dict[tuple[str, str], None] = {}
    for m in evs:
        for n in m.tests:
            inflight[(m.worker or "?", n)] = None
    for w in dead:
        if w.detail:
            try:
                d = json.loads(w.detail)
            except ValueError:
                continue
            if isinstance(d, dict):
                for n in _named_tests(EventRecord(None, run.id, 0.0, "", w.worker, None, "{}"), d):
                    inflight[(w.worker, n)] = None
    return Crash(dead, evs, tuple(inflight), run.status)


def _plan_check(plan: Plan, view: RunView) -> PlanCheck:
    by_file = {f.path: f for f in view.file_totals}
    placed: dict[str, str] = {}
    for worker, names in plan.placement.items():
        for name in names:
            placed[name] = worker
    units: list[UnitCheck] = []
    for u in plan.units:
        ran = [by_file[f] for f in u.files if f in by_file]
        units.append(
            UnitCheck(
                name=u.name,
                files=u.files,
                predicted_wall_s=u.wall_s,
                predicted_peak_mb=u.peak_mb,
                wall_s=sum(f.wall_s for f in ran) if ran else None,
                peak_mb=max(f.peak_mb for f in ran) if ran else None,
                planned_worker=placed.get(u.name),
                workers=tuple(sorted({w for f in ran for w in f.workers})),
                reason=u.reason,
            )
        )
    run = view.run
    # the plan predicts the whole command (from `suitefit run` to its exit), which the run
    # records at exit; its session alone leaves out the start and the end
    command = run.meta_dict.get("command_wall_s")
    return PlanCheck(
        plan=plan,
        wall_s=float(command) if isinstance(command, (int, float)) else run.wall_s,
        peak_mb=view.peak_rss_mb,
        workers=run.workers or len(view.workers),
        units=tuple(units),
        part=bool(run.meta_dict.get("part_of_plan")),
    )


SHOWN_APART = {"tree_mb", "rss_mb", "mb", "memory_mb", "tests", "inflight", "in_flight", "nodeids", "nodeid", "test"}


def text_of(detail: Mapping[str, Any]) -> str:
    """A compact one-line rendering of an event's detail (what other columns do not show)."""
    def show(v: Any) -> str:
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    return ", ".join(f"{k}={show(v)}" for k, v in detail.items()
                     if k not in SHOWN_APART and not isinstance(v, (list, dict)))


# -- two runs side by side ----------------------------------------------------------------------


@dataclass(frozen=True)
class FileDelta:
    """One file in two runs; ``None`` where it did not run."""

    path: str
    wall_a: float | None
    wall_b: float | None
    peak_a: float | None
    peak_b: float | None
    tests_a: int
    tests_b: int

    @property
    def wall_delta(self) -> float | None:
        if self.wall_a is None or self.wall_b is None:
            return None
        return self.wall_b - self.wall_a

    @property
    def peak_delta(self) -> float | None:
        if self.peak_a is None or self.peak_b is None:
            return None
        return self.peak_b - self.peak_a


def file_deltas(a: RunView, b: RunView) -> list[FileDelta]:
    """Every file of either run, the biggest change of wall time first, one-sided ones last."""
    fa = {f.path: f for f in a.file_totals} or _totals_from_tests(a.tests)
    fb = {f.path: f for f in b.file_totals} or _totals_from_tests(b.tests)
    out = []
    for path in sorted(set(fa) | set(fb)):
        x, y = fa.get(path), fb.get(path)
        out.append(FileDelta(
            path,
            x.wall_s if x else None, y.wall_s if y else None,
            x.peak_mb if x and a.file_totals else None, y.peak_mb if y and b.file_totals else None,
            x.tests if x else 0, y.tests if y else 0,
        ))
    out.sort(key=lambda d: (d.wall_delta is None, -abs(d.wall_delta or 0.0), d.path))
    return out


def _totals_from_tests(tests: Sequence[TestSpan]) -> dict[str, FileTotal]:
    acc: dict[str, list[TestSpan]] = {}
    for t in tests:
        acc.setdefault(t.file, []).append(t)
    return {
        p: FileTotal(p, tuple(sorted({t.worker for t in ts})), len(ts), sum(t.wall_s for t in ts),
                     sum(t.cpu_s for t in ts), 0.0, 0.0)
        for p, ts in acc.items()
    }
