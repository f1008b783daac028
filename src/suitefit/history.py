"""The history: one SQLite file (WAL) of runs and everything measured in them.

Every process of a run (the controller, each xdist worker and the run's sampler
process) opens its own connection and writes its own rows; primary keys make a repeated write replace,
never duplicate. The schema, the connection and the writes of plain rows are in
``historydb.py`` (the sampler process needs only those); here are the typed records
and everything that reads.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from operator import attrgetter
from pathlib import Path
from typing import Any, TypeVar

from suitefit.errors import SuitefitError
from suitefit.historydb import FILE_COLUMNS, SAMPLE_COLUMNS, TEST_COLUMNS, HistoryDB, deferrable
from suitefit.historydb import SCHEMA_VERSION as SCHEMA_VERSION  # re-exported
from suitefit.historydb import HistoryCorrupt as HistoryCorrupt  # re-exported


def meta_of(text: str | None) -> dict[str, Any]:
    """A run's meta as a dict: {} where it is missing, not JSON or not an object (a
    hand-edited or damaged history loses those optional facts, never the command)."""
    try:
        d = json.loads(text) if text else {}
    except ValueError:
        return {}
    return d if isinstance(d, dict) else {}


@dataclass
class RunRecord:
    """One row of ``runs``: a measured pytest session, its outcome and what it peaked at."""

    id: int
    kind: str  # "pytest" (plain --suitefit), "profile", "run", "sweep", "shard", ...
    status: str  # running, passed, failed, interrupted, no-tests, collect-error, crashed, error
    exit_code: int | None
    started: float
    finished: float | None
    wall_s: float | None
    cpu_s: float | None
    argv: str
    cwd: str
    rootdir: str
    workers: int
    collected: int | None
    passed: int | None
    failed: int | None
    skipped: int | None
    errors: int | None
    peak_rss_mb: float | None
    peak_pss_mb: float | None
    peak_procs: int | None
    threshold_mb: float | None
    secs_above: float | None
    budget_mb: float | None
    python: str | None
    pytest_version: str | None
    xdist_version: str | None
    host: str | None
    plan: str | None
    meta: str

    @property
    def meta_dict(self) -> dict[str, Any]:
        return meta_of(self.meta)

    @property
    def plan_dict(self) -> dict[str, Any] | None:
        return json.loads(self.plan) if self.plan else None


@dataclass
class WorkerRecord:
    """One process that ran tests in a run: when it could start testing and its memory."""

    run_id: int
    worker: str  # "gw0".. under xdist, "main" without
    pid: int | None
    started: float | None  # process start (epoch)
    first_test: float | None
    startup_s: float | None  # process start to first test: interpreter, imports, collection
    baseline_mb: float | None  # the worker's tree RSS just before its first test
    peak_rss_mb: float | None
    tests: int = 0
    status: str = "ok"  # ok, died
    detail: str | None = None
    collect_s: float | None = None  # its collection (pytest_collection), part of startup_s
    collect_mb: float | None = None  # its own RSS's growth over its collection: part of its baseline


@dataclass
class TestRecord:
    """One test's phases as its worker timed them, in the order it ran there."""

    run_id: int
    nodeid: str
    file: str
    worker: str
    seq: int  # order within its worker process
    started: float
    setup_s: float
    call_s: float
    teardown_s: float
    wall_s: float
    cpu_s: float
    outcome: str
    reason: str | None = None  # failed or error: the crash line, e.g. "AssertionError: assert 1 == 2"


@dataclass
class FileRecord:
    """One file on one worker: its time and the tree memory it added (the planner's unit cost)."""

    run_id: int
    path: str
    worker: str
    started: float
    finished: float
    wall_s: float
    cpu_s: float
    tests: int
    baseline_mb: float  # worker tree RSS just before the file started
    peak_mb: float  # peak above that baseline
    peak_abs_mb: float
    sys_s: float | None = None  # of cpu_s, the kernel's (page faults above all); None: not recorded
    own_mb: float | None = None  # of peak_mb, the worker process's own (not its children's); None: not known
    fork_mb: float | None = None  # of peak_mb, its forks' (``measure/treereader.Forks``); None: not known
    forks: int | None = None  # how many: each grows as its worker has grown
    fork_of_mb: float | None = None  # the worker's own RSS when the file began


@dataclass
class FixtureRecord:
    """A session- or package-scoped fixture on one worker: its set-up cost and what it keeps."""

    run_id: int
    worker: str
    name: str
    scope: str
    baseid: str
    setup_s: float
    teardown_s: float | None
    procs: int
    mb: float
    autouse: bool = False  # some test saw it as autouse: never released early


@dataclass
class SampleRecord:
    """One sample of the run's whole tree, for the report's timeline."""

    run_id: int
    t: float  # seconds since the run started
    rss_mb: float
    pss_mb: float | None
    procs: int


