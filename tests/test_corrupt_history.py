"""A corrupt history (a bad CI cache) must not fail a build whose tests pass.

`run` and `profile` move it aside (kept, with its -wal/-shm) and start over with a
first plan; the readers (`plan`, `report`, `history`) keep the one-line error.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from clihelp import assert_one_line_error, suitefit

from suitefit.history import History

HIST = Path(".suitefit") / "history.sqlite"


def _project(root: Path) -> None:
    (root / "tests").mkdir()
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    for i in range(2):
        (root / "tests" / f"test_{i}.py").write_text("def test_x():\n    pass\n")


def _truncated(root: Path) -> bytes:
    """A real history (one profiled run), cut to its first half: opens, then fails on reading."""
    assert suitefit("profile", "--", "-q", cwd=root).returncode == 0
    path = root / HIST
    assert not path.with_name(path.name + "-wal").exists()  # checkpointed on close
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    path.with_name(path.name + "-wal").write_bytes(b"")  # a stale, empty WAL comes along
    return path.read_bytes()


def _garbage(root: Path) -> bytes:
    path = root / HIST
    path.parent.mkdir()
    path.write_bytes(b"\x00garbage from a broken cache\xff" * 300)
    return path.read_bytes()


@pytest.mark.parametrize("verb", ["run", "profile"])
@pytest.mark.parametrize("damage", [_truncated, _garbage])
def test_run_and_profile_set_a_corrupt_history_aside_and_go_on(tmp_path: Path, verb: str, damage) -> None:
    _project(tmp_path)
    bad = damage(tmp_path)
    for reader in ("plan", "report", "history"):
        assert_one_line_error(suitefit(reader, cwd=tmp_path), "corrupt")
    assert (tmp_path / HIST).read_bytes() == bad  # the readers left it alone

    res = suitefit(verb, "--", "-q", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    said = [ln for ln in res.stderr.splitlines() if "moved aside" in ln]
    assert len(said) == 1 and "corrupt" in said[0], res.stderr
    assert "Traceback" not in res.stderr and "error" not in said[0]
    aside = sorted(p.name for p in (tmp_path / ".suitefit").iterdir() if ".corrupt-" in p.name)
    assert aside and re.fullmatch(r"history\.sqlite\.corrupt-\d{8}T\d{6}", aside[0]), aside
    assert aside[0] in said[0]
    assert (tmp_path / ".suitefit" / aside[0]).read_bytes() == bad  # kept as it was
    if damage is _truncated:
        assert aside[0] + "-wal" in aside  # its WAL went with it
    if verb == "run":
        assert "no measured runs in the history yet" in res.stderr  # a first plan
    with History(tmp_path / HIST, create=False) as h:
        runs = h.runs()
        assert [r.status for r in runs] == ["passed"]
    assert suitefit("history", cwd=tmp_path).returncode == 0


@pytest.mark.parametrize("meta", ["[1]", "null", "{not json", '"a string"'])
def test_a_damaged_run_meta_loses_its_facts_not_the_command(tmp_path: Path, meta: str) -> None:
    """A run's meta edited by hand or damaged (valid SQLite, not a JSON object): the plan,
    the listing, the report and the next run go on without what it held."""
    import sqlite3

    _project(tmp_path)
    assert suitefit("profile", "--", "-q", cwd=tmp_path).returncode == 0
    assert suitefit("run", "--", "-q", cwd=tmp_path).returncode == 0
    with sqlite3.connect(tmp_path / HIST) as db:
        db.execute("UPDATE runs SET meta = ?", [meta])
    for args in (("plan",), ("history",), ("report", "--markdown"), ("run", "--", "-q")):
        res = suitefit(*args, cwd=tmp_path)
        assert res.returncode == 0, (args, res.stderr)
        assert "Traceback" not in res.stderr + res.stdout, (args, res.stderr)
