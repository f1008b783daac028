"""What does the end of a run cost? Time from the last test's end to the command's exit.

A tiny suite (four files of quick tests; with ``--pool``, two of them start a
spawn-context ``multiprocessing`` pool, which starts multiprocessing's resource
tracker) is run by ``suitefit run --workers N`` and by plain ``pytest -n N`` (and
with ``--workers 1`` by plain serial pytest), interleaved, ``--runs`` times each
after one discarded warm-up. Every test appends the wall clock at its end to a
file; the end cost is the command's exit time minus the latest of those. The
difference between the two commands is what suitefit adds at the end (journal,
recording, reaping, closing lines). Nothing leaked here, so the target is that
difference < 0.2 s. On a loaded machine the interpreters' own exits make that
difference noisy, so for ``suitefit run`` it also prints the session's end: from the
last test's end to the moment suitefit recorded the run's end (``runs.finished``),
which holds the workers' and the controller's end-of-session work, reaping included,
and none of the interpreters' exits.

    .venv/bin/python benchmarks/bench_finish.py [--pool] [--workers 2] [--runs 7] [--src DIR]

``--src DIR`` puts DIR (a checkout's ``src``) first on PYTHONPATH: to measure an
older suitefit with the same venv. Prints medians (min-max); exit 1 when the
median difference is 0.2 s or more.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 0.2

TEST = """
import os, time
{imports}
def _done():
    with open(os.environ["ENDS_LOG"], "a") as f:
        f.write(repr(time.time()) + "\\n")
{pool}
def test_{i}_a():
    time.sleep(0.05)
    _done()
def test_{i}_b():
    time.sleep(0.05)
    _done()
"""

POOL = """
def test_{i}_pool():
    with multiprocessing.get_context("spawn").Pool(1) as p:
        assert p.map(abs, [-1]) == [1]
    _done()
"""


def make_suite(root: Path, pool: bool) -> None:
    (root / "tests").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    for i in range(4):
        with_pool = pool and i < 2
        (root / "tests" / f"test_f{i}.py").write_text(TEST.format(
            i=i, imports="import multiprocessing" if with_pool else "",
            pool=POOL.format(i=i) if with_pool else ""))


def session_end(cwd: Path, last_test_end: float) -> float | None:
    """For a `suitefit run`: the newest run's recorded end minus the last test's end."""
    import sqlite3

    db = cwd / ".suitefit" / "history.sqlite"
    if not db.exists():
        return None
    with sqlite3.connect(db) as c:
        row = c.execute("SELECT finished FROM runs ORDER BY id DESC LIMIT 1").fetchone()
    return None if row is None or row[0] is None else float(row[0]) - last_test_end


SESSION_ENDS: list[float] = []


def end_cost(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    log = cwd / "ends.log"
    log.unlink(missing_ok=True)
    res = subprocess.run(cmd, cwd=cwd, env={**env, "ENDS_LOG": str(log)}, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL, timeout=300)
    exited = time.time()
    if res.returncode != 0:
        raise SystemExit(f"bench_finish: {' '.join(cmd)} exited {res.returncode}: {res.stderr[-2000:]}")
    last = max(float(x) for x in log.read_text().split())
    if "suitefit" in cmd:
        s = session_end(cwd, last)
        if s is not None:
            SESSION_ENDS.append(s)
    return exited - last


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pool", action="store_true", help="two files start a spawn-context pool")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--src", type=Path, default=None, help="a checkout's src/ to put first on PYTHONPATH")
    a = ap.parse_args(argv)
    if a.workers < 1 or a.runs < 1:
        ap.error("--workers and --runs must be >= 1")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SUITEFIT_"))}
    if a.src is not None:
        env["PYTHONPATH"] = str(a.src.resolve())
    py = sys.executable
    xdist = ["-n", str(a.workers)] if a.workers > 1 else []
    cmds = {
        "suitefit run": [py, "-m", "suitefit", "run", "--workers", str(a.workers), "--", "-q", "-p", "no:cacheprovider"],
        "plain pytest": [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", *xdist],
    }
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_suite(root, a.pool)
        costs: dict[str, list[float]] = {k: [] for k in cmds}
        for cmd in cmds.values():
            end_cost(cmd, root, env)  # warm-up, discarded (and a first history for the plan)
        SESSION_ENDS.clear()
        for r in range(a.runs):
            order = list(cmds) if r % 2 == 0 else list(reversed(cmds))
            for name in order:
                costs[name].append(end_cost(cmds[name], root, env))
    load = os.getloadavg()[0]
    print(f"end cost (command exit - last test's end), {a.runs} runs, --workers {a.workers}, "
          f"{'spawn pool' if a.pool else 'no pool'}, load {load:.2f}:")
    for name, xs in costs.items():
        print(f"  {name:<13} median {statistics.median(xs):.3f} s  ({min(xs):.3f}-{max(xs):.3f})")
    if SESSION_ENDS:
        print(f"  suitefit run's session end (recorded end - last test's end) median "
              f"{statistics.median(SESSION_ENDS):.3f} s ({min(SESSION_ENDS):.3f}-{max(SESSION_ENDS):.3f})")
    diffs = [s - p for s, p in zip(costs["suitefit run"], costs["plain pytest"], strict=True)]
    d = statistics.median(diffs)
    print(f"  suitefit adds median {d:.3f} s ({min(diffs):.3f}-{max(diffs):.3f}) per run: "
          + ("target < 0.2 s met" if d < TARGET_S else "target < 0.2 s MISSED"))
    return 0 if d < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