@dataclass
class EventRecord:
    """Something that happened in a run (a decision, a crash, a heartbeat), with its details as JSON."""

    id: int | None
    run_id: int
    t: float  # epoch seconds
    kind: str
    worker: str | None
    nodeid: str | None
    detail: str

    @property
    def detail_dict(self) -> dict[str, Any]:
        return dict(json.loads(self.detail or "{}"))


@dataclass
class ConstraintRecord:
    """An order dependency found by a bisection: ``first_file`` must run before
    ``second_file`` on one worker (see ``plan.constraints``)."""

    test: str  # the test whose outcome the order flips
    culprit: str  # the test that pollutes it or provides for it
    kind: str  # "provider" (culprit must run first) or "polluter" (culprit must not run first)
    first_file: str
    second_file: str
    evidence: str  # what was observed, e.g. "passes alone, fails after X (2 runs)"
    source: str  # "run 12 --explain-failures", "bisect"
    run_id: int | None  # the run whose order was replayed
    rootdir: str  # where its node ids are relative to (to notice a file that is gone)
    found: float  # epoch seconds


R = TypeVar("R")


def _cols(cls: type) -> list[str]:
    return [f.name for f in fields(cls)]


_GETTERS: dict[tuple[str, ...], Callable[[Any], tuple[Any, ...]]] = {}


def _as_row(record: Any, cols: Sequence[str]) -> tuple[Any, ...]:
    """A record's values in ``cols``' order (one C-level attrgetter per column list)."""
    key = tuple(cols)
    get = _GETTERS.get(key)
    if get is None:
        get = _GETTERS[key] = attrgetter(*key) if len(key) > 1 else (lambda r: (getattr(r, key[0]),))
    return get(record)


def set_aside(path: Path, now: float) -> Path:
    """Rename a corrupt history and its -wal/-shm to ``NAME.corrupt-YYYYMMDDTHHMMSS``; the new name.

    Kept, not deleted: it may be the only record of a crash worth reading. The -wal and
    -shm keep their suffixes after the new name, where SQLite looks for them.
    """
    import time

    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    try:
        for suffix in ("-wal", "-shm"):
            side = path.with_name(path.name + suffix)
            if side.exists():
                side.rename(target.with_name(target.name + suffix))
        path.rename(target)
    except OSError as e:
        raise SuitefitError(f"history {path} is corrupt and cannot be moved aside: {e.strerror or e}", 3) from None
    return target


