"""The history's SQLite layer: schema, connection, migration, transactions and plain-row writes.

``history.History`` builds on it (the typed records, the reads, runs and constraints);
the sampler process (``measure/watcher.py``) uses it alone. It imports ``sqlite3`` and
nothing heavier (no dataclasses, pathlib or typing at run time), so that
the sampler process, started for every measured run, starts fast.

Every process of a run (the controller, each xdist worker and the run's sampler
process) opens its own connection and writes its own rows; primary keys make a repeated
write replace, never duplicate. Schema changes bump ``SCHEMA_VERSION`` and add a migration.
"""

from __future__ import annotations

import _thread
import os
import sqlite3
import sys
import time

from suitefit.errors import SuitefitError

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Any

SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 10.0
# In a run (``HistoryDB.defer_refused_writes``), a write the history refuses waits in memory and
# is tried again this often, then waiting at most RETRY_BUSY_MS for a lock: the tests go on
RETRY_S = 2.0
RETRY_BUSY_MS = 100
# and before any refusal, a run's write waits this long for a lock (not BUSY_TIMEOUT_S): the
# run's own processes hold it for milliseconds, and a write that waits is not lost
RUN_BUSY_MS = 2000
# the end's last attempt at writes a full disk refused (at once, where a lock is waited for):
# tried again for this long, in case the disk is freed (a test's scratch file removed). Each
# process of the run pays it once, one after another, when the disk stays full
FULL_RETRY_S = 3.0


