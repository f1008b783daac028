"""The in-flight journal: which test each worker runs, in a real file, as a kill would leave it."""

from __future__ import annotations

import json
from pathlib import Path

from suitefit.measure.journal import Journal, read_journal


def _inflight(path: Path) -> list[str]:
    return [x["nodeid"] for x in json.loads(path.read_text())["inflight"]] if path.exists() else []


def test_a_start_is_written_at_once_near_the_budget_and_throttled_below_it(tmp_path: Path) -> None:
    # One process: every start at once (a test killed right after its start must not be
    # blamed on the one before). Under xdist, whose controller names a crashed test itself,
    # only near the budget: below it a write per test costs the controller (and so the
    # workers, on 2 CPUs) ~40 µs a test; the next throttled write catches up.
    always = Journal(tmp_path / "a.json", 1)
    always.start("main", "t::a")
    assert _inflight(tmp_path / "a.json") == ["t::a"]

    near = Journal(tmp_path / "x.json", 1, min_interval=60.0, at_once_from_mb=700.0)
    near.start("gw0", "t::first")  # the first write is not throttled (none was made yet)
    near.start("gw0", "t::second")
    assert _inflight(tmp_path / "x.json") == ["t::first"]  # held back: far from the budget
    near.update_memory({"gw0": 650.0}, 720.0)
    near.start("gw0", "t::third")
    assert _inflight(tmp_path / "x.json") == ["t::third"]  # near the budget: at once


def test_what_a_journal_file_holds_is_read_back_and_a_bad_one_names_nothing(tmp_path: Path) -> None:
    # The record a killed run leaves: written into a directory that did not exist yet, a
    # longer text replaced by a shorter one (padded, still JSON), then read as the next
    # `suitefit run` or `history` reads it. Missing, empty or foreign files name nothing.
    path = tmp_path / "deeper" / "inflight-3.json"
    j = Journal(path, 3)
    j.start("gw0", "tests/test_a.py::test_long_name_first", since=100.0, mb=None)
    j.update_memory({"gw0": 321.0}, 400.0)
    j.start("gw0", "t::b", since=101.0, mb=12.5)
    j.maybe_write(force=True)
    got = read_journal(path)
    assert got is not None and got.tree_mb == 400.0 and got.written is not None
    assert [(x.worker, x.nodeid, x.since, x.mb) for x in got.inflight] == [("gw0", "t::b", 101.0, 12.5)]
    assert [x.as_dict() for x in j.snapshot()] == [{"worker": "gw0", "nodeid": "t::b", "since": 101.0, "mb": 12.5}]
    j.done("gw0")
    assert read_journal(str(path)).inflight == []  # type: ignore[union-attr]
    j.close()
    (tmp_path / "empty.json").write_text("")
    (tmp_path / "foreign.json").write_text('{"inflight": [{"worker": "gw0"}]}')
    for bad in ("missing.json", "empty.json", "foreign.json"):
        assert read_journal(tmp_path / bad) is None, bad
