"""Where does measuring cost? The parts of suitefit's overhead, each measured on its own.

``bench_overhead.py`` gives the whole (paired runs of a real suite against plain
pytest); this script splits it, in counts and CPU time, which a shared machine
disturbs far less than wall time:

``imports``  ms of imports (``-X importtime``, summed self times) that suitefit adds:
             to a plain ``pytest`` run (the plugin is installed), to ``pytest --suitefit``,
             and in the sampler process (``watcher.py``).
``sampler``  the sampler process on its own (started, run and stopped as a session does,
             on an idle tree of 4 processes): CPU ms of a start and stop with no sampling
             to speak of, µs of CPU per sample, and ``python -c pass`` for reference.
``hooks``    the recorder's per-test hook bodies alone, in a process of their own (real
             TestReports, stand-in items, a real FIFO and history; no pytest, no pluggy):
             µs per test, and µs more per file (one-test files).
``session``  ``pytest`` against ``pytest --suitefit`` on generated suites of trivial tests,
             a ``-p`` probe plugin in both reading this process's own CPU time (getrusage)
             where the test loop begins and ends and at exit: start (interpreter start to
             the first test: imports, configure, sampler spawn, history, collection) and
             end (last test to exit: sampler stop, queries, summary), both on a 10-test
             suite; µs per test (the loop, 10 files of many tests: hooks, pluggy, and what
             suitefit's allocations cost the garbage collector); µs per file (one-test files,
             less the per-test part). The sampler process's CPU is outside these (``sampler``).
             Per-test figures are differences of ~5 s loops: on a busy machine a pair can be
             off by ±10 µs; the pairs are printed.
``workers``  ``pytest -n N`` against ``pytest -n N --suitefit`` (``--workers-n``, default 2) on the
             per-test suite, or on ``--suite``: every pytest process (the controller and
             each xdist worker) writes its own CPU (getrusage) at its unconfigure; the
             controller's and the workers' (summed) CPU per test, suitefit - plain. With
             N no larger than the CPUs the workers do not fight each other for them; at
             N = CPUs (2 here) the same per-test work costs more (caches, switches).
``sched``    the xdist controller's scheduler per test, replayed in one process without
             workers (fake nodes; a plan of one unit per file of 165 tests; a real journal):
             suitefit's adapter and core (``xdist_sched.py``, ``plan/core.py``) against
             xdist's own ``LoadScheduling`` and ``LoadFileScheduling``, CPU of the loop,
             xdist's per-event ``tests_finished``/``has_pending`` included.

Each figure is the median of ``--reps`` runs (pairs alternate who goes first), after
one discarded run of each.

``--bytecode as-is`` (the default) runs everything in the environment as given. Where
PYTHONDONTWRITEBYTECODE is set, every run then compiles every suitefit module it
imports from source: in the sampler process, and in pytest's process, where pytest
parses and rewrites every module of a plugin's package (assertion rewriting) and can
keep the result only where it may write bytecode. ``--bytecode cached`` measures the
usual case instead: all runs without PYTHONDONTWRITEBYTECODE and with a fresh
PYTHONPYCACHEPREFIX, so that the discarded runs leave every module's bytecode
(pytest's, the suite's, suitefit's, pytest's rewritten copies) cached for the others
(nothing is written into the source tree). The difference between the two is what
compiling costs.

    .venv/bin/python benchmarks/bench_overhead_parts.py [--parts imports,sampler,hooks,session,sched,workers]
        [--reps 5] [--tests 20000] [--files 2000] [--bytecode as-is|cached] [--suite DIR] [--json OUT]

``--suite DIR`` adds the ``session`` probe on a real suite (``--parts ''`` for that alone):
start, test loop and end of pytest's process, and the sampler process's CPU. With
``--parts workers`` alone it is the suite of that part instead:

    .venv/bin/python benchmarks/bench_overhead_parts.py --parts workers --suite DIR [--workers-n 2]

To compare two checkouts, put the other one's ``src`` first on PYTHONPATH:
``PYTHONPATH=/tmp/base/src .venv/bin/python benchmarks/bench_overhead_parts.py``.
Run it under ``nice -n 19`` on a shared machine; exit 0 unless a run fails.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gen_suite import copy_suite, order_dependent

PROBE = '''\
"""Reads this process's own CPU and wall time at the test loop's ends and at exit."""
import atexit, json, os, resource, time

import pytest

_T = {}


def _now():
    r = resource.getrusage(resource.RUSAGE_SELF)  # to the µs; os.times() counts 10 ms ticks
    return {"cpu": r.ru_utime + r.ru_stime, "wall": time.perf_counter()}


_T["import"] = _now()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtestloop(session):
    _T["loop0"] = _now()
    try:
        return (yield)
    finally:
        _T["loop1"] = _now()


def _write():
    _T["exit"] = _now()
    with open(os.environ["SUITEFIT_PROBE_OUT"], "w") as f:
        json.dump(_T, f)


atexit.register(_write)
'''


WORKERS_PROBE = '''\
"""Each pytest process (xdist's controller, every worker) appends its own CPU at its end."""
import json, os, resource

_TESTS = [0]  # what this process collected (a worker: the whole suite; the controller: nothing)


def pytest_collection_finish(session):
    _TESTS[0] = len(session.items)


def pytest_unconfigure(config):
    r = resource.getrusage(resource.RUSAGE_SELF)
    who = getattr(config, "workerinput", {}).get("workerid", "controller")
    with open(os.environ["SUITEFIT_PROBE_OUT"], "a") as f:
        f.write(json.dumps({"who": who, "cpu": r.ru_utime + r.ru_stime, "tests": _TESTS[0]}) + "\\n")
'''


PYCACHE: str | None = None  # --bytecode cached: every run's bytecode goes here


def _env(extra_path: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "SUITEFIT_", "PYTHONPROFILEIMPORTTIME"))}
    if PYCACHE is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = PYCACHE
    if extra_path:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), extra_path) if p)
    return env


def make_suite(root: Path, files: int, per_file: int) -> Path:
    root.mkdir(parents=True)
    (root / "pytest.ini").write_text("[pytest]\n")
    tests = root / "tests"
    tests.mkdir()
    for j in range(files):
        (tests / f"test_f{j:05d}.py").write_text("".join(f"def test_{i}():\n    pass\n\n" for i in range(per_file)))
    return root


def importtime_ms(stderr: str) -> dict[str, float]:
    """Module -> self ms, from ``-X importtime`` output."""
    out: dict[str, float] = {}
    for m in re.finditer(r"^import time:\s+(\d+) \|\s+\d+ \| ( *)(\S+)$", stderr, re.M):
        out[m.group(3)] = int(m.group(1)) / 1000
    return out


def run(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=1800)
    if p.returncode != 0:
        raise SystemExit(f"{p.stdout[-2000:]}\n{p.stderr[-2000:]}\nbench_overhead_parts.py: exited "
                         f"{p.returncode}: {' '.join(cmd)}")
    return p


# -- imports ------------------------------------------------------------------------------


PLAIN_IMPORT = r"""
import gc, json, resource, sys
import pytest
gc.disable()
before = set(sys.modules)
r0 = resource.getrusage(resource.RUSAGE_SELF)
import suitefit.plugin
r1 = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"ms": (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) * 1000,
                  "modules": sorted(set(sys.modules) - before)}))
"""


def part_imports(py: str, tmp: Path, reps: int) -> dict[str, Any]:
    """Import costs, with the garbage collector off (-p gcoff): a collection that an import
    happens to trigger in a big pytest process would count as that module's time; what
    suitefit's allocations cost the collector shows in the ``session`` part."""
    suite = make_suite(tmp / "one", 1, 1)
    gcoff = tmp / "gcoff"
    gcoff.mkdir()
    (gcoff / "suitefit_gcoff.py").write_text("import gc\n\ngc.disable()\n")
    hist = tmp / "imports.sqlite"
    base = [py, "-X", "importtime", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "suitefit_gcoff"]
    cases = {"plain": base, "suitefit": [*base, "--suitefit", f"--suitefit-history={hist}"]}
    for cmd in cases.values():  # discarded: bytecode, page cache
        run(cmd, suite, _env(str(gcoff)))
    sampler_once(py, tmp, 0.0)
    out: dict[str, Any] = {}
    # what a plain run loads because suitefit is installed: pytest loads plugins through
    # importlib, which -X importtime does not see; so, in a process that has pytest: CPU time
    plain = [json.loads(run([py, "-c", PLAIN_IMPORT], tmp, _env()).stdout) for _ in range(reps)]
    out["plain"] = {"ms": statistics.median(p["ms"] for p in plain), "modules": len(plain[0]["modules"]),
                    "top": [(m, float("nan")) for m in plain[0]["modules"]]}
    added: dict[str, list[dict[str, float]]] = {"suitefit": [], "sampler": []}
    for _ in range(reps):
        mods = {k: importtime_ms(run(cmd, suite, _env(str(gcoff))).stderr) for k, cmd in cases.items()}
        added["suitefit"].append({m: t for m, t in mods["suitefit"].items() if m not in mods["plain"]})
        # the sampler process: started as a session starts it, its imports on its stderr
        watcher = importtime_ms(sampler_once(py, tmp, 0.0, importtime=True)["stderr"])
        bare = importtime_ms(run([py, "-X", "importtime", "-c", "pass"], tmp, _env()).stderr)
        added["sampler"].append({m: t for m, t in watcher.items() if m not in bare})
    for k, runs in added.items():
        totals = [sum(r.values()) for r in runs]
        names = sorted({m for r in runs for m in r})
        per = {m: statistics.median(r.get(m, 0.0) for r in runs) for m in names}
        out[k] = {"ms": statistics.median(totals), "modules": len(names),
                  "top": sorted(per.items(), key=lambda kv: -kv[1])[:12]}
    return out


# -- the sampler process --------------------------------------------------------------------

SAMPLER_DRIVER = r'''
import json, os, subprocess, sys, time
from suitefit.history import History
from suitefit.measure.sampler import SamplerProcess

secs, hist, importtime = float(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
# an idle tree like a small run's: this process, one child with two children of its own
kid = subprocess.Popen([sys.executable, "-c",
    "import subprocess, sys, time\n"
    "ps = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']) for _ in range(2)]\n"
    "print(*[p.pid for p in ps], flush=True); time.sleep(120)"], stdout=subprocess.PIPE)
grandkids = [int(x) for x in kid.stdout.readline().split()]
h = History(hist)
run_id = h.new_run("bench", started=time.time())
sp = SamplerProcess(os.getpid(), history=hist, run_id=run_id, started_wall=time.time(), threshold_mb=None)
if importtime:  # the sampler process's imports on its stderr (ours is long decided)
    os.environ["PYTHONPROFILEIMPORTTIME"] = "1"
sp.start(sys.stderr)
time.sleep(secs)
peaks = sp.stop()
for pid in grandkids:
    os.kill(pid, 9)
kid.kill()
kid.wait()
print(json.dumps({"cpu_s": peaks.cpu_s, "samples": peaks.samples}))
'''


def sampler_once(py: str, tmp: Path, secs: float, importtime: bool = False) -> dict[str, Any]:
    fd, hist = tempfile.mkstemp(suffix=".sqlite", dir=tmp)
    os.close(fd)
    os.unlink(hist)
    p = subprocess.run([py, "-c", SAMPLER_DRIVER, str(secs), hist, "1" if importtime else "0"], cwd=tmp, env=_env(),
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"{p.stderr[-3000:]}\nbench_overhead_parts.py: the sampler driver failed")
    d = json.loads(p.stdout.strip().splitlines()[-1])
    d["stderr"] = p.stderr
    return dict(d)


def cpu_of(cmd: list[str], cwd: Path) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, cwd=cwd, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def part_sampler(py: str, tmp: Path, reps: int, secs: float) -> dict[str, Any]:
    sampler_once(py, tmp, 0.0)  # discarded
    short, long_ = [], []
    for _ in range(reps):
        short.append(sampler_once(py, tmp, 0.0))
        long_.append(sampler_once(py, tmp, secs))
    per_sample = [(b["cpu_s"] - a["cpu_s"]) / max(1, b["samples"] - a["samples"])
                  for a, b in zip(short, long_, strict=True)]
    bare = [cpu_of([py, "-c", "pass"], tmp) for _ in range(reps * 2)]
    return {
        "start_stop_ms": statistics.median(s["cpu_s"] for s in short) * 1000,
        "start_stop_samples": statistics.median(s["samples"] for s in short),
        "per_sample_us": statistics.median(per_sample) * 1e6,
        "samples_in_long": statistics.median(s["samples"] for s in long_),
        "long_s": secs,
        "python_pass_ms": statistics.median(bare) * 1000,
    }


# -- the session ------------------------------------------------------------------------------


def _probe_run(py: str, suite: Path, args: list[str], probe_dir: Path, out: Path) -> dict[str, Any]:
    env = {**_env(str(probe_dir)), "SUITEFIT_PROBE_OUT": str(out)}
    run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "suitefit_probe", *args], suite, env)
    t = json.loads(out.read_text())
    return {"start": t["loop0"]["cpu"], "loop": t["loop1"]["cpu"] - t["loop0"]["cpu"],
            "end": t["exit"]["cpu"] - t["loop1"]["cpu"], "wall_loop": t["loop1"]["wall"] - t["loop0"]["wall"]}


def _sampler_cpu(hist: Path) -> float | None:
    import sqlite3

    con = sqlite3.connect(hist)
    try:
        row = con.execute("SELECT meta FROM runs ORDER BY id DESC LIMIT 1").fetchone()
    finally:
        con.close()
    return json.loads(row[0]).get("sampler_cpu_s") if row else None


def _interleaved(reps: int, once: Callable[[str], dict[str, Any]], keys: Sequence[str],
                 show: Callable[[str], str]) -> dict[str, Any]:
    """One discarded run of each side (bytecode, page cache), then ``reps`` pairs, who goes
    first alternating; per key, each side's median and the median of the per-pair
    differences (suitefit - plain), with those differences. ``once(side)`` runs one side and
    returns its figures; ``show(tag)`` labels its progress lines."""
    for side in ("plain", "suitefit"):
        once(side)
    res: dict[str, list[dict[str, Any]]] = {"plain": [], "suitefit": []}
    for i in range(reps):
        for side in (("plain", "suitefit") if i % 2 == 0 else ("suitefit", "plain")):
            r = once(side)
            res[side].append(r)
            print(f"  {show(side)} {i + 1}/{reps} {side}: "
                  + ", ".join(f"{k} {r[k]:.3f} s" for k in keys), file=sys.stderr)
    out: dict[str, Any] = {"raw": res}
    for k in keys:
        deltas = [b[k] - a[k] for a, b in zip(res["plain"], res["suitefit"], strict=True)]
        out[k] = {s: statistics.median(r[k] for r in res[s]) for s in res}
        out[k]["delta"] = statistics.median(deltas)
        out[k]["deltas"] = deltas
    return out


def _pairs(py: str, suite: Path, tmp: Path, reps: int, probe_dir: Path, tag: str) -> dict[str, Any]:
    hist = tmp / f"{tag}.sqlite"
    sides = {"plain": [], "suitefit": ["--suitefit", f"--suitefit-history={hist}"]}

    def once(side: str) -> dict[str, Any]:
        r = _probe_run(py, suite, sides[side], probe_dir, tmp / "probe.json")
        if side == "suitefit":
            r["sampler"] = _sampler_cpu(hist)
        return r

    out = _interleaved(reps, once, ("start", "loop", "end"), lambda side: tag)
    out["sampler_cpu_s"] = statistics.median(r["sampler"] or 0.0 for r in out["raw"]["suitefit"])
    return out


def part_session(py: str, tmp: Path, reps: int, tests: int, files: int) -> dict[str, Any]:
    probe_dir = tmp / "probe"
    probe_dir.mkdir()
    (probe_dir / "suitefit_probe.py").write_text(PROBE)
    # start and end on a small suite (the big ones' collection is seconds, and noisy),
    # with twice the pairs: the runs are short
    small = make_suite(tmp / "small", 2, 5)
    per_file = max(1, tests // 10)
    many = make_suite(tmp / "many-tests", tests // per_file, per_file)
    n_tests = (tests // per_file) * per_file
    one = make_suite(tmp / "many-files", files, 1)
    s = _pairs(py, small, tmp, 2 * reps, probe_dir, "small")
    a = _pairs(py, many, tmp, reps, probe_dir, "tests")
    b = _pairs(py, one, tmp, reps, probe_dir, "files")
    per_test = a["loop"]["delta"] / n_tests
    return {
        "tests": n_tests, "files": files,
        "start_ms": s["start"]["delta"] * 1000,
        "end_ms": s["end"]["delta"] * 1000,
        "start_ms_big": a["start"]["delta"] * 1000,  # with collecting ``tests`` items (noisier)
        "per_test_us": per_test * 1e6,
        "per_test_pairs_us": [d / n_tests * 1e6 for d in a["loop"]["deltas"]],
        "plain_per_test_us": a["loop"]["plain"] / n_tests * 1e6,
        "per_file_us": (b["loop"]["delta"] / files - per_test) * 1e6,
        "sampler_cpu_s": a["sampler_cpu_s"],
        "raw": {"small": s, "tests": a, "files": b},
    }


# -- the recorder's hooks, in-process -------------------------------------------------------

HOOKS_DRIVER = r'''
import gc, json, os, pathlib, sys, tempfile, threading, time
import pytest
from suitefit.history import History
from suitefit.measure.channel import Receiver, Sender
from suitefit.measure.recorder import WorkerRecorder

n, per_file = int(sys.argv[1]), int(sys.argv[2])
tmp = tempfile.mkdtemp()
fifo = os.path.join(tmp, "fifo")
os.mkfifo(fifo)
rx = Receiver(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK), fifo)
got = [0]

def drain():  # the sampler process's part: read what the recorder writes, so that it never blocks
    while True:
        got[0] += len(rx.read())
        time.sleep(0.01)

threading.Thread(target=drain, daemon=True).start()
h = History(os.path.join(tmp, "h.sqlite"))
run_id = h.new_run("bench", started=time.time())
rec = WorkerRecorder(h, run_id, "main", Sender(fifo), reap_grace_s=3.0)

class Item:
    def __init__(self, nodeid, path):
        self.nodeid = nodeid
        self.path = path  # one object a file, as pytest's items of one file share theirs

paths = {}
items = [Item(f"tests/test_f{i // per_file:05d}.py::test_{i}",
              paths.setdefault(i // per_file, pathlib.Path(f"tests/test_f{i // per_file:05d}.py")))
         for i in range(n)]
reports = [[pytest.TestReport(it.nodeid, ("x", 1, "t"), {}, "passed", None, when, [], 0.001)
            for when in ("setup", "call", "teardown")] for it in items]
gc.collect()
t0 = time.thread_time()
for i, it in enumerate(items):
    g = rec.pytest_runtest_protocol(it, items[i + 1] if i + 1 < n else None)
    next(g)
    for r in reports[i]:
        rec.pytest_runtest_logreport(r)
    try:
        g.send(None)
    except StopIteration:
        pass
rec.flush()
t1 = time.thread_time()
print(json.dumps({"us": (t1 - t0) / n * 1e6}))
'''


def part_hooks(py: str, tmp: Path, reps: int, tests: int, files: int) -> dict[str, Any]:
    """The recorder's hook bodies alone (protocol wrapper, three reports, flushes; no pluggy),
    in a process of their own: real TestReports, stand-in items, a real FIFO and history."""
    def once(n: int, per_file: int) -> float:
        out = run([py, "-c", HOOKS_DRIVER, str(n), str(per_file)], tmp, _env()).stdout
        return float(json.loads(out.strip().splitlines()[-1])["us"])

    once(1000, 100)  # discarded
    per_test = statistics.median(once(tests, 1000) for _ in range(reps))
    one_file = statistics.median(once(files, 1) for _ in range(reps))
    return {"per_test_us": per_test, "per_file_us": one_file - per_test, "tests": tests, "files": files}


SCHED_DRIVER = r"""
import json, os, sys, tempfile, time
from pathlib import Path
from types import SimpleNamespace

from suitefit.measure.journal import Journal
from suitefit.model import Budget, Plan, Unit
from suitefit.xdist_sched import SuitefitScheduling
from xdist.scheduler.load import LoadScheduling
from xdist.scheduler.loadfile import LoadFileScheduling

n_files, per_file, which = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
files = [f"tests/test_f{j:05d}.py" for j in range(n_files)]
ids = [f"{f}::test_x[{i}]" for f in files for i in range(per_file)]


class Node:  # what a scheduler uses of xdist's WorkerController
    def __init__(self, name):
        self.gateway = SimpleNamespace(id=name, _io=SimpleNamespace(popen=SimpleNamespace(pid=os.getpid())))
        self.shutting_down = False
        self.queue = []  # what the worker was sent and has not run yet

    def send_runtest_some(self, indices): self.queue.extend(indices)
    def send_runtest_all(self): pass
    def shutdown(self): self.shutting_down = True
    def send_steal(self, indices): pass
    def ensure_teardown(self): pass


class Config:
    def getoption(self, name, default=None):
        return {"tx": ["popen", "popen"], "maxschedchunk": None, "dist": "load", "numprocesses": 2}.get(name, default)
    getvalue = getoption
    option = SimpleNamespace(loadscopereorder=True)


class Quiet:  # xdist's log producer, silent
    def __getattr__(self, name):
        return lambda *a: None


def replay(sched):
    # xdist's loop: a worker runs its first pending test once it has another one queued (or
    # is shutting down), reports it done; every event asks tests_finished and has_pending
    nodes = [Node("gw0"), Node("gw1")]
    for node in nodes:
        sched.add_node(node)
    for node in nodes:
        sched.add_node_collection(node, ids)
    sched.schedule()
    done = 0
    t0 = time.thread_time()
    while True:
        moved = False
        for node in nodes:
            p = node.queue
            if p and (len(p) >= 2 or node.shutting_down):
                sched.mark_test_complete(node, p.pop(0), 0.001)
                done += 1
                moved = True
            sched.tests_finished, sched.has_pending
        if not moved:
            break
    assert done == len(ids), (done, len(ids))
    return (time.thread_time() - t0) / done * 1e6


if which == "xdist":
    us = replay(LoadScheduling(Config(), log=Quiet()))
elif which == "loadfile":
    us = replay(LoadFileScheduling(Config(), log=Quiet()))
else:
    plan = Plan(workers=2, units=tuple(Unit(f, (f,), 0.2 + (j % 7) * 0.1, 20.0 + j % 5) for j, f in enumerate(files)),
                budget=Budget(memory_mb=20000, cpus=2), predicted_wall_s=1.0, predicted_peak_mb=0.0,
                reasons=("bench",))
    journal = Journal(Path(tempfile.mkdtemp()) / "inflight.json", 1, at_once_from_mb=10000.0)
    us = replay(SuitefitScheduling(Config(), lambda *a: None, plan, numnodes=2,
                                   live=lambda: (500.0, {"gw0": 200.0, "gw1": 200.0}), journal=journal))
print(json.dumps({"us": us}))
"""


def part_sched(py: str, tmp: Path, reps: int, tests: int) -> dict[str, Any]:
    """The controller's scheduler per test, replayed without processes (fake xdist nodes, a
    plan of one unit per file, a real journal): suitefit's adapter and core against xdist's
    own LoadScheduling and LoadFileScheduling, CPU of the replay loop (xdist's calls per event
    included). loadfile grows with the tests a worker was ever given (pytest-xdist issue 279:
    each completion counts every test assigned to its worker so far)."""
    per_file = 165
    n_files = max(1, tests // per_file)

    def once(which: str) -> float:
        out = run([py, "-c", SCHED_DRIVER, str(n_files), str(per_file), which], tmp, _env()).stdout
        return float(json.loads(out.strip().splitlines()[-1])["us"])

    once("suitefit")  # discarded
    got: dict[str, list[float]] = {"xdist": [], "suitefit": [], "loadfile": []}
    for i in range(reps):
        for which in (("xdist", "suitefit", "loadfile") if i % 2 == 0 else ("loadfile", "suitefit", "xdist")):
            got[which].append(once(which))
    return {"tests": n_files * per_file, "xdist_us": statistics.median(got["xdist"]),
            "suitefit_us": statistics.median(got["suitefit"]),
            "loadfile_us": statistics.median(got["loadfile"]), "raw": got}


def part_workers(py: str, tmp: Path, reps: int, tests: int, n: int, suite: Path | None) -> dict[str, Any]:
    """Per-process CPU under xdist: the controller's and the workers' (summed), suitefit - plain."""
    probe_dir = tmp / "probe-workers"
    probe_dir.mkdir()
    (probe_dir / "suitefit_workers_probe.py").write_text(WORKERS_PROBE)
    if suite is not None:
        where = copy_suite(suite, tmp / "workers-suite")
    else:
        per_file = max(1, tests // 10)
        where = make_suite(tmp / "workers-tests", tests // per_file, per_file)
    hist = tmp / "workers.sqlite"
    # the order-dependent consumer fails on the wrong worker, with or without suitefit
    plain = [f"--deselect={p}" for p in order_dependent(where)]
    sides = {"plain": plain, "suitefit": [*plain, "--suitefit", f"--suitefit-history={hist}"]}
    out_file = tmp / "workers-probe.jsonl"

    def once(side: str) -> dict[str, Any]:
        out_file.unlink(missing_ok=True)
        env = {**_env(str(probe_dir)), "SUITEFIT_PROBE_OUT": str(out_file)}
        run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "suitefit_workers_probe", "-n", str(n),
             *sides[side]], where, env)
        rows = [json.loads(ln) for ln in out_file.read_text().splitlines()]
        return {"controller": sum(r["cpu"] for r in rows if r["who"] == "controller"),
                "workers": sum(r["cpu"] for r in rows if r["who"] != "controller"),
                "processes": len({r["who"] for r in rows}),
                "tests": max(r["tests"] for r in rows)}  # what each worker collected

    r = _interleaved(reps, once, ("controller", "workers"), lambda side: "workers")
    runs = [x for side in r["raw"].values() for x in side]
    collected = max(x["tests"] for x in runs)
    d: dict[str, Any] = {"n": n, "tests": collected, "suite": str(suite) if suite else None,
                         "processes": min(x["processes"] for x in runs), "raw": r["raw"]}
    for k in ("controller", "workers"):
        d[f"{k}_plain_s"] = r[k]["plain"]
        d[f"{k}_us"] = r[k]["delta"] / max(1, collected) * 1e6
        d[f"{k}_pairs_us"] = [x / max(1, collected) * 1e6 for x in r[k]["deltas"]]
    return d


def part_suite(py: str, tmp: Path, reps: int, suite: Path) -> dict[str, Any]:
    """The session part's probe on a real suite: this process's start, loop and end, and the
    sampler process's CPU (``runs.meta.sampler_cpu_s``)."""
    probe_dir = tmp / "probe-suite"
    probe_dir.mkdir()
    (probe_dir / "suitefit_probe.py").write_text(PROBE)
    r = _pairs(py, copy_suite(suite, tmp / "suite-copy"), tmp, reps, probe_dir, "suite")
    return {"suite": str(suite), "start_ms": r["start"]["delta"] * 1000, "loop_ms": r["loop"]["delta"] * 1000,
            "loop_pairs_ms": [d * 1000 for d in r["loop"]["deltas"]], "end_ms": r["end"]["delta"] * 1000,
            "plain_cpu_s": r["start"]["plain"] + r["loop"]["plain"] + r["end"]["plain"],
            "sampler_cpu_s": r["sampler_cpu_s"], "raw": r}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_overhead_parts.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", default="imports,sampler,hooks,session,sched",
                    help="comma-separated: imports,sampler,hooks,session,sched,workers "
                         "(default: all but workers)")
    ap.add_argument("--workers-n", type=int, default=2, help="xdist workers of the workers part (default 2)")
    ap.add_argument("--reps", type=int, default=5, help="runs (pairs) per figure; medians (default 5)")
    ap.add_argument("--tests", type=int, default=20000, help="trivial tests in the per-test suite (default 20000)")
    ap.add_argument("--files", type=int, default=2000, help="one-test files in the per-file suite (default 2000)")
    ap.add_argument("--sampler-s", type=float, default=5.0, help="seconds of sampling for µs/sample (default 5)")
    ap.add_argument("--python", default=sys.executable, help="interpreter with suitefit installed")
    ap.add_argument("--suite", type=Path, default=None,
                    help="also split a real suite's overhead the same way (a copy of it; e.g. examples/heavy-suite)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument("--bytecode", choices=("as-is", "cached"), default="as-is",
                    help="as-is: the environment as given; cached: every module's bytecode cached "
                         "(see the module's docstring)")
    a = ap.parse_args(argv)
    parts = [p for p in a.parts.split(",") if p]
    bad = set(parts) - {"imports", "sampler", "hooks", "session", "sched", "workers"}
    if bad or a.reps < 1 or a.workers_n < 1:
        ap.exit(2, f"bench_overhead_parts.py: error: unknown part(s) {sorted(bad)}, --reps < 1 or --workers-n < 1\n")
    out: dict[str, Any] = {"load_before": _load(), "python": a.python, "started": time.time(),
                           "bytecode": a.bytecode,
                           "dont_write_bytecode": bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))}
    global PYCACHE
    with tempfile.TemporaryDirectory(prefix="suitefit-parts-") as t:
        tmp = Path(t)
        if a.bytecode == "cached":
            PYCACHE = str(tmp / "pycache")
        if "imports" in parts:
            out["imports"] = part_imports(a.python, tmp, a.reps)
        if "sampler" in parts:
            out["sampler"] = part_sampler(a.python, tmp, a.reps, a.sampler_s)
        if "hooks" in parts:
            out["hooks"] = part_hooks(a.python, tmp, a.reps, a.tests, a.files)
        if "session" in parts:
            out["session"] = part_session(a.python, tmp, a.reps, a.tests, a.files)
        if "sched" in parts:
            out["sched"] = part_sched(a.python, tmp, a.reps, a.tests)
        if "workers" in parts:
            out["workers"] = part_workers(a.python, tmp, a.reps, a.tests, a.workers_n, a.suite)
        if a.suite is not None and parts != ["workers"]:
            out["suite"] = part_suite(a.python, tmp, a.reps, a.suite)
    out["load_after"] = _load()
    report(out)
    if a.json:
        a.json.write_text(json.dumps(out, indent=2))
    return 0


def report(out: dict[str, Any]) -> None:
    print(f"load before {out['load_before']}, after {out['load_after']}; bytecode {out['bytecode']}"
          + (", PYTHONDONTWRITEBYTECODE set" if out["dont_write_bytecode"] else ""))
    if "imports" in out:
        for k, what in (("plain", "a plain `pytest` run, suitefit installed (CPU)"),
                        ("suitefit", "`pytest --suitefit` on top of that (importtime, GC off)"),
                        ("sampler", "the sampler process, beyond `python -c pass`")):
            d = out["imports"][k]
            top = ", ".join(m if t != t else f"{m} {t:.1f}" for m, t in d["top"][:8])  # t != t: NaN, no time
            print(f"imports, {what}: {d['ms']:.1f} ms ({d['modules']} modules; {top})")
    if "sampler" in out:
        d = out["sampler"]
        print(f"sampler process: start+stop {d['start_stop_ms']:.1f} ms CPU ({d['start_stop_samples']:.0f} samples); "
              f"{d['per_sample_us']:.0f} µs CPU per sample (4 processes, {d['samples_in_long']:.0f} samples in "
              f"{d['long_s']:g} s); `python -c pass`: {d['python_pass_ms']:.1f} ms")
    if "hooks" in out:
        d = out["hooks"]
        print(f"recorder hooks alone (in-process): {d['per_test_us']:.1f} µs per test ({d['tests']} tests), "
              f"{d['per_file_us']:+.1f} µs more per file ({d['files']} one-test files)")
    if "session" in out:
        d = out["session"]
        print(f"session (this process's CPU, suitefit - plain): start {d['start_ms']:+.1f} ms, "
              f"{d['per_test_us']:+.1f} µs per test (plain {d['plain_per_test_us']:.0f} µs; {d['tests']} tests; "
              f"pairs {' '.join(f'{x:+.0f}' for x in d['per_test_pairs_us'])}), "
              f"{d['per_file_us']:+.1f} µs per file ({d['files']} one-test files), end {d['end_ms']:+.1f} ms; "
              f"sampler process {d['sampler_cpu_s']:.3f} s CPU over the per-test suite")


    if "sched" in out:
        d = out["sched"]
        print(f"controller's scheduler per test (replayed, no processes; {d['tests']} tests, files of 165): "
              f"suitefit's adapter and core {d['suitefit_us']:.1f} µs, xdist's LoadScheduling {d['xdist_us']:.1f} µs, "
              f"LoadFileScheduling {d['loadfile_us']:.1f} µs")
    if "workers" in out:
        d = out["workers"]
        print(f"under xdist -n {d['n']} ({d['tests']} tests{', ' + d['suite'] if d['suite'] else ''}; "
              f"each process's own CPU, suitefit - plain): controller {d['controller_us']:+.1f} µs per test "
              f"(plain's {d['controller_plain_s']:.2f} s; pairs {' '.join(f'{x:+.0f}' for x in d['controller_pairs_us'])}), "
              f"workers {d['workers_us']:+.1f} µs per test (plain's {d['workers_plain_s']:.2f} s; "
              f"pairs {' '.join(f'{x:+.0f}' for x in d['workers_pairs_us'])})")
    if "suite" in out:
        d = out["suite"]
        print(f"suite {d['suite']} (this process's CPU, suitefit - plain; plain's own {d['plain_cpu_s']:.2f} s): "
              f"start {d['start_ms']:+.0f} ms, test loop {d['loop_ms']:+.0f} ms "
              f"(pairs {' '.join(f'{x:+.0f}' for x in d['loop_pairs_ms'])}), end {d['end_ms']:+.0f} ms; "
              f"sampler process {d['sampler_cpu_s'] * 1000:.0f} ms")


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


if __name__ == "__main__":
    sys.exit(main())