def deferrable(method: Any) -> Any:
    """A write that, in a run, waits in memory when the history refuses it (``_write``)."""

    def write(self: HistoryDB, *args: Any, **kw: Any) -> None:
        if self._waiting is None or self._replaying == _thread.get_ident():
            method(self, *args, **kw)
        else:
            self._write(method, args, kw)

    write.__name__, write.__qualname__, write.__doc__ = method.__name__, method.__qualname__, method.__doc__
    return write

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    exit_code INTEGER,
    started REAL NOT NULL,
    finished REAL,
    wall_s REAL,
    cpu_s REAL,
    argv TEXT NOT NULL DEFAULT '[]',
    cwd TEXT NOT NULL DEFAULT '',
    rootdir TEXT NOT NULL DEFAULT '',
    workers INTEGER NOT NULL DEFAULT 0,
    collected INTEGER,
    passed INTEGER, failed INTEGER, skipped INTEGER, errors INTEGER,
    peak_rss_mb REAL, peak_pss_mb REAL, peak_procs INTEGER,
    threshold_mb REAL, secs_above REAL, budget_mb REAL,
    python TEXT, pytest_version TEXT, xdist_version TEXT, host TEXT,
    plan TEXT, meta TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS workers (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    worker TEXT NOT NULL,
    pid INTEGER,
    started REAL, first_test REAL,
    startup_s REAL, baseline_mb REAL, peak_rss_mb REAL,
    tests INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL DEFAULT 'ok',
    detail TEXT,
    PRIMARY KEY (run_id, worker)
);
CREATE TABLE IF NOT EXISTS tests (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    nodeid TEXT NOT NULL,
    file TEXT NOT NULL,
    worker TEXT NOT NULL,
    seq INTEGER NOT NULL,
    started REAL NOT NULL,
    setup_s REAL NOT NULL DEFAULT 0, call_s REAL NOT NULL DEFAULT 0, teardown_s REAL NOT NULL DEFAULT 0,
    wall_s REAL NOT NULL, cpu_s REAL NOT NULL,
    outcome TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS tests_by_run ON tests(run_id);
CREATE TABLE IF NOT EXISTS files (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    path TEXT NOT NULL,
    worker TEXT NOT NULL,
    started REAL NOT NULL, finished REAL NOT NULL,
    wall_s REAL NOT NULL, cpu_s REAL NOT NULL,
    tests INTEGER NOT NULL,
    baseline_mb REAL NOT NULL, peak_mb REAL NOT NULL, peak_abs_mb REAL NOT NULL,
    PRIMARY KEY (run_id, path, worker)
);
CREATE TABLE IF NOT EXISTS fixtures (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    worker TEXT NOT NULL,
    name TEXT NOT NULL,
    scope TEXT NOT NULL,
    baseid TEXT NOT NULL DEFAULT '',
    setup_s REAL NOT NULL, teardown_s REAL,
    procs INTEGER NOT NULL DEFAULT 0, mb REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, worker, name, baseid)
);
CREATE TABLE IF NOT EXISTS fixture_files (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    name TEXT NOT NULL,
    file TEXT NOT NULL,
    PRIMARY KEY (run_id, name, file)
);
CREATE TABLE IF NOT EXISTS xdist_groups (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    name TEXT NOT NULL,
    file TEXT NOT NULL,
    PRIMARY KEY (run_id, name, file)
);
CREATE TABLE IF NOT EXISTS partial_files (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    path TEXT NOT NULL,
    PRIMARY KEY (run_id, path)
);
CREATE TABLE IF NOT EXISTS samples (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    t REAL NOT NULL,
    rss_mb REAL NOT NULL, pss_mb REAL, procs INTEGER NOT NULL,
    PRIMARY KEY (run_id, t)
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id INTEGER NOT NULL REFERENCES runs(id),
    t REAL NOT NULL,
    kind TEXT NOT NULL,
    worker TEXT,
    nodeid TEXT,
    detail TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS events_by_run ON events(run_id, kind);
CREATE TABLE IF NOT EXISTS order_constraints (
    test TEXT NOT NULL,
    culprit TEXT NOT NULL,
    kind TEXT NOT NULL,
    first_file TEXT NOT NULL,
    second_file TEXT NOT NULL,
    evidence TEXT NOT NULL,
    source TEXT NOT NULL,
    run_id INTEGER,
    rootdir TEXT NOT NULL DEFAULT '',
    found REAL NOT NULL,
    PRIMARY KEY (test, culprit)
);
"""
_TABLES = frozenset(stmt.split("CREATE TABLE IF NOT EXISTS", 1)[1].split()[0]
                    for stmt in _SCHEMA.split(";") if "CREATE TABLE IF NOT EXISTS" in stmt)

# Columns added to a table after it first shipped: (table, column, declaration).
# Append here (never edit a shipped line); ``_migrate`` adds what a history lacks.
_ADDED_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("fixtures", "autouse", "INTEGER NOT NULL DEFAULT 0"),
    ("tests", "reason", "TEXT"),  # a failed test's short reason (its crash line), else NULL
    ("workers", "collect_s", "REAL"),  # its collection's wall time: what xdist's controller skips
    # its system CPU (the kernel's work for it: page faults above all); NULL before 2026-12-03
    ("files", "sys_s", "REAL"),
    # the worker process's own growth above its RSS at the file's start (its VmHWM; not its
    # children's): NULL where clear_refs is refused, and before 2026-12-03
    ("files", "own_mb", "REAL"),
    # the worker process's own RSS growth over its collection (imports, items): part of its
    # baseline that a run of part of the suite does not pay; NULL before 2026-12-06
    ("workers", "collect_mb", "REAL"),
    # of peak_mb, the forks the file started (descendants with the worker's command line and
    # memory layout: a multiprocessing pool's), how many, and the worker's own RSS when the
    # file began; NULL before 2026-12-07
    ("files", "fork_mb", "REAL"),
    ("files", "forks", "INTEGER"),
    ("files", "fork_of_mb", "REAL"),
)


# The order of the columns of rows written as plain tuples: the fields of the matching
# records in ``history.py`` (TestRecord, FileRecord, SampleRecord), checked by a test.
TEST_COLUMNS = ("run_id", "nodeid", "file", "worker", "seq", "started", "setup_s", "call_s", "teardown_s",
                "wall_s", "cpu_s", "outcome", "reason")
FILE_COLUMNS = ("run_id", "path", "worker", "started", "finished", "wall_s", "cpu_s", "tests", "baseline_mb",
                "peak_mb", "peak_abs_mb", "sys_s", "own_mb", "fork_mb", "forks", "fork_of_mb")
SAMPLE_COLUMNS = ("run_id", "t", "rss_mb", "pss_mb", "procs")
EVENT_COLUMNS = ("run_id", "t", "kind", "worker", "nodeid", "detail")  # and its own id


def _passing(e: SuitefitError) -> SuitefitError:
    """Mark ``e`` as an error that may pass (a lock another process holds, a disk that fails or
    fills): a run's write refused so waits (``HistoryDB.defer_refused_writes``)."""
    e.passing = True  # type: ignore[attr-defined]
    return e


class HistoryCorrupt(SuitefitError):
    """The history file is not a readable SQLite database (truncated, overwritten, half-restored)."""


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``, or ``ROLLBACK`` when the body raises; SQLite's
    errors come out as one-line ``SuitefitError``s."""

    __slots__ = ("_h",)

    def __init__(self, h: HistoryDB) -> None:
        self._h = h

    def __enter__(self) -> sqlite3.Connection:
        try:
            self._h._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            raise self._h._explain(e) from None
        return self._h._db

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        db = self._h._db
        try:
            # (a statement that fails for a full disk has rolled the transaction back itself:
            # a ROLLBACK then fails, and its error hid the disk's)
            if kind is None or db.in_transaction:
                db.execute("COMMIT" if kind is None else "ROLLBACK")
        except sqlite3.Error as e:
            # a COMMIT that fails (a full disk shows there, in WAL mode) may leave the
            # transaction open, and with it the write lock: every later write of every process
            # of the run would be refused
            if db.in_transaction:
                try:  # noqa: SIM105 (no contextlib: the sampler process imports this module)
                    db.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            raise self._h._explain(e) from None
        if isinstance(exc, sqlite3.Error):
            raise self._h._explain(exc) from None


# The tests table as it first shipped: keyed by (run_id, nodeid) and indexed by file, so each
# measured test's row updated three B-trees. Now rows are appended in rowid order and indexed
# by run only (every reader asks for whole runs, or scans for one nodeid in diagnosis): 30%
# less per row written, ~9k instructions of a test's ~94k measuring cost (benchmarks/README.md,
# bench_overhead.py, "Sixth round"). Histories written before are rebuilt once, on their first open.
_OLD_TESTS_INDEX = "tests_by_file"


def _set_keyed_tests_aside(db: sqlite3.Connection) -> list[str] | None:
    """Rename a keyed tests table out of the way (the schema then creates the new one);
    its columns, for ``_copy_keyed_tests``, or None when there is none: looked up again inside
    the transaction, since another process may have rebuilt it since ``_migrate`` looked."""
    if db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (_OLD_TESTS_INDEX,)).fetchone() is None:
        return None
    cols = [r[1] for r in db.execute("PRAGMA table_info(tests)")]
    db.execute(f"DROP INDEX {_OLD_TESTS_INDEX}")
    db.execute("ALTER TABLE tests RENAME TO tests_keyed")
    return cols


def _copy_keyed_tests(db: sqlite3.Connection, cols: list[str]) -> None:
    keep = ", ".join(cols)
    db.execute(f"INSERT INTO tests ({keep}) SELECT {keep} FROM tests_keyed ORDER BY rowid")
    db.execute("DROP TABLE tests_keyed")


class HistoryDB:
    """A connection to one history file, and the writes that take plain rows. Cheap to open;
    open one per process."""

    def __init__(self, filename: str, *, create: bool = True) -> None:
        self.filename = filename
        if not create and not os.path.exists(filename):
            raise SuitefitError(f"no history at {filename}: run `suitefit profile` first")
        folder = os.path.dirname(filename)
        try:
            if create and folder:
                os.makedirs(folder, exist_ok=True)
        except OSError as e:
            raise SuitefitError(f"cannot create history folder {folder}: {e.strerror}") from None
        self._waiting: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] | None = None
        self._lock = _thread.RLock()  # a run's threads (the sampler's reader) write too
        self._replaying = -1  # the thread writing what waits: its writes run as they are
        self._retry_at = 0.0
        self._who = ""  # whose writes these are, for the lines
        self._lost = 0  # writes given up on (``write_waiting``), or dropped for good
        self._given_up = False  # the end's last attempt failed: later writes are not tried
        self._wait_ms = int(BUSY_TIMEOUT_S * 1000)  # how long a write waits for a lock now
        self.refused: SuitefitError | None = None  # why writes wait, while they do
        self._dropped: SuitefitError | None = None  # why a write was dropped, the last time one was
        try:
            self._db = sqlite3.connect(filename, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                       check_same_thread=False)
            self._db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            mode = self._db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise SuitefitError(f"history {filename}: cannot switch to WAL mode (got {mode})")
            self._db.execute("PRAGMA synchronous = NORMAL")
            self._migrate()
        except sqlite3.Error as e:
            raise self._explain(e) from None

    # -- plumbing -------------------------------------------------------------------------

    def _explain(self, e: sqlite3.Error) -> SuitefitError:
        msg = str(e)
        if "locked" in msg or "busy" in msg:
            return _passing(SuitefitError(
                f"history {self.filename} is locked by another process (waited {self._wait_ms / 1000:g} s)", 3
            ))
        if "not a database" in msg or "malformed" in msg or "corrupt" in msg:
            return HistoryCorrupt(
                f"history {self.filename} is corrupt ({msg}); move it aside to start a new one", 3
            )
        if "readonly" in msg or "unable to open" in msg or "disk I/O" in msg or "full" in msg:
            return _passing(SuitefitError(f"history {self.filename} is not writable ({msg})", 3))
        return SuitefitError(f"history {self.filename}: {msg}", 3)

    def _tx(self) -> _Transaction:
        return _Transaction(self)

    def _migrate(self) -> None:
        """Create what is missing: tables in ``_SCHEMA``, columns in ``_ADDED_COLUMNS``.

        Additive changes need no version bump (an older suitefit ignores what it does not
        know); ``SCHEMA_VERSION`` moves only for changes an older reader would misread.
        """
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise SuitefitError(
                f"history {self.filename} has schema {version}, newer than this suitefit's "
                f"{SCHEMA_VERSION}: upgrade suitefit"
            )
        names = {name: kind for name, kind in self._db.execute("SELECT name, type FROM sqlite_master")}
        have = {name for name, kind in names.items() if kind == "table"}
        missing_cols = [(t, c, decl) for t, c, decl in _ADDED_COLUMNS
                        if t in have and c not in self._columns(t)]
        keyed_tests = _OLD_TESTS_INDEX in names
        if version == SCHEMA_VERSION and have >= _TABLES and not missing_cols and not keyed_tests:
            return
        with self._tx() as db:
            keyed_cols = _set_keyed_tests_aside(db) if keyed_tests else None
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    db.execute(stmt)
            for t, c, decl in _ADDED_COLUMNS:
                if c not in self._columns(t):
                    db.execute(f"ALTER TABLE {t} ADD COLUMN {c} {decl}")
            if keyed_cols is not None:
                _copy_keyed_tests(db, keyed_cols)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _columns(self, table: str) -> set[str]:
        return {r[1] for r in self._db.execute(f"PRAGMA table_info({table})")}

    def close(self) -> None:
        self._db.close()

    # -- a run's writes, when the history refuses them ------------------------------------------

    def defer_refused_writes(self, who: str) -> None:
        """From now on, a write the history refuses for a reason that may pass (locked by
        another process, its disk full or failing) does not raise: it waits in memory, in order
        with the writes after it, and all are tried again every ``RETRY_S``. For the processes
        of a run (``who``: which, for the lines), where a raise in a hook stopped the tests (a
        history held by another process mid-run ended a passing run at 37 of 116 tests with
        pytest's internal error). A write refused for good (a constraint, a corrupt file) is
        dropped; the rest go on. ``write_waiting`` makes the last attempt. The first refusal
        says one line; so does the end, for what was lost."""
        if self._waiting is None:
            self._waiting = []
            self._who = who
            self._busy_ms(RUN_BUSY_MS)

    def _busy_ms(self, ms: int) -> None:
        try:
            self._db.execute(f"PRAGMA busy_timeout = {ms}")
            self._wait_ms = ms
        except sqlite3.Error:
            pass

    def _write(self, method: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> None:
        with self._lock:
            assert self._waiting is not None
            if self._given_up:
                self._lost += 1
                return
            entry = (method, args, kw)
            self._waiting.append(entry)
            if len(self._waiting) == 1 or time.monotonic() >= self._retry_at:
                self._try_waiting(entry)

    def _try_waiting(self, own: object = None) -> None:
        """Make the writes that wait, in order. ``own``: the entry the caller just added. A
        mistake in it (``update_run``'s unknown field) is the caller's, raised to it; one in
        an entry queued before is not (it reached a pytest hook as an internal error, or the
        sampler's reader thread): that write is dropped and said, as one the history refuses
        for good. An interrupt (KeyboardInterrupt, SystemExit) leaves the queue as it is."""
        assert self._waiting is not None
        self._replaying = _thread.get_ident()
        try:
            while self._waiting:
                entry = self._waiting[0]
                method, args, kw = entry
                try:
                    method(self, *args, **kw)
                except Exception as e:
                    if getattr(e, "passing", False):
                        raise
                    del self._waiting[0]  # it will never be made: the others still can
                    if entry is own and not isinstance(e, SuitefitError):
                        raise
                    self._lost += 1
                    why = e if isinstance(e, SuitefitError) else SuitefitError(f"{type(e).__name__}: {e}")
                    if self._dropped is None:
                        self._say(f"suitefit: error: {why}: a write of {self._who} is dropped; the tests go on")
                    self._dropped = why
                    continue
                del self._waiting[0]
        except SuitefitError as e:
            first, self.refused = self.refused is None, e
            if first:
                self._say(f"suitefit: warning: {e}: {self._who} keeps its records in memory and tries "
                          f"again every {RETRY_S:.0f} s; the tests go on")
                self._busy_ms(RETRY_BUSY_MS)
            self._retry_at = time.monotonic() + RETRY_S
        finally:
            self._replaying = -1
        if not self._waiting and self.refused is not None:
            self.refused = None
            self._busy_ms(RUN_BUSY_MS)

    def write_waiting(self) -> int:
        """The last attempt at the writes that wait, waiting for a lock as long as any write
        does; later writes are then not tried. Returns how many writes were lost in all, and
        says so in one line (once: later calls say only what was lost since)."""
        with self._lock:
            if self._waiting is None:
                return 0
            if self._waiting and not self._given_up:
                deadline = time.monotonic() + min(BUSY_TIMEOUT_S, FULL_RETRY_S)
                self._busy_ms(int(BUSY_TIMEOUT_S * 1000))
                self._try_waiting()
                # a full disk refuses at once, where a lock is waited for (``FULL_RETRY_S``)
                while self._waiting and (left := deadline - time.monotonic()) > 0:
                    time.sleep(min(0.25, left))
                    self._busy_ms(max(1, int((deadline - time.monotonic()) * 1000)))
                    self._try_waiting()
                self._busy_ms(RUN_BUSY_MS)
                if self._waiting:
                    self._given_up = True
            lost, self._lost = self._lost + len(self._waiting), 0
            self._waiting.clear()
            if lost:
                self._say(f"suitefit: error: {self.refused or self._dropped}: {lost} write(s) of {self._who} were not made "
                          f"(what was written before stays)")
            return lost

    @staticmethod
    def _say(line: str) -> None:
        try:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass

    # -- writes of plain rows ----------------------------------------------------------------

    @deferrable
    def insert_rows(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], *,
                    replace: bool = True) -> None:
        """``rows`` (tuples in ``columns``' order) in one transaction; a repeated key replaces
        (where the table has one)."""
        if not rows:
            return
        verb = "INSERT OR REPLACE" if replace else "INSERT"
        sql = f"{verb} INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
        with self._tx() as db:
            db.executemany(sql, rows)

    def add_test_rows(self, rows: Sequence[Sequence[Any]]) -> None:
        """Test rows as tuples in ``TEST_COLUMNS`` order (a worker's batched writes)."""
        self.insert_rows("tests", TEST_COLUMNS, rows, replace=False)

    def add_file_rows(self, rows: Sequence[Sequence[Any]]) -> None:
        """File rows as tuples in ``FILE_COLUMNS`` order (the sampler process's)."""
        self.insert_rows("files", FILE_COLUMNS, rows)

    def add_sample_rows(self, rows: Sequence[Sequence[Any]]) -> None:
        """Samples as tuples in ``SAMPLE_COLUMNS`` order (the sampler process's)."""
        self.insert_rows("samples", SAMPLE_COLUMNS, rows)

    @deferrable
    def set_worker_memory(self, run_id: int, worker: str, baseline_mb: float | None,
                          peak_mb: float | None) -> None:
        """The sampler process's part of a worker row (the worker writes the rest first)."""
        with self._tx() as db:
            db.execute("UPDATE workers SET baseline_mb = COALESCE(?, baseline_mb),"
                       " peak_rss_mb = NULLIF(MAX(COALESCE(peak_rss_mb, 0), COALESCE(?, 0)), 0)"
                       " WHERE run_id = ? AND worker = ?", (baseline_mb, peak_mb, run_id, worker))

    def add_event(self, run_id: int, t: float, kind: str, *, worker: str | None = None,
                  nodeid: str | None = None, **detail: Any) -> None:
        import json  # here: the sampler process writes events only under a budget

        self.insert_rows("events", EVENT_COLUMNS, [(run_id, t, kind, worker, nodeid, json.dumps(detail))],
                         replace=False)

    def execute(self, sql: str, args: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        """Read-only escape hatch for aggregate queries (the planner's cost model uses it)."""
        try:
            return list(self._db.execute(sql, tuple(args)).fetchall())
        except sqlite3.Error as e:
            raise self._explain(e) from None
