"""Where `suitefit run`'s wall goes against `pytest -n 2`'s, phase by phase.

A `-p` plugin (this file, loaded by pytest in the controller and in every worker) writes
wall-clock stamps relative to the command's start (``BENCH_T0``) at configure, session
start, each worker's first test and the end of each worker's last test. Pairs of commands
alternate; for each run it prints:

    start->session   from the command's start to the controller's session start
    ->first test     to the first test any worker starts
    tests            to the end of the last test (imbalance: between the workers' last ends)
    ->exit           from there to the command's exit; split, from the same point: the
                     controller's session finish, the last worker's unconfigure, the
                     controller's unconfigure, its first and its last atexit handler (the
                     rest is the interpreter's teardown and the command's end)

    python benchmarks/bench_phases.py --suite DIR [--pairs 4] [--dist worksteal] [-- PYTEST ARGS]

The suite needs a history (`suitefit profile` first). Medians of the phases end the output.
"""

from __future__ import annotations

import argparse
import atexit
import glob
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

_DIR = os.environ.get("BENCH_PHASES_DIR", "")
_T0 = float(os.environ.get("BENCH_T0", "0") or 0)
_first = [True]
if _DIR:  # registered at import (``-p``), before any plugin's own: runs after them all
    atexit.register(lambda: _say("atexit-last"))


def _say(what: str) -> None:
    if not _DIR:
        return
    wid = os.environ.get("PYTEST_XDIST_WORKER", "ctl")
    with open(os.path.join(_DIR, f"{wid}.log"), "a") as f:
        f.write(f"{time.time() - _T0:.4f} {what}\n")


def pytest_configure(config: object) -> None:
    _say("configure")


def pytest_sessionstart(session: object) -> None:
    _say("sessionstart")


def pytest_runtest_logstart(nodeid: str, location: object) -> None:
    if _first[0] and "PYTEST_XDIST_WORKER" in os.environ:
        _first[0] = False
        _say("first")


def pytest_runtest_logfinish(nodeid: str, location: object) -> None:
    if _DIR and "PYTEST_XDIST_WORKER" in os.environ:
        with open(os.path.join(_DIR, f"last-{os.environ['PYTEST_XDIST_WORKER']}"), "w") as f:
            f.write(f"{time.time() - _T0:.4f}\n")


# The end, in each process: where its session finish begins (before every other plugin's),
# where its unconfigure ends (after every other's), and its interpreter's exit: the first
# atexit handler to run (registered at unconfigure) and the last (registered when pytest
# imported this module); what follows that is the interpreter's own teardown.
@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: object) -> None:
    _say("sessionfinish")


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: object) -> None:
    _say("unconfigured")
    if _DIR:
        atexit.register(_say, "atexit")


def _run(cmd: list[str], suite: Path, work: Path) -> dict[str, float]:
    for f in work.iterdir():
        f.unlink()
    env = dict(os.environ, BENCH_PHASES_DIR=str(work), BENCH_T0=repr(time.time()),
               PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    t0 = float(env["BENCH_T0"])
    subprocess.run(cmd, cwd=suite, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   stdin=subprocess.DEVNULL, timeout=900)
    end = time.time() - t0
    stamps: dict[str, float] = {}
    for log in work.glob("*.log"):
        for line in log.read_text().splitlines():
            t, what = line.split(maxsplit=1)
            stamps.setdefault(f"{log.stem} {what}", float(t))
    lasts = sorted(float(Path(p).read_text()) for p in glob.glob(str(work / "last-*")))
    session = stamps["ctl sessionstart"]
    first = min(v for k, v in stamps.items() if k.endswith(" first"))
    last = lasts[-1]
    workers_out = [v for k, v in stamps.items() if k.endswith(" unconfigured") and not k.startswith("ctl ")]
    nan = float("nan")
    return {"start->session": session, "->first test": first - session, "tests": last - first,
            "imbalance": last - lasts[0], "->exit": end - last,
            # the exit, split: to the controller's session finish, to the last worker's
            # unconfigure, to the controller's unconfigure, its atexit, and its process's end
            "ctl finish": stamps.get("ctl sessionfinish", nan) - last,
            "workers out": (max(workers_out) if workers_out else nan) - last,
            "ctl unconf": stamps.get("ctl unconfigured", nan) - last,
            "ctl atexit": stamps.get("ctl atexit", nan) - last,
            "ctl atexit-last": stamps.get("ctl atexit-last", nan) - last,
            "total": end}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--suite", type=Path, required=True)
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--dist", default="worksteal", help="xdist mode to pair against")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("args", nargs="*", help="pytest arguments (after --)")
    a = ap.parse_args(argv)
    suitefit = str(Path(a.python).parent / "suitefit")
    plugin = ["-p", "bench_phases"]
    cmds = {
        f"-n 2 --dist {a.dist}": [a.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
                                  "--dist", a.dist, *plugin, *a.args],
        "suitefit run": [suitefit, "run", "--", "-q", *plugin, *a.args],
    }
    got: dict[str, list[dict[str, float]]] = {k: [] for k in cmds}
    with tempfile.TemporaryDirectory(prefix="bench-phases-") as tmp:
        work = Path(tmp)
        for _ in range(a.pairs):
            for name, cmd in cmds.items():
                r = _run(cmd, a.suite, work)
                got[name].append(r)
                print(f"{name:24} " + "  ".join(f"{k} {v:.3f}" for k, v in r.items()), flush=True)
    print("medians:")
    for name, rs in got.items():
        print(f"{name:24} " + "  ".join(f"{k} {statistics.median(r[k] for r in rs):.3f}" for k in rs[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
