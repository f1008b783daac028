"""Turns pytest events into history rows: one recorder per worker, one per run.

``WorkerRecorder`` lives in every process that runs tests (each xdist worker, or
the only process without xdist): tests, per-file peaks, fixtures, the worker row.
``RunRecorder`` lives in the process that started the session: the run row and
the whole-tree timeline. Without xdist one process holds both.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import pytest

from suitefit import timing
from suitefit.history import (
    FileRecord,
    FixtureRecord,
    History,
    SampleRecord,
    TestRecord,
    WorkerRecord,
)
from suitefit.measure import proctree
from suitefit.measure.sampler import Sample, TreeSampler

TRACKED_SCOPES = ("session", "package", "module", "class")


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


@dataclass
class _Segment:
    """A stretch of consecutive tests from one file on this worker."""

    path: str
    started: float
    cpu0: float
    baseline_mb: float
    peak_mb: float
    children_mb: float  # RSS of the worker's descendants when the file started
    tests: int = 0


@dataclass
class _Phases:
    setup_s: float = 0.0
    call_s: float = 0.0
    teardown_s: float = 0.0
    outcome: str = "passed"
    reason: str | None = None  # the first failing phase's crash line


REASON_CHARS = 300


def short_reason(report: Any) -> str | None:
    """A failure's one line, as pytest's short summary shows it: the crash line, else the last line.

    Only read for failures, from the representation pytest has already built: no cost
    to a passing test.
    """
    lr = getattr(report, "longrepr", None)
    if lr is None:
        return None
    crash = getattr(lr, "reprcrash", None)
    text = getattr(crash, "message", None) if crash is not None else None
    if not text:
        if isinstance(lr, tuple) and len(lr) == 3:  # (path, line, message): skips, some plugins
            text = str(lr[2])
        else:
            lines = [ln.strip() for ln in str(lr).splitlines() if ln.strip()]
            errs = [ln for ln in lines if ln.startswith("E ")]
            text = (errs[-1][1:].strip() if errs else lines[-1]) if lines else ""
    first = next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")
    if not first:
        return None
    if report.when in ("setup", "teardown"):
        first = f"in {report.when}: {first}"
    return first if len(first) <= REASON_CHARS else first[: REASON_CHARS - 1] + "…"


def outcome_of(phases: _Phases, report: pytest.TestReport) -> str:
    """Fold one phase report into the test's outcome (error beats failed beats skipped)."""
    if report.when == "call":
        if hasattr(report, "wasxfail"):
            return "xfailed" if report.skipped else "xpassed"
        return report.outcome
    if report.failed:
        return "error"
    if report.skipped and report.when == "setup":
        return "xfailed" if hasattr(report, "wasxfail") else "skipped"
    return phases.outcome


@dataclass
class _FixtureState:
    rec: FixtureRecord
    teardown_started: float | None = None