class History(HistoryDB):
    """A connection to one history file. Cheap to open; open one per process.

    The plumbing and the writes of plain rows are ``HistoryDB``'s (the sampler process
    uses that alone); here: typed records, runs, and the reads.
    """

    def __init__(self, path: Path | str, *, create: bool = True) -> None:
        self.path = Path(path)
        super().__init__(str(self.path), create=create)

    def check_intact(self) -> None:
        """Raise ``HistoryCorrupt`` unless SQLite's quick check passes (about 40 ms for 40 MB).

        Opening reads only the first page: a truncated file opens and fails later, in the
        middle of a run. Run and profile check first, so they can start a new history instead.
        """
        try:
            row = self._db.execute("PRAGMA quick_check(1)").fetchone()
        except sqlite3.Error as e:
            raise self._explain(e) from None
        if not row or row[0] != "ok":
            raise HistoryCorrupt(f"history {self.path} is corrupt (quick_check: {row[0] if row else '?'}); "
                                 "move it aside to start a new one", 3)

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _insert(self, table: str, rows: Sequence[Any], *, replace: bool = True) -> None:
        if not rows:
            return
        cols = [c for c in _cols(type(rows[0])) if not (c == "id" and getattr(rows[0], "id", 0) is None)]
        self.insert_rows(table, cols, [_as_row(r, cols) for r in rows], replace=replace)

    def _select(self, cls: type[R], sql: str, args: Iterable[Any] = ()) -> list[R]:
        cols = _cols(cls)
        try:
            cur = self._db.execute(sql.format(cols=", ".join(cols)), tuple(args))
            return [cls(*row) for row in cur.fetchall()]
        except sqlite3.Error as e:
            raise self._explain(e) from None

    # -- runs -----------------------------------------------------------------------------

    def new_run(self, kind: str, *, started: float, argv: Sequence[str] = (), cwd: str = "",
                rootdir: str = "", meta: dict[str, Any] | None = None, **extra: Any) -> int:
        cols = ["kind", "status", "started", "argv", "cwd", "rootdir", "meta", *extra]
        vals = [kind, "running", started, json.dumps(list(argv)), cwd, rootdir,
                json.dumps(meta or {}), *extra.values()]
        with self._tx() as db:
            cur = db.execute(
                f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", vals
            )
            assert cur.lastrowid is not None
            return int(cur.lastrowid)

    @deferrable
    def update_run(self, run_id: int, **values: Any) -> None:
        if not values:
            return
        allowed = set(_cols(RunRecord)) - {"id"}
        bad = set(values) - allowed
        if bad:
            raise ValueError(f"unknown run fields: {bad}")
        if "meta" in values and isinstance(values["meta"], dict):
            values["meta"] = json.dumps(values["meta"])
        if "plan" in values and isinstance(values["plan"], dict):
            values["plan"] = json.dumps(values["plan"])
        sets = ", ".join(f"{k} = ?" for k in values)
        with self._tx() as db:
            db.execute(f"UPDATE runs SET {sets} WHERE id = ?", [*values.values(), run_id])

    @deferrable
    def merge_run_meta(self, run_id: int, **meta: Any) -> None:
        """Add keys to a run's meta JSON atomically (several processes may add)."""
        with self._tx() as db:
            row = db.execute("SELECT meta FROM runs WHERE id = ?", (run_id,)).fetchone()
            cur = meta_of(row[0] if row else None)
            cur.update(meta)
            db.execute("UPDATE runs SET meta = ? WHERE id = ?", (json.dumps(cur), run_id))

    def settle_abandoned(self, alive: Callable[[int, float | None], bool] | None = None) -> list[int]:
        """Close runs still 'running' whose owning process is gone; their ids.

        A run's owner (``meta.pid``, ``meta.pid_started``) ends it when it ends; one
        killed outright (SIGKILL, the OOM killer, a cancelled CI job) cannot, so the
        next command that opens the history does, rather than leave it running forever.
        """
        if alive is None:
            from suitefit.measure.proctree import is_running

            alive = is_running
        rows = self.execute("SELECT id, meta FROM runs WHERE status = 'running'")
        gone: list[int] = []
        for run_id, meta_text in rows:
            meta = meta_of(meta_text)
            pid = meta.get("pid")
            if isinstance(pid, int) and not alive(pid, meta.get("pid_started")):
                gone.append(int(run_id))
        for run_id in gone:
            self.update_run(run_id, status="crashed")
            self.merge_run_meta(run_id, ended_unrecorded="its process ended without recording an end "
                                "(killed, or pytest stopped before suitefit's plugin started)")
            self._keep_journal(run_id)
            remove_run_files(self.path, run_id)  # what they held is recorded now
        return gone

    def _keep_journal(self, run_id: int) -> None:
        """Record what the killed run's in-flight journal named: nothing else is left to say it."""
        from suitefit.measure.journal import read_journal

        path = self.run(run_id).meta_dict.get("journal")
        found = read_journal(Path(path)) if isinstance(path, str) else None
        if found is None or not found.inflight:
            return
        self.merge_run_meta(run_id, crashed_in=[
            {"worker": x.worker, "nodeid": x.nodeid, "mb": x.mb, "since": x.since} for x in found.inflight])
        for x in found.inflight:
            self.add_event(run_id, found.written or x.since, "inflight", worker=x.worker, nodeid=x.nodeid,
                           mb=x.mb, since=x.since, source="journal")

    def runs(self, limit: int | None = None, kind: str | None = None) -> list[RunRecord]:
        where, args = ("WHERE kind = ?", [kind]) if kind else ("", [])
        lim = f"LIMIT {int(limit)}" if limit else ""
        return self._select(RunRecord, f"SELECT {{cols}} FROM runs {where} ORDER BY id DESC {lim}", args)

    def run(self, run_id: int) -> RunRecord:
        rows = self._select(RunRecord, "SELECT {cols} FROM runs WHERE id = ?", [run_id])
        if not rows:
            raise SuitefitError(f"no run {run_id} in history {self.path}")
        return rows[0]

    def latest_run(self, *, kinds: Sequence[str] | None = None, finished: bool = True) -> RunRecord | None:
        cond, args = [], []
        if kinds:
            cond.append(f"kind IN ({', '.join('?' * len(kinds))})")
            args += list(kinds)
        if finished:
            cond.append("status != 'running'")
        where = ("WHERE " + " AND ".join(cond)) if cond else ""
        rows = self._select(RunRecord, f"SELECT {{cols}} FROM runs {where} ORDER BY id DESC LIMIT 1", args)
        return rows[0] if rows else None

    # -- rows of a run ----------------------------------------------------------------------

    def add_tests(self, rows: Sequence[TestRecord]) -> None:
        self.add_test_rows([_as_row(r, TEST_COLUMNS) for r in rows])

    def add_files(self, rows: Sequence[FileRecord]) -> None:
        self.add_file_rows([_as_row(r, FILE_COLUMNS) for r in rows])

    def upsert_worker(self, row: WorkerRecord) -> None:
        self._insert("workers", [row])

    def add_fixtures(self, rows: Sequence[FixtureRecord]) -> None:
        self._insert("fixtures", rows)

    @deferrable
    def add_fixture_files(self, run_id: int, pairs: Iterable[tuple[str, str]]) -> None:
        sql = "INSERT OR IGNORE INTO fixture_files (run_id, name, file) VALUES (?, ?, ?)"
        data = [(run_id, n, f) for n, f in pairs]
        if data:
            with self._tx() as db:
                db.executemany(sql, data)

    def add_partial_files(self, run_id: int, paths: Iterable[str]) -> None:
        """Files of which the run selected only some tests (``-k``, ``-m``, ``--deselect``,
        ``--lf``, a node id): their times there are not their files' (``costs``)."""
        self.insert_rows("partial_files", ("run_id", "path"), [(run_id, p) for p in paths])

    def add_xdist_groups(self, run_id: int, pairs: Iterable[tuple[str, str]]) -> None:
        """(group name, file) of the tests marked ``xdist_group``: ``suitefit run`` keeps each
        group's files on one worker, as ``--dist loadgroup`` keeps its tests."""
        self.insert_rows("xdist_groups", ("run_id", "name", "file"), [(run_id, n, f) for n, f in pairs])

    def xdist_groups(self, run_ids: Iterable[int]) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for name, file in self._of_runs("SELECT name, file FROM xdist_groups", run_ids):
            out.setdefault(str(name), set()).add(str(file))
        return out

    def partial_files(self, run_ids: Iterable[int]) -> set[tuple[int, str]]:
        return {(int(r), str(p)) for r, p in self._of_runs("SELECT run_id, path FROM partial_files", run_ids)}

    def _of_runs(self, select: str, run_ids: Iterable[int]) -> list[tuple[Any, ...]]:
        """``select``'s rows of these runs (none for no runs)."""
        ids = ",".join(str(int(r)) for r in run_ids)
        return self.execute(f"{select} WHERE run_id IN ({ids})") if ids else []

    def add_samples(self, rows: Sequence[SampleRecord]) -> None:
        self.add_sample_rows([_as_row(r, SAMPLE_COLUMNS) for r in rows])

    def tests(self, run_id: int) -> list[TestRecord]:
        return self._select(TestRecord, "SELECT {cols} FROM tests WHERE run_id = ? ORDER BY worker, seq", [run_id])

    def files(self, run_id: int) -> list[FileRecord]:
        return self._select(FileRecord, "SELECT {cols} FROM files WHERE run_id = ? ORDER BY started", [run_id])

    def workers(self, run_id: int) -> list[WorkerRecord]:
        return self._select(WorkerRecord, "SELECT {cols} FROM workers WHERE run_id = ? ORDER BY worker", [run_id])

    def fixtures(self, run_id: int) -> list[FixtureRecord]:
        return self._select(FixtureRecord, "SELECT {cols} FROM fixtures WHERE run_id = ? ORDER BY name, worker", [run_id])

    def fixture_files(self, run_id: int) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        try:
            for name, file in self._db.execute(
                "SELECT name, file FROM fixture_files WHERE run_id = ? ORDER BY name, file", (run_id,)
            ):
                out.setdefault(name, []).append(file)
        except sqlite3.Error as e:
            raise self._explain(e) from None
        return out

    def samples(self, run_id: int) -> list[SampleRecord]:
        return self._select(SampleRecord, "SELECT {cols} FROM samples WHERE run_id = ? ORDER BY t", [run_id])

    def events(self, run_id: int, kind: str | None = None) -> list[EventRecord]:
        if kind:
            return self._select(EventRecord, "SELECT {cols} FROM events WHERE run_id = ? AND kind = ? ORDER BY t, id", [run_id, kind])
        return self._select(EventRecord, "SELECT {cols} FROM events WHERE run_id = ? ORDER BY t, id", [run_id])

    # -- what diagnosis learned ----------------------------------------------------------------

    def add_constraint(self, row: ConstraintRecord) -> None:
        """Store (or refresh, by test and culprit) an order constraint."""
        self._insert("order_constraints", [row])

    def constraints(self) -> list[ConstraintRecord]:
        return self._select(ConstraintRecord, "SELECT {cols} FROM order_constraints ORDER BY found, test")


def remove_run_files(history: Path, run_id: int, plan_path: str | None = None) -> None:
    """Remove a finished (or settled) run's journal and a shard's spec and collection, and its
    plan if `suitefit run` wrote it (``plan-<run id>.json`` beside the history, ``cli/run.py``)."""
    folder = history.parent
    paths = [folder / f"{name}-{run_id}.json" for name in ("inflight", "shard-spec", "collected")]
    own = folder / f"plan-{run_id}.json"
    if plan_path is None or Path(plan_path).resolve() == own.resolve():
        paths.append(own)
    for p in paths:
        with contextlib.suppress(OSError):
            p.unlink()
