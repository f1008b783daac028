"""A file whose tests fork (a ``multiprocessing`` pool, fork start): its children map the
worker's pages, so what it adds to the tree grows with the worker it runs on.

Found on pytest's own suite: ``testing/_py/test_local.py`` opens a two-process ``Pool``
and read +182 MiB on a 94 MiB process, +271 MiB on a 146 MiB one; the plans predicted its
serial figure wherever it went, and the run's peak came out 10-13% over them. Watched here
on real processes: the profile measures the forks' share, the plan scales it with what the
worker has kept by the time the file runs, and `suitefit run` peaks where the plan said.
"""

from __future__ import annotations

import sqlite3
import subprocess
from dataclasses import replace
from pathlib import Path

from clihelp import suitefit as cli
from test_kept_memory import CONFTEST, KEEPS_MB, keeper, run_planned

from suitefit.config import load_config
from suitefit.costs import load_cost_model
from suitefit.model import Budget
from suitefit.plan import make_plan

KEEPERS = 4
# Each keeper keeps 40 MiB, touched, for the process's life; it runs longer than the forking
# file (~0.6 s), so a one-worker plan (longest first) runs the forks last, on a worker 160 MiB larger
# than the one the serial profile (alphabetical: the forks first) measured them on.
KEEPER = keeper(1.5)
FORKS = """
import multiprocessing
import time

import pytest

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork with threads: 3.12+


def _idle(_):
    time.sleep(0.5)
    return 0


def test_pool():
    held = bytearray(60 * 2**20)  # allocated before it forks: in each fork, wherever it runs
    held[::4096] = b"x" * len(held[::4096])
    with multiprocessing.get_context("fork").Pool(2) as pool:
        assert pool.map(_idle, range(2)) == [0, 0]
"""
# A child that execs (``subprocess``) maps its own program, not the worker: not a fork. Last
# in the profile, so that every keeper has a next file to read what it kept from.
EXECS = """
import subprocess
import sys

def test_child():
    subprocess.run([sys.executable, "-c", "import time; b = bytearray(30 * 2**20); time.sleep(0.5)"], check=True)
"""


def _project(root: Path) -> None:
    (root / "tests").mkdir()
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    (root / "tests" / "conftest.py").write_text(CONFTEST)
    (root / "tests" / "test_a_forks.py").write_text(FORKS)
    (root / "tests" / "test_z_execs.py").write_text(EXECS)
    for i in range(KEEPERS):
        (root / "tests" / f"test_k{i}.py").write_text(KEEPER)


def test_a_forking_file_is_predicted_as_large_as_the_worker_it_runs_on(tmp_path: Path) -> None:
    def suitefit(*args: str) -> subprocess.CompletedProcess[str]:
        return cli(*args, cwd=tmp_path)

    _project(tmp_path)
    prof = suitefit("profile", "--", "-q")
    assert prof.returncode == 0, prof.stderr
    with sqlite3.connect(tmp_path / ".suitefit" / "history.sqlite") as db:
        rows = {p: (fork_mb, forks, of_mb, peak) for p, fork_mb, forks, of_mb, peak in db.execute(
            "SELECT path, fork_mb, forks, fork_of_mb, peak_mb FROM files")}
    fork_mb, forks, of_mb, peak = rows["tests/test_a_forks.py"]
    assert forks == 2, rows  # the pool's two children, seen in the file's peak
    assert 0.6 * peak <= fork_mb <= peak, rows  # most of what the file added
    assert of_mb > 0.5 * (fork_mb / 2 - 60), rows  # each maps much of the worker as the file began
    assert rows["tests/test_z_execs.py"][:2] == (0.0, 0), rows  # its child exec'd: its own program
    assert all(rows[f"tests/test_k{i}.py"][:2] == (0.0, 0) for i in range(KEEPERS)), rows

    costs, _ = load_cost_model(load_config(tmp_path))
    budget = Budget(100_000, 1, workers=1)
    plan = make_plan(costs, budget)
    order = [f for u in plan.units for f in u.files]
    assert order.index("tests/test_a_forks.py") > max(order.index(f"tests/test_k{i}.py") for i in range(KEEPERS))
    assert any(r.startswith("forks: 1 file(s) fork their worker") and "tests/test_a_forks.py, 2 fork(s)" in r
               for r in plan.reasons), plan.reasons  # `suitefit plan` says so
    blind = make_plan(replace(costs, files=tuple(replace(fc, forks=0) for fc in costs.files)), budget)
    # the forks on a worker that has kept ~160 MiB more: each ~160 MiB larger
    assert plan.predicted_peak_mb - blind.predicted_peak_mb >= 2 * (KEEPERS - 1) * KEEPS_MB * 0.8, \
        (plan.predicted_peak_mb, blind.predicted_peak_mb)

    measured, predicted, res = run_planned(suitefit, plan, workers=1)
    print(f"forks: measured {measured} MiB, predicted {predicted}, without forks {blind.predicted_peak_mb:.0f}")
    assert abs(predicted - measured) <= 0.15 * measured, res.stderr
    assert blind.predicted_peak_mb < 0.8 * measured  # without them, the prediction was far under


# A process with a fork and an exec'd child whose command line is its own (as pytester's
# inner xdist workers have the outer worker's): only the fork is one.
FAMILY = r"""
import os, subprocess, sys, time
if os.environ.get("ROLE") == "child":
    time.sleep(30)
    sys.exit(0)
pid = os.fork()
if pid == 0:
    time.sleep(30)
    os._exit(0)
same = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[1]], env={**os.environ, "ROLE": "child"})
print(pid, same.pid, flush=True)
time.sleep(30)
"""


def test_forks_are_told_from_children_that_exec_the_same_command_line() -> None:
    import sys
    import time

    from suitefit.measure.proctree import tree_parents
    from suitefit.measure.treereader import Forks

    p = subprocess.Popen([sys.executable, "-c", FAMILY, FAMILY], stdout=subprocess.PIPE, text=True)
    try:
        fork, same = map(int, p.stdout.readline().split())  # type: ignore[union-attr]
        assert Path(f"/proc/{same}/cmdline").read_bytes() == Path(f"/proc/{p.pid}/cmdline").read_bytes()  # premise
        forks = Forks()
        rss = {fork: 10.0, same: 20.0}
        seen = []
        for _ in range(3):  # judged at first sight, read again at the second, then kept
            time.sleep(0.05)
            kids = [k for k in tree_parents(p.pid) if k != p.pid]
            seen.append(forks.of(p.pid, kids, rss))
        assert seen == [((fork, 10.0),)] * 3
    finally:
        p.kill()
        p.wait()
