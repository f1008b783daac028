"""The tests table's shape: what each measured test pays to be written, and old histories."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from suitefit import history as hist
from suitefit.history import History

# The tests table as suitefit first shipped it (keyed by run and nodeid, indexed by file).
_KEYED = """
CREATE TABLE tests (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    nodeid TEXT NOT NULL,
    file TEXT NOT NULL,
    worker TEXT NOT NULL,
    seq INTEGER NOT NULL,
    started REAL NOT NULL,
    setup_s REAL NOT NULL DEFAULT 0, call_s REAL NOT NULL DEFAULT 0, teardown_s REAL NOT NULL DEFAULT 0,
    wall_s REAL NOT NULL, cpu_s REAL NOT NULL,
    outcome TEXT NOT NULL,
    PRIMARY KEY (run_id, nodeid)
);
CREATE INDEX tests_by_file ON tests(run_id, file);
"""


def _indexes(path: Path) -> set[str]:
    db = sqlite3.connect(path)
    try:
        return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'tests'")}
    finally:
        db.close()


def _record(run_id: int, i: int, outcome: str = "passed") -> hist.TestRecord:
    return hist.TestRecord(run_id, f"tests/test_{i % 3}.py::t{i}", f"tests/test_{i % 3}.py", "gw0", i,
                           100.0 + i, 0.001, 0.01 * i, 0.002, 0.013 + 0.01 * i, 0.01 * i, outcome)


def test_a_test_row_updates_the_table_and_one_index_by_run(tmp_path: Path) -> None:
    """Each measured test writes one row: appended in rowid order plus one entry in an index
    by run (appended too), not a nodeid key and a file index (3 B-trees: 3.1 against 2.2 µs a row)."""
    path = tmp_path / "h.sqlite"
    with History(path) as h:
        rid = h.new_run("profile", started=100.0, workers=1)
        h.add_tests([_record(rid, i) for i in range(5)])
        assert [t.nodeid for t in h.tests(rid)] == [f"tests/test_{i % 3}.py::t{i}" for i in range(5)]
    assert _indexes(path) == {"tests_by_run"}


def test_a_keyed_history_is_rebuilt_once_with_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite"
    with History(path) as h:
        rid = h.new_run("profile", started=100.0, workers=1)
    db = sqlite3.connect(path)
    db.execute("DROP TABLE tests")
    db.executescript(_KEYED)  # as a history written before (no reason column either)
    for i in range(6):
        r = _record(rid, i, "failed" if i == 4 else "passed")
        db.execute("INSERT INTO tests VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   (r.run_id, r.nodeid, r.file, r.worker, r.seq, r.started, r.setup_s, r.call_s,
                    r.teardown_s, r.wall_s, r.cpu_s, r.outcome))
    db.commit()
    db.close()
    assert "tests_by_file" in _indexes(path)

    with History(path) as h:
        rows = h.tests(rid)
        h.add_tests([_record(rid, 6)])
        after = h.tests(rid)
    assert [(t.nodeid, t.seq, t.call_s, t.outcome, t.reason) for t in rows] == [
        (f"tests/test_{i % 3}.py::t{i}", i, 0.01 * i, "failed" if i == 4 else "passed", None) for i in range(6)]
    assert len(after) == 7
    assert _indexes(path) == {"tests_by_run"}
    db = sqlite3.connect(path)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    db.close()
    assert "tests_keyed" not in tables
    with History(path) as h:  # a second open finds nothing to do and reads the same
        assert len(h.tests(rid)) == 7
