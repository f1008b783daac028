"""Turns pytest events in a process that runs tests into history rows and sampler messages.

``WorkerRecorder`` lives in every process that runs tests (each xdist worker, or the
only process without xdist). It does only what cannot be done from outside, on the
test's own thread, in hooks pytest calls anyway: per-test timing and outcome
(buffered, written in batches by size or time), the VmHWM reset and read at each
file's start and end, fixture set-up cost, and one line to the sampler process per
file (``channel.py``). Memory over time, per-file peaks of the worker's whole tree and
the ``files`` rows are the sampler process's (``watcher.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from suitefit import kept, timing
from suitefit.history import FixtureRecord, History, WorkerRecord
from suitefit.measure import proctree
from suitefit.measure.channel import Sender

TRACKED_SCOPES = ("session", "package", "module", "class")


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def autouse_names(item: pytest.Item, info: Any) -> set[str]:
    """The fixtures ``item`` gets without asking: neither its arguments nor a usefixtures mark.

    pytest (8.0 to 9.x) builds ``initialnames`` as autouse + usefixtures + arguments; the
    difference is what is autouse for this item (ini ``usefixtures`` counts too: it is
    requested for every test alike). A fixture a test both gets autouse and names as an
    argument is caught by any other test that does not name it.
    """
    others = [n for n in info.initialnames if n not in info.argnames]
    if not others:  # only its arguments: nothing autouse (and no markers to walk, per item)
        return set()
    asked = set(info.argnames)
    for mark in item.iter_markers("usefixtures"):
        asked.update(mark.args)
    return {n for n in others if n not in asked}


@dataclass
class _Segment:
    """A stretch of consecutive tests from one file on this worker."""

    path: str
    started: float  # epoch
    t0: float  # monotonic
    cpu0: float
    sys0: float = 0.0  # system CPU (the kernel's: page faults above all) at its start
    tests: int = 0
    # the path object pytest gave this file's first item: the items of one file share it,
    # so "same file as the last test?" is an identity test, not a nodeid read and a split
    node_path: Any = None


# A test's phases while it runs, folded from its reports: [setup_s, call_s, teardown_s,
# outcome, reason (the first failing phase's crash line)]. A list, not an object: this is
# per test, three times (50,000 tests: 150,000 reports). The per-test path builds the
# literal itself: every Python call there is paid 50,000 times (benchmarks/README.md,
# "per-test cost", counts the instructions).
_PHASE = {"setup": 0, "call": 1, "teardown": 2}
_OUTCOME, _REASON = 3, 4
TICK_S = 0.1  # how often the per-test path looks at the clock's business (progress, late rows)


def _new_phases() -> list[Any]:
    return [0.0, 0.0, 0.0, "passed", None]


REASON_CHARS = 300
# How long a process a file's tests started must outlive that file to count as kept (a pool),
# not as a subprocess ending a moment late (a `sleep 0.2` outlived a 10 ms next file, and under
# load, the session's end right after its file: CI counted its file as a pool user); at the
# session's end, how long it must have lived
KEPT_AFTER_S = 0.5


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


def partial_files(session: pytest.Session, deselected: set[str]) -> set[str]:
    """The files this run selected only some tests of: some were deselected (``-k``, ``-m``,
    ``--deselect``, ``--lf``), or a node id named its tests (``FILE::TEST``). Their times
    here are not their files' times, which the next plans read (``costs``). Whole files
    left out (a shard's, a calibration's slice) ran nothing and are not partial."""
    narrowed = {os.path.abspath(os.path.join(session.config.invocation_params.dir, a.split("::", 1)[0]))
                for a in session.config.args if "::" in a}
    if not deselected and not narrowed:  # the usual run: no pass over the items
        return set()
    out: set[str] = set()
    for item in session.items:
        f = file_of(item.nodeid)
        if f in deselected or (narrowed and str(item.path) in narrowed):
            out.add(f)
    return out


def xdist_groups(items: Sequence[pytest.Item]) -> set[tuple[str, str]]:
    """(group name, file) of the items marked ``xdist_group``, the closest mark as xdist reads
    it (its ``name`` or first argument). An item's own marks, then its parents' read once:
    ~0.5 µs an item, where ``get_closest_marker`` walked every item's parents again (1.5 µs)."""
    cache: dict[int, str | None] = {}  # a parent's (module, class): read once

    def own(node: Any) -> str | None:
        for m in node.own_markers:
            if m.name == "xdist_group":
                return str(m.kwargs.get("name", m.args[0] if m.args else "default"))
        return None

    def group_of(node: Any) -> str | None:
        if node is None:
            return None
        key = id(node)
        if key not in cache:
            name = own(node)
            cache[key] = name if name is not None else group_of(node.parent)
        return cache[key]

    out: set[tuple[str, str]] = set()
    for item in items:
        name = own(item)
        if name is None:
            name = group_of(item.parent)
        if name is not None:
            out.add((name, file_of(item.nodeid)))
    return out