@dataclass(eq=False)
class WorkerRecorder:
    history: History
    run_id: int
    worker: str
    sampler: TreeSampler
    flush_every: int = 200
    pid: int = field(default_factory=os.getpid)
    reap_grace_s: float | None = None  # when set: name and end processes left behind at the end

    def __post_init__(self) -> None:
        self._seq = 0
        self._seg: _Segment | None = None
        self._tests: list[TestRecord] = []
        self._file_rows: dict[str, FileRecord] = {}
        self._dirty: set[str] = set()
        self._phases: dict[str, _Phases] = {}
        self._fixtures: dict[tuple[str, str], _FixtureState] = {}
        self._first_test: float | None = None
        self._baseline_mb: float | None = None
        self._peak_mb = 0.0
        self._current: str | None = None
        self._current_since = 0.0
        self._finished = False
        self._fixture_now: str | None = None
        self.started_by: dict[int, str] = {}  # pid -> the test or fixture that started it
        self.leftovers: list[Any] = []
        self.on_test_start: list[Any] = []  # callables(nodeid, wall, tree_mb): the journal
        self.sampler.subscribe(self._on_sample)
        self._started = proctree.create_time(self.pid)

    # -- sampling -----------------------------------------------------------------------

    def _on_sample(self, s: Sample) -> None:
        self._peak_mb = max(self._peak_mb, s.rss_mb)
        seg = self._seg
        if seg is not None and s.rss_mb > seg.peak_mb:
            seg.peak_mb = s.rss_mb

    @property
    def current(self) -> tuple[str | None, float]:
        return self._current, self._current_since

    # -- hooks --------------------------------------------------------------------------

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        pairs: set[tuple[str, str]] = set()
        for item in session.items:
            info = getattr(item, "_fixtureinfo", None)
            if info is None:
                continue
            path = file_of(item.nodeid)
            for name in getattr(item, "fixturenames", ()):
                defs = info.name2fixturedefs.get(name)
                if defs and defs[-1].scope in TRACKED_SCOPES:
                    pairs.add((name, path))
        self.history.add_fixture_files(self.run_id, sorted(pairs))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
        path = file_of(item.nodeid)
        now = timing.wall()
        if self._seg is None or self._seg.path != path:
            self._close_segment()
            self._open_segment(path, now)
        assert self._seg is not None
        self._current, self._current_since = item.nodeid, now
        for cb in self.on_test_start:
            cb(item.nodeid, now, self.sampler.last.rss_mb if self.sampler.last else None)
        cpu0 = timing.cpu_seconds()
        t0 = timing.perf_counter()
        before = set(proctree.tree(self.pid)) if self.reap_grace_s is not None else None
        try:
            return (yield)
        finally:
            if before is not None:
                for p in proctree.tree(self.pid):
                    if p not in before:
                        self.started_by.setdefault(p, item.nodeid)
            wall = timing.perf_counter() - t0
            cpu = timing.cpu_seconds() - cpu0
            ph = self._phases.pop(item.nodeid, _Phases())
            self._tests.append(
                TestRecord(self.run_id, item.nodeid, path, self.worker, self._seq, now,
                           ph.setup_s, ph.call_s, ph.teardown_s, wall, cpu, ph.outcome, ph.reason)
            )
            self._seq += 1
            self._seg.tests += 1
            self._current = None
            if nextitem is None or file_of(nextitem.nodeid) != path:
                self._close_segment()
            elif len(self._tests) >= self.flush_every:
                self.flush()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        ph = self._phases.setdefault(report.nodeid, _Phases())
        setattr(ph, f"{report.when}_s", getattr(ph, f"{report.when}_s") + report.duration)
        ph.outcome = outcome_of(ph, report)
        if report.failed and ph.reason is None:
            ph.reason = short_reason(report)

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: Any, request: Any) -> Generator[None, Any, Any]:
        scope = fixturedef.scope
        if scope not in TRACKED_SCOPES:
            return (yield)
        before = set(proctree.tree(self.pid))
        self_before = proctree.rss_mb(self.pid)
        self._fixture_now = fixturedef.argname
        t0 = timing.perf_counter()
        try:
            return (yield)
        finally:
            setup_s = timing.perf_counter() - t0
            self._fixture_now = None
            new = [p for p in proctree.tree(self.pid) if p not in before]
            for p in new:
                self.started_by.setdefault(p, f"fixture {fixturedef.argname}")
            procs = [p for p in new if proctree.rss_mb(p) > 0]
            mb = proctree.sum_rss_mb(procs) + max(0.0, proctree.rss_mb(self.pid) - self_before)
            key = (fixturedef.argname, str(fixturedef.baseid))
            rec = FixtureRecord(self.run_id, self.worker, fixturedef.argname, scope,
                                str(fixturedef.baseid), setup_s, None, len(procs), mb)
            prev = self._fixtures.get(key)
            if prev is not None:  # set up again (parametrized): keep the costlier setup
                rec.setup_s = max(rec.setup_s, prev.rec.setup_s)
                rec.procs = max(rec.procs, prev.rec.procs)
                rec.mb = max(rec.mb, prev.rec.mb)
            state = _FixtureState(rec)
            self._fixtures[key] = state

            def _teardown_begins() -> None:
                state.teardown_started = timing.perf_counter()

            fixturedef.addfinalizer(_teardown_begins)

    def pytest_fixture_post_finalizer(self, fixturedef: Any, request: Any) -> None:
        state = self._fixtures.get((fixturedef.argname, str(fixturedef.baseid)))
        if state is not None and state.teardown_started is not None:
            state.rec.teardown_s = (state.rec.teardown_s or 0.0) + timing.perf_counter() - state.teardown_started
            state.teardown_started = None

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self._close_segment()
        self.finish()

    # -- segments and flushing ------------------------------------------------------------

    def _open_segment(self, path: str, now: float) -> None:
        s = self.sampler.sample_now()
        if self._first_test is None:
            self._first_test = now
            self._baseline_mb = s.rss_mb
        proctree.reset_hwm()
        self._seg = _Segment(path, now, timing.cpu_seconds(), s.rss_mb, s.rss_mb, s.rss_mb - s.root_mb)

    def _close_segment(self) -> None:
        seg = self._seg
        if seg is None:
            return
        self._seg = None
        end = self.sampler.sample_now()
        hwm = proctree.hwm_mb()
        peak = max(seg.peak_mb, end.rss_mb)
        if hwm is not None:
            # This process's exact peak plus the children that were there when the file
            # started (a session pool); children the file started itself are in the samples.
            # Not the children at the end: the last file's teardown may have stopped them.
            peak = max(peak, hwm + seg.children_mb)
        self._peak_mb = max(self._peak_mb, peak)
        now = timing.wall()
        self._add_file_row(
            FileRecord(self.run_id, seg.path, self.worker, seg.started, now, now - seg.started,
                       timing.cpu_seconds() - seg.cpu0, seg.tests, seg.baseline_mb,
                       max(0.0, peak - seg.baseline_mb), peak)
        )
        self.flush()

    def _add_file_row(self, r: FileRecord) -> None:
        """A file run in several stretches on one worker stays one row (summed time, max peak)."""
        m = self._file_rows.get(r.path)
        if m is None:
            self._file_rows[r.path] = r
        else:
            m.started = min(m.started, r.started)
            m.finished = max(m.finished, r.finished)
            m.wall_s += r.wall_s
            m.cpu_s += r.cpu_s
            m.tests += r.tests
            if r.peak_mb > m.peak_mb:
                m.peak_mb, m.baseline_mb, m.peak_abs_mb = r.peak_mb, r.baseline_mb, r.peak_abs_mb
        self._dirty.add(r.path)

    def flush(self) -> None:
        if self._tests:
            self.history.add_tests(self._tests)
            self._tests = []
        if self._dirty:
            self.history.add_files([self._file_rows[p] for p in sorted(self._dirty)])
            self._dirty.clear()

    def reap_leftovers(self, grace_s: float) -> None:
        """Name the processes this worker's tests left running, then end them after ``grace_s``."""
        from suitefit.measure import reaper

        pids = reaper.leftovers_under(self.pid)
        if not pids:
            return
        found = reaper.describe(pids, self.started_by)
        fate = reaper.reap([x.pid for x in found], grace_s)
        for x in found:
            self.leftovers.append(x)
            self.history.add_event(self.run_id, timing.wall(), "leftover", worker=self.worker,
                                   nodeid=x.started_by, pid=x.pid, cmdline=x.cmdline[:300],
                                   fate=fate.get(x.pid, "?"))

    def finish(self) -> None:
        if self._finished:
            return
        self._finished = True
        self._close_segment()
        self.flush()
        if self.reap_grace_s is not None:
            self.reap_leftovers(self.reap_grace_s)
        if self._fixtures:
            self.history.add_fixtures([s.rec for s in self._fixtures.values()])
        startup = None
        if self._first_test is not None and self._started is not None:
            startup = self._first_test - self._started
        self.history.upsert_worker(
            WorkerRecord(self.run_id, self.worker, self.pid, self._started, self._first_test,
                         startup, self._baseline_mb, self._peak_mb or None, self._seq)
        )


