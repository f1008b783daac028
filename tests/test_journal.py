"""The in-flight journal: which test each worker runs, in a real file, as a kill would leave it."""

from __future__ import annotations

import json
from pathlib import Path

from suitefit.measure.journal import Journal


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