def outcome_of(outcome: str, report: pytest.TestReport) -> str:
    """Fold one phase report into the test's outcome so far (error beats failed beats skipped)."""
    if report.when == "call":
        if hasattr(report, "wasxfail"):
            return "xfailed" if report.skipped else "xpassed"
        return report.outcome
    if report.failed:
        return "error"
    if report.skipped and report.when == "setup":
        return "xfailed" if hasattr(report, "wasxfail") else "skipped"
    return outcome


@dataclass
class _Left:
    """A process a file's tests started and left running, until it shows whether it is kept."""

    starter: str | None  # the file that started it; None once that file is counted as a user
    ended: float  # when that file ended (monotonic)
    ticks: int = -1  # its CPU clock ticks when last read
    users: set[str] = field(default_factory=set)  # files it ran during before it counted


@dataclass
class _FixtureState:
    """What a worker has seen of one fixture so far."""

    rec: FixtureRecord
    teardown_started: float | None = None


@dataclass(eq=False)
class WorkerRecorder:
    """The in-process half of measuring: per-test timing and per-file marks, on pytest's own hooks."""

    history: History
    run_id: int
    worker: str
    channel: Sender
    flush_tests: int = 2000  # buffered test rows written when this many wait ...
    flush_s: float = 2.0  # ... or when the oldest has waited this long
    pid: int = field(default_factory=os.getpid)
    reap_grace_s: float | None = None  # when set: name and end processes left behind at the end
    announce_tests: bool = False  # tell the sampler process each test (it keeps the journal)
    exclude_pids: tuple[int, ...] = ()  # never leftovers: the sampler process, when it is our child
    exact_hwm: bool = True  # False where /proc/self/clear_refs refuses: no per-file VmHWM
    # called with the number of tests done, at most every TICK_S (without xdist: the
    # session's progress line, which then needs no per-test hook or call of its own)
    after_tests: Callable[[int], None] | None = None
    # the last attempt at writes the history refused is this recorder's (a worker's own
    # history), not the session's whose history it shares (one process: its final writes come after)
    final_writes: bool = True

    def __post_init__(self) -> None:
        self._seq = 0
        self._seg: _Segment | None = None
        self._tests: list[tuple[Any, ...]] = []  # test rows, in historydb.TEST_COLUMNS order
        self._windows: list[tuple[str, float, float]] = []  # (nodeid, start, end) for the reaper
        self._phases: dict[str, list[Any]] = {}  # reports that came outside a test's protocol
        self._ph: list[Any] | None = None  # the phases of the test in its protocol now
        self._untracked: set[Any] = set()  # fixture definitions of a scope not tracked (function)
        self._fixtures: dict[tuple[str, str], _FixtureState] = {}
        self._first_test: float | None = None
        self._cpu_mark = 0.0  # this process's CPU (its reaped children's too) where the next test's begins
        self._current: str | None = None
        self._current_since = 0.0
        self._finished = False
        self._fixture_now: str | None = None
        self._autouse: set[str] = set()  # fixtures some test gets as autouse
        self._deselected: set[str] = set()  # files some of whose tests were deselected
        self._last_flush = self._tick_at = timing.monotonic()
        self.started_by: dict[int, str] = {}  # pid -> the test or fixture that started it
        # Processes tests started and left running (``suitefit.kept``); the files that started
        # or ran them; their most MiB and processes
        self._kept: dict[int, _Left] = {}
        self._by_tests: list[int] = []  # what this file's tests started, looked at its end
        self._kept_users: set[str] = set()
        self._kept_mb = 0.0
        self._kept_procs = 0
        self._kids_raw = b""
        self._kids_fd: int | None = None  # this thread's /proc children file, kept open
        self._known: set[int] = set()
        self.leftovers: list[Any] = []
        # when this process started, on the clock its tests are timed by: /proc's start tick
        # against the uptime clock (create_time can be a second off, the same way every time,
        # and every startup measured from it would be)
        age = proctree.age_s(self.pid)
        self._started = timing.wall() - age if age is not None else proctree.create_time(self.pid)
        # the startup, a duration, on the monotonic clock (the wall clock may be slewed meanwhile)
        self._started_mono = timing.monotonic() - age if age is not None else None
        self._first_mono: float | None = None
        self._collect_s: float | None = None
        self._collect_mb: float | None = None
        self.channel.send("H", self.worker, self.pid)

    @property
    def tests_done(self) -> int:
        return self._seq

    @property
    def current(self) -> tuple[str | None, float]:
        return self._current, self._current_since

    # -- hooks --------------------------------------------------------------------------

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_collection(self, session: pytest.Session) -> Any:
        """How long collecting took: part of this process's startup that xdist's controller,
        which collects nothing, does not pay before it starts its workers."""
        t0 = timing.perf_counter()
        mb0 = proctree.rss_mb(self.pid)
        try:
            return (yield)
        finally:
            self._collect_s = timing.perf_counter() - t0
            mb1 = proctree.rss_mb(self.pid)
            self._collect_mb = max(0.0, mb1 - mb0) if mb0 > 0 and mb1 > 0 else None

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        pairs: set[tuple[str, str]] = set()
        done: set[tuple[int, str]] = set()  # (fixture info, file) already read
        for item in session.items:
            info = getattr(item, "_fixtureinfo", None)
            if info is None:
                continue
            path = file_of(item.nodeid)
            # The items of one parametrized function share their fixture info (pytest builds
            # it per function, usefixtures marks included): read it once per file (a
            # 50,000-test suite is mostly such items).
            if (id(info), path) not in done:
                done.add((id(info), path))
                for name in getattr(item, "fixturenames", ()):
                    defs = info.name2fixturedefs.get(name)
                    if defs and defs[-1].scope in TRACKED_SCOPES:
                        pairs.add((name, path))
                self._autouse.update(autouse_names(item, info))
        self.history.add_fixture_files(self.run_id, sorted(pairs))
        self.history.add_partial_files(self.run_id, sorted(partial_files(session, self._deselected)))
        self.history.add_xdist_groups(self.run_id, sorted(xdist_groups(session.items)))

    def pytest_deselected(self, items: Sequence[pytest.Item]) -> None:
        self._deselected.update(file_of(i.nodeid) for i in items)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
        # Paid per test: reads nodeid once (a property since pytest 9), and calls no Python
        # function of its own on a test that starts nothing and stays in its file.
        nodeid = item.nodeid
        node_path = item.path
        now = timing.wall()
        seg = self._seg
        if seg is not None and node_path is not None and node_path is seg.node_path:
            path = seg.path
        else:
            path = nodeid.split("::", 1)[0]
            if seg is None or seg.path != path:
                self._close_segment()
                self._open_segment(path, now)
                seg = self._seg
                assert seg is not None
            seg.node_path = node_path
        self._current, self._current_since = nodeid, now
        if self.announce_tests:
            self.channel.send("T", self.worker, now, nodeid)
        ph = self._ph = self._phases.pop(nodeid, None) or [0.0, 0.0, 0.0, "passed", None]
        t0 = timing.perf_counter()
        try:
            return (yield)
        finally:
            wall = timing.perf_counter() - t0
            # One CPU clock read a test, at its end: its CPU is from where the last test's
            # ended (or its file's segment began), as nothing of suitefit's own ran in between
            # (what did, below, moves that mark). os.times, not process_time: a test's CPU
            # counts the children it reaped. ~3.6 µs a read on this kind of machine.
            t = timing.times()
            now_cpu = t[0] + t[1] + t[2] + t[3]
            cpu = now_cpu - self._cpu_mark
            self._cpu_mark = now_cpu
            self._ph = None
            self._tests.append((self.run_id, nodeid, path, self.worker, self._seq, now,  # TEST_COLUMNS
                                ph[0], ph[1], ph[2], wall, cpu, ph[_OUTCOME], ph[_REASON]))
            if self.reap_grace_s is not None:
                self._windows.append((nodeid, now, now + wall))
                fd = self._kids_fd
                try:  # the fast path of _note_new_children: nothing new under this process
                    same = fd is not None and os.pread(fd, 4096, 0) == self._kids_raw
                except OSError:
                    same = False
                if not same:
                    self._note_new_children(nodeid)
                    self._cpu_mark = timing.cpu_seconds()  # that walk was not the next test's
            self._seq += 1
            seg.tests += 1
            self._current = None
            if nextitem is None or (nextitem.path is not node_path and file_of(nextitem.nodeid) != path):
                self._close_segment()
            if len(self._tests) >= self.flush_tests:
                self.flush()
                self._cpu_mark = timing.cpu_seconds()
            now = timing.monotonic()
            if now >= self._tick_at:
                self._tick(now)
                self._cpu_mark = timing.cpu_seconds()

    def _tick(self, now: float) -> None:
        """What runs by the clock, not per test: the progress count, and rows that waited long."""
        self._tick_at = now + TICK_S
        if self.after_tests is not None:
            self.after_tests(self._seq)
        if now - self._last_flush >= self.flush_s:
            self.flush()

    def _note_new_children(self, nodeid: str) -> None:
        """Name the processes a test started and left running (only when leftovers are reaped).

        One read of this thread's ``children`` file per test, through a descriptor kept open
        (``pread`` at 0 makes /proc produce it afresh: ~2 µs, against ~10-20 µs for an open,
        a read and a close); the whole tree is walked only when that changed, so a test that
        starts nothing pays almost nothing.
        """
        try:
            raw = self._read_kids()
        except OSError:
            return
        if raw == self._kids_raw:
            return
        self._kids_raw = raw
        for p in proctree.tree(self.pid)[1:]:
            if p not in self._known and p not in self.exclude_pids:
                self._known.add(p)
                self.started_by.setdefault(p, nodeid)
                self._by_tests.append(p)

    def _read_kids(self) -> bytes:
        fd = self._kids_fd
        if fd is None:
            fd = self._kids_fd = os.open(f"/proc/{self.pid}/task/{self.pid}/children", os.O_RDONLY | os.O_CLOEXEC)
        try:
            return proctree.pread_all(fd)
        except OSError:  # a kernel whose seq files refuse pread: seek back and read
            os.lseek(fd, 0, os.SEEK_SET)
            return b"".join(iter(lambda: os.read(fd, 4096), b""))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        ph = self._ph  # the reports of a test come while its protocol runs, in its process
        if ph is None:  # one a plugin made outside it: kept by its nodeid until that test runs
            ph = self._phases.setdefault(report.nodeid, _new_phases())
        when = report.when
        i = _PHASE.get(when)
        if i is not None:
            ph[i] += report.duration
        if when == "call" or report.outcome != "passed":  # a passed setup or teardown changes nothing
            ph[_OUTCOME] = outcome_of(ph[_OUTCOME], report)
            if report.failed and ph[_REASON] is None:
                ph[_REASON] = short_reason(report)

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: Any, request: Any) -> Generator[None, Any, Any]:
        if fixturedef in self._untracked:  # function-scoped: set up per test, not measured here
            return (yield)
        scope = fixturedef.scope  # a property (and an enum's) since pytest 8: read once a definition
        if scope not in TRACKED_SCOPES:
            self._untracked.add(fixturedef)
            return (yield)
        # Read here, on the test's thread, once per broad-scoped set-up (rare): which
        # processes a fixture started must be exact, and from outside a 0.1 s sampler
        # could not tell them from those a test started a moment before or after.
        before = set(proctree.tree(self.pid))
        self_before = proctree.rss_mb(self.pid)
        t0 = timing.perf_counter()
        try:
            return (yield)
        finally:
            setup_s = timing.perf_counter() - t0
            new = [p for p in proctree.tree(self.pid) if p not in before and p not in self.exclude_pids]
            for p in new:
                self.started_by.setdefault(p, f"fixture {fixturedef.argname}")
                self._known.add(p)
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
        if fixturedef in self._untracked:
            return
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
        if self._first_test is None:
            self._first_test = now
            self._first_mono = timing.monotonic()
            if self.reap_grace_s is not None:  # what runs before the first test is no test's
                self._known.update(proctree.tree(self.pid)[1:])
        # The exact peak of this process comes from its VmHWM, reset here; its RSS right
        # after the reset is where the file starts. Its children's RSS is read here too, once
        # per file: a sample from outside is up to an interval old, and a pool a fixture
        # started a moment ago would otherwise count as this file's memory.
        if self.exact_hwm:
            proctree.reset_hwm()
        self_mb = proctree.rss_mb(self.pid) or -1.0  # 0: /proc is not readable
        kids = list(proctree.tree_parents(self.pid, skip=self.exclude_pids))[1:]  # not the sampler
        children_mb = proctree.sum_rss_mb(kids) if kids else 0.0
        t0 = timing.monotonic()
        t = timing.times()
        self._cpu_mark = cpu0 = t[0] + t[1] + t[2] + t[3]
        self._seg = _Segment(path, now, t0, cpu0, t[1] + t[3])
        self.channel.send("B", self.worker, t0, now, self_mb, children_mb, path)

    def _close_segment(self) -> None:
        seg = self._seg
        if seg is None:
            return
        self._seg = None
        if self._by_tests or self._kept:
            self._note_kept(seg.path)
        hwm = proctree.hwm_mb() if self.exact_hwm else None
        t = timing.times()
        self.channel.send("E", self.worker, timing.monotonic(), timing.wall(),
                          -1.0 if hwm is None else hwm, t[0] + t[1] + t[2] + t[3] - seg.cpu0, seg.tests,
                          t[1] + t[3] - seg.sys0)

    def _note_kept(self, path: str | None) -> None:
        """At a file's end (``path``; None: the session's): which processes tests started still
        run, and which files use them (``suitefit.kept``)? A process counts once it still runs
        at a file's end ``KEPT_AFTER_S`` or more after the end of the file that started it, or
        at the session's end once it has lived that long (no later file: nothing waits for
        it): a test's subprocess that ends a moment later is no pool, however short the next
        file is. Its starter is then a user, as is every file during which one of them ran
        (its CPU ticks grew), from the first. Per file, only once tests have started
        processes: a few /proc reads."""
        now = timing.monotonic()
        for p in self._by_tests:
            self._kept.setdefault(p, _Left(path, now))
        self._by_tests = []
        used = False
        mb = 0.0
        alive = 0
        for p, k in list(self._kept.items()):
            ticks = proctree.proc_cpu_ticks(p)
            rss = proctree.rss_mb(p) if ticks is not None else 0.0
            if ticks is None or rss <= 0:  # gone
                del self._kept[p]
                continue
            ran = 0 <= k.ticks < ticks
            k.ticks = ticks
            if k.starter is not None:
                if (now - k.ended if path is not None else (proctree.age_s(p) or 0.0)) < KEPT_AFTER_S:
                    if ran and path is not None:
                        k.users.add(path)
                    continue  # not yet known to be kept
                self._kept_users.add(k.starter)
                self._kept_users.update(k.users)
                k.starter = None
            used = used or ran
            mb += rss
            alive += 1
        if used and path is not None:
            self._kept_users.add(path)
        if alive:
            self._kept_mb = max(self._kept_mb, mb)
            self._kept_procs = max(self._kept_procs, alive)

    def flush(self) -> None:
        self._last_flush = timing.monotonic()
        if self._tests:
            rows, self._tests = self._tests, []
            self.history.add_test_rows(rows)

    def reap_leftovers(self, grace_s: float) -> None:
        """Name the processes this worker's tests left running, then end them after ``grace_s``."""
        skip = {self.pid, *self.exclude_pids}
        pids = [p for p in proctree.tree(self.pid) if p not in skip]  # reaper.leftovers_under's
        if not pids:
            return
        from suitefit.measure import reaper  # (psutil) only when something was left behind

        pool = reaper.pool_workers()
        pids = [p for p in pids if p not in pool]
        found = reaper.describe(pids, self.started_by)
        found = [x if x.started_by != "unknown" else
                 reaper.Leftover(x.pid, x.cmdline, x.created, reaper.attribute_by_time(_created(x), self._windows))
                 for x in found]
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
        if self._kept:
            self._note_kept(None)  # what the last files started and left running
        self.flush()
        if self.reap_grace_s is not None:
            self.reap_leftovers(self.reap_grace_s)
        if self._fixtures:
            for s in self._fixtures.values():
                s.rec.autouse = s.rec.name in self._autouse
            self.history.add_fixtures([s.rec for s in self._fixtures.values()])
        if self._kept_users:
            self.history.add_fixtures([FixtureRecord(self.run_id, self.worker, kept.NAME, kept.SCOPE, "", 0.0, None,
                                                     self._kept_procs, self._kept_mb)])
            self.history.add_fixture_files(self.run_id, [(kept.NAME, p) for p in sorted(self._kept_users)])
        startup = None
        if self._first_mono is not None and self._started_mono is not None:
            startup = self._first_mono - self._started_mono
        elif self._first_test is not None and self._started is not None:
            startup = self._first_test - self._started
        # baseline and peak memory are the sampler process's; it adds them after "D"
        self.history.upsert_worker(
            WorkerRecord(self.run_id, self.worker, self.pid, self._started, self._first_test,
                         startup, None, None, self._seq, collect_s=self._collect_s,
                         collect_mb=self._collect_mb)
        )
        if self.final_writes:
            self.history.write_waiting()
        self.channel.send("D", self.worker)
        self.channel.close()
        if self._kids_fd is not None:
            os.close(self._kids_fd)
            self._kids_fd = None


def _created(x: Any) -> float:
    """When a process started, to 10 ms (psutil's create_time can be a second off)."""
    age = proctree.age_s(x.pid)
    return timing.wall() - age if age is not None else float(x.created)