@dataclass(eq=False)
class RunRecorder:
    """Owns the run row and the whole-tree timeline; flushes samples from the sampler thread."""

    history_path: str
    run_id: int
    sampler: TreeSampler
    threshold_mb: float | None
    started_wall: float
    flush_interval: float = 2.0

    def __post_init__(self) -> None:
        self._buf: list[SampleRecord] = []
        self._last_flush = timing.monotonic()
        self._writer: History | None = None
        self.peak_rss = 0.0
        self.peak_pss: float | None = None
        self.peak_procs = 0
        self.secs_above = 0.0
        self._prev_t: float | None = None
        self.sampler.subscribe(self._on_sample)

    def _on_sample(self, s: Sample) -> None:
        t = s.wall - self.started_wall
        self._buf.append(SampleRecord(self.run_id, round(t, 4), s.rss_mb, s.pss_mb, s.procs))
        self.peak_rss = max(self.peak_rss, s.rss_mb)
        self.peak_procs = max(self.peak_procs, s.procs)
        if s.pss_mb is not None:
            self.peak_pss = max(self.peak_pss or 0.0, s.pss_mb)
        if self._prev_t is not None and self.threshold_mb and s.rss_mb > self.threshold_mb:
            self.secs_above += s.t - self._prev_t
        self._prev_t = s.t
        if s.t - self._last_flush >= self.flush_interval:
            self._flush()

    def _flush(self) -> None:
        if not self._buf:
            return
        if self._writer is None:  # the sampler thread's own connection
            self._writer = History(self.history_path)
        rows, self._buf = self._buf, []
        self._writer.add_samples(rows)
        self._last_flush = timing.monotonic()

    def stop(self) -> None:
        self.sampler.stop()
        self._flush()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
