"""`pytest --suitefit --suitefit-history /elsewhere/h.sqlite`: two arguments, which move
pytest's rootdir once the file exists (pytest reads its command line before an installed
plugin's options exist). Watched on real pytest runs, oldest and newest: the rootdir moves
and the suite's config is lost, so suitefit stops with one line instead of measuring another
suite; written with ``=``, or with the history inside the suite, nothing moves.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from venvs import OLDEST, make_venv


def _project(root: Path) -> None:
    (root / "tests").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    (root / "tests" / "test_a.py").write_text("def test_a():\n    pass\n")
    # outside testpaths: collected only by a pytest that lost the suite's config
    (root / "scripts").mkdir()
    (root / "scripts" / "test_not_a_test.py").write_text("def test_never():\n    assert False\n")


def _pytest(python: str, root: Path, *args: str, addopts: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_ADDOPTS", "PYTEST_XDIST"))}
    if addopts:
        env["PYTEST_ADDOPTS"] = addopts
    return subprocess.run([python, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=root, env=env,
                          text=True, capture_output=True, timeout=120)


def _runs(history: Path) -> int:
    with sqlite3.connect(history) as db:
        return int(db.execute("SELECT COUNT(*) FROM runs").fetchone()[0])


@pytest.mark.parametrize("pair", [None, pytest.param(OLDEST, marks=pytest.mark.slow)],
                         ids=lambda p: "current" if p is None else "oldest")
def test_a_history_path_written_as_two_arguments_that_moves_the_rootdir_stops_the_run(
        tmp_path: Path, pair: tuple[str, ...] | None) -> None:
    python = str(make_venv(pair, with_suitefit=True)) if pair else sys.executable
    root = tmp_path / "suite"
    _project(root)
    history = tmp_path / "elsewhere" / "h.sqlite"

    first = _pytest(python, root, "-q", "--suitefit", "--suitefit-history", str(history))
    assert first.returncode == 0, first.stdout + first.stderr  # the file did not exist yet
    # the danger, as pytest alone shows it: with the file there, its rootdir is not the suite's
    alone = _pytest(python, root, "--co", "--suitefit-history", str(history))
    assert f"rootdir: {root}\n" not in alone.stdout and "test_not_a_test.py" in alone.stdout, alone.stdout

    second = _pytest(python, root, "-q", "--suitefit", "--suitefit-history", str(history))
    assert second.returncode == 4, second.stdout + second.stderr  # pytest's usage error
    assert "Traceback" not in second.stderr + second.stdout
    lines = [ln for ln in second.stderr.splitlines() if "suitefit:" in ln]
    assert len(lines) == 1, second.stderr
    assert f"`--suitefit-history {history}` is two arguments" in lines[0]
    assert f"instead of {root} (config {root / 'pyproject.toml'})" in lines[0]
    assert f"write --suitefit-history={history}" in lines[0]
    assert "test_never" not in second.stdout  # stopped before running another suite's tests
    assert _runs(history) == 1  # nothing recorded for the run that did not start

    # the same from PYTEST_ADDOPTS, which pytest reads before its rootdir too
    env = _pytest(python, root, "-q", "--suitefit", addopts=f"--suitefit-history {history}")
    assert env.returncode == 4 and "Traceback" not in env.stderr + env.stdout, env.stdout + env.stderr
    assert f"write --suitefit-history={history}" in env.stderr and _runs(history) == 1

    equals = _pytest(python, root, "-q", "--suitefit", f"--suitefit-history={history}")
    assert equals.returncode == 0, equals.stdout + equals.stderr
    assert "1 passed" in equals.stdout and _runs(history) == 2

    # inside the suite the rootdir stays, with or without paths named (whose common ancestor,
    # tests/, the history is not in: pytest still finds the same config above both)
    inside = root / ".suitefit" / "own.sqlite"
    for named in ((), ("tests/test_a.py",), ()):
        ok = _pytest(python, root, "-q", "--suitefit", "--suitefit-history", str(inside), *named)
        assert ok.returncode == 0, ok.stdout + ok.stderr
    assert _runs(inside) == 3
