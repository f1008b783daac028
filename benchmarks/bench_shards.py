"""Real shard runs: how even suitefit's 4 shards are, next to pytest-split's, on one suite.

The issue's claim: with history, the slowest shard's wall time is at most 10% above the
mean shard's on a generated suite of at least 200 files. This measures it with real
processes, and in the same run measures pytest-split's ``least_duration`` and
``duration_based_chunks`` on the same durations:

1. Generate a suite (benchmarks/gen_suite.py) of ``--files`` ordinary files whose
   per-file cost is spread out (2-4 tests each, each test burning 10-150 ms of CPU,
   drawn with a fixed seed), plus a pool-fixture group, two memory hogs and the
   declared order-dependent pair.
2. One serial seeding run, ``suitefit profile -- --store-durations``: it fills suitefit's
   history and pytest-split's durations file from the same run, so both splits start
   from the same durations.
3. ``--rounds`` rounds, methods interleaved (the order rotates each round): suitefit's N
   shards one after another (``suitefit run --workers 1 --shard K/N``, each shard with
   its own copy of the seeded history, as CI machines downloading one artifact would),
   then ``suitefit merge``; pytest-split's N groups per algorithm (serial pytest).
   Each shard's wall time is the whole process (``time.monotonic`` around it: start-up,
   collection of the whole suite, the tests, exit). Every method must run every
   collected test exactly once (suitefit: ``suitefit merge`` checks it; pytest-split:
   node ids from each group's JUnit XML, against ``pytest --collect-only``).

Everything runs in a benchmark-only venv under .venvs/ (tests/venvs.py) holding pytest,
pytest-xdist, pytest-split and suitefit (editable); pytest-split is installed nowhere else.
Prints the per-round and median slowest/mean per method; exit 1 when suitefit's median
slowest/mean is above 1.10 (or a method ran a test twice or never).

    python benchmarks/bench_shards.py [--files 240] [--shards 4] [--rounds 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests"))

from gen_suite import ORDINARY, Shape, generate  # noqa: E402
from venvs import make_venv  # noqa: E402

REQUIREMENTS = ("pytest==9.2.0", "pytest-xdist==3.8.0", "pytest-split==0.11.0")
ALGORITHMS = ("least_duration", "duration_based_chunks")
LIMIT = 1.10
POOL_SETUP_S = 0.8


def make_suite(out: Path, files: int, seed: int = 5) -> dict[str, object]:
    """A gen_suite suite whose ordinary files differ more in cost than gen_suite's cycle of 12."""
    shape = Shape(import_s=0.2, import_mb=20, pool_procs=2, pool_mb=20, pool_setup_s=POOL_SETUP_S,
                  pool_files=4, pool_tests=4, pool_test_ms=40, hogs_mb=[150, 250], files=files,
                  tests_per_file=3, test_ms=40, pair=True, declare_pair_group=True)
    manifest = generate(out, shape, "bench-shards")
    rnd = random.Random(seed)
    entries = manifest["files"]
    assert isinstance(entries, dict)
    for rel, info in entries.items():
        if info["kind"] != "ordinary":
            continue
        n = rnd.randint(2, 4)
        ms = int(min(150, max(10, rnd.lognormvariate(3.6, 0.6))))  # median ~37 ms
        (out / rel).write_text(ORDINARY.format(n=n, ms=ms))
        info.update(tests=n, cpu_ms=n * ms)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest


CPU_S: list[float] = []  # CPU seconds of each timed_run's process tree, in call order


def timed_run(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> tuple[float, int]:
    """Wall seconds of the whole process, and its exit code; output goes to ``log``.

    Its CPU seconds (user+system of the tree, from RUSAGE_CHILDREN) go to ``CPU_S``: on a
    busy machine wall time also measures the neighbours, CPU time measures only the work.
    """
    with open(log, "w") as f:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        rc = subprocess.run(cmd, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
        wall = time.monotonic() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU_S.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return wall, rc


def junit_ids(path: Path) -> tuple[list[str], list[str]]:
    """``classname::name`` of every test case in a JUnit XML file, and of those that failed."""
    ids, failed = [], []
    for tc in ET.parse(path).getroot().iter("testcase"):
        ids.append(f"{tc.get('classname')}::{tc.get('name')}")
        if tc.find("failure") is not None or tc.find("error") is not None:
            failed.append(ids[-1])
    return ids, failed


def junit_key(nodeid: str) -> str:
    """The JUnit ``classname::name`` of a pytest node id (module-level tests only)."""
    path, name = nodeid.split("::", 1)
    return f"{path.removesuffix('.py').replace('/', '.')}::{name}"


class Bench:
    def __init__(self, suite: Path, work: Path, py: Path, shards: int) -> None:
        self.suite, self.work, self.py, self.n = suite, work, py, shards
        self.bin = py.parent
        self.env = {**os.environ, "PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}"}
        for var in ("CI_NODE_INDEX", "CI_NODE_TOTAL", "CIRCLE_NODE_INDEX", "CIRCLE_NODE_TOTAL",
                    "BUILDKITE_PARALLEL_JOB", "BUILDKITE_PARALLEL_JOB_COUNT", "PYTEST_ADDOPTS"):
            self.env.pop(var, None)
        self.history = work / "seed.sqlite"
        self.durations = work / "durations.json"
        self.collected: list[str] = []
        self.last_files: list[list[str]] = []  # the file of every test each shard ran, last round

    def seed(self) -> float:
        wall, rc = timed_run([str(self.bin / "suitefit"), "profile", f"--history={self.history}", "--",
                              "-q", "--store-durations", f"--durations-path={self.durations}"],
                             self.suite, self.env, self.work / "seed.log")
        if rc != 0:
            raise SystemExit(f"seeding run failed (exit {rc}); see {self.work / 'seed.log'}")
        res = subprocess.run([str(self.py), "-m", "pytest", "--collect-only", "-q"], cwd=self.suite,
                             env=self.env, capture_output=True, text=True, check=True)
        self.collected = [ln for ln in res.stdout.splitlines() if "::" in ln]
        return wall

    def suitefit_round(self, r: int) -> tuple[list[float], list[float], list[str], str]:
        """(process wall per shard, suitefit's own recorded wall per shard, failed tests, problem or '')."""
        walls, results = [], []
        for k in range(1, self.n + 1):
            hist = self.work / f"r{r}-s{k}" / "history.sqlite"
            hist.parent.mkdir(parents=True)
            shutil.copy(self.history, hist)
            result = hist.parent / f"shard-{k}-of-{self.n}.json"
            wall, rc = timed_run([str(self.bin / "suitefit"), "run", f"--history={hist}", "--workers", "1",
                                  "--shard", f"{k}/{self.n}", f"--result={result}", "--", "-q"],
                                 self.suite, self.env, hist.parent / "run.log")
            walls.append(wall)
            results.append(result)
            if rc not in (0, 1):  # 1: tests failed, counted below
                return walls, [], [], f"shard {k} exit {rc} (see {hist.parent / 'run.log'})"
        merged = self.work / f"r{r}-merged.sqlite"
        res = subprocess.run([str(self.bin / "suitefit"), "merge", f"--history={merged}", "--json",
                              *map(str, results)], cwd=self.suite, env=self.env, capture_output=True, text=True)
        if res.returncode not in (0, 1):  # 1: all ran exactly once, some failed
            return walls, [], [], f"suitefit merge exit {res.returncode}: {res.stderr.strip()[-300:]}"
        summary = json.loads(res.stdout)
        if summary["tests"] != len(self.collected):
            return walls, [], [], f"merge counted {summary['tests']} tests, collect-only {len(self.collected)}"
        self.last_files = [[t["file"] for t in json.loads(p.read_text())["tests"]] for p in results]
        return walls, [float(w) for w in summary["shard_wall_s"]], list(summary["failed"]), ""

    def split_round(self, r: int, algo: str) -> tuple[list[float], list[str], str]:
        walls: list[float] = []
        failed: list[str] = []
        seen: Counter[str] = Counter()
        self.last_files = []
        for k in range(1, self.n + 1):
            d = self.work / f"r{r}-{algo}-{k}"
            d.mkdir(parents=True)
            xml = d / "junit.xml"
            wall, rc = timed_run([str(self.py), "-m", "pytest", "-q",
                                  f"--splits={self.n}", f"--group={k}", f"--splitting-algorithm={algo}",
                                  f"--durations-path={self.durations}", f"--junitxml={xml}"],
                                 self.suite, self.env, d / "run.log")
            walls.append(wall)
            if rc not in (0, 1, 5):  # 1: tests failed (counted), 5: an empty group
                return walls, failed, f"group {k} exit {rc} (see {d / 'run.log'})"
            ids, bad = junit_ids(xml)
            seen.update(ids)
            self.last_files.append([i.split("::")[0].replace(".", "/") + ".py" for i in ids])
            failed += bad
        want = Counter(junit_key(n) for n in self.collected)
        if seen != want:
            twice = sum(1 for t, c in seen.items() if c > 1)
            never = sum(1 for t in want if t not in seen)
            return walls, failed, f"{twice} test(s) ran twice, {never} never"
        return walls, failed, ""


def designed_work(shards: list[list[str]], manifest: dict[str, dict[str, object]], pool_setup_s: float
                   ) -> list[float]:
    """Seconds of CPU each shard's tests burn by design (the manifest), plus the pool's start-up
    in every shard that runs a pool file: the balance free of the machine's load."""
    out = []
    for files in shards:
        per_test = [int(manifest[f].get("cpu_ms", 0)) / int(manifest[f]["tests"]) / 1000  # type: ignore[call-overload]
                    for f in files]
        pool = any(manifest[f]["kind"] == "pool" for f in files)
        out.append(sum(per_test) + (pool_setup_s if pool else 0.0))
    return out


def ratio(walls: list[float]) -> float:
    return max(walls) / statistics.mean(walls)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=240, help="ordinary files (the pool, hogs, pair add 8)")
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep", type=Path, default=None, help="work here and keep the logs (default: a temp dir)")
    args = ap.parse_args()
    if args.files < 1 or args.shards < 2 or args.rounds < 1:
        print("bench_shards: --files >= 1, --shards >= 2 and --rounds >= 1", file=sys.stderr)
        return 2
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench-shards-"))
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    t_start = time.monotonic()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    py = make_venv(REQUIREMENTS, with_suitefit=True)
    suite = work / "suite"
    manifest = make_suite(suite, args.files)
    files = manifest["files"]
    assert isinstance(files, dict)
    cpu_s = sum(int(i.get("cpu_ms", 0)) for i in files.values()) / 1000
    bench = Bench(suite, work, py, args.shards)
    seed_wall = bench.seed()
    print(f"suite: {len(files)} test files, {len(bench.collected)} tests, {cpu_s:.1f} s of test CPU "
          f"(+ pool setup, hogs, per-process import); seeding serial run {seed_wall:.1f} s")
    from suitefit.config import load_config
    from suitefit.costs import load_costs_or_discover
    from suitefit.plan import shard_split

    costs, _, _ = load_costs_or_discover(load_config(suite), bench.history)
    split = shard_split(costs, args.shards)
    print(f"suitefit's predicted work per shard (from the seeded history): "
          f"{' '.join(f'{x:.1f}' for x in split.work_s)} s, slowest/mean {ratio(list(split.work_s)):.3f}")
    methods = ["suitefit", *ALGORITHMS]
    walls: dict[str, list[list[float]]] = {m: [] for m in methods}
    inner: list[list[float]] = []
    fails: dict[str, list[int]] = {m: [] for m in methods}
    cpus: dict[str, list[list[float]]] = {m: [] for m in methods}
    design: dict[str, list[list[float]]] = {m: [] for m in methods}
    problems: list[str] = []
    for r in range(args.rounds):
        order = methods[r % len(methods):] + methods[:r % len(methods)]
        for m in order:
            first = len(CPU_S)
            if m == "suitefit":
                w, own, bad, problem = bench.suitefit_round(r)
                if own:
                    inner.append(own)
            else:
                w, bad, problem = bench.split_round(r, m)
            fails[m].append(len(bad))
            if problem:
                problems.append(f"round {r + 1} {m}: {problem}")
                print(f"round {r + 1} {m}: FAILED: {problem}")
                continue
            walls[m].append(w)
            cpus[m].append(CPU_S[first:first + len(w)])
            design[m].append(designed_work(bench.last_files, files, POOL_SETUP_S))
            print(f"round {r + 1} {m:22s} shards {' '.join(f'{x:5.1f}' for x in w)} s  "
                  f"slowest/mean {ratio(w):.3f} (CPU {ratio(cpus[m][-1]):.3f}, work by design "
                  f"{ratio(design[m][-1]):.3f})  all {len(bench.collected)} tests ran once, "
                  f"{len(bad)} failed{' (' + ', '.join(bad) + ')' if bad else ''}", flush=True)
    print(f"\n{args.shards} shards, {args.rounds} round(s), medians over rounds "
          f"(process wall per shard, serial: one process each)")
    print(f"{'method':24s}{'slowest/mean':>13s}{'slowest s':>11s}{'mean s':>9s}{'sum s':>8s}{'failed':>8s}{'CPU s/m':>9s}{'work s/m':>10s}  per round")
    med: dict[str, float] = {}
    for m in methods:
        if not walls[m]:
            print(f"{m:24s}{'no data':>13s}")
            continue
        rs = [ratio(w) for w in walls[m]]
        med[m] = statistics.median(rs)
        print(f"{m:24s}{med[m]:13.3f}{statistics.median(max(w) for w in walls[m]):11.1f}"
              f"{statistics.median(statistics.mean(w) for w in walls[m]):9.1f}"
              f"{statistics.median(sum(w) for w in walls[m]):8.1f}{max(fails[m]):8d}"
              f"{statistics.median(ratio(c) for c in cpus[m]):9.3f}"
              f"{statistics.median(ratio(c) for c in design[m]):10.3f}  "
              f"{' '.join(f'{x:.3f}' for x in rs)}")
    if inner:
        print(f"suitefit's own recorded shard walls (pytest session only), slowest/mean per round: "
              f"{' '.join(f'{ratio(w):.3f}' for w in inner)}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"benchmark took {time.monotonic() - t_start:.0f} s; work dir {work}")
    for p in problems:
        print(f"PROBLEM: {p}")
    ok = not problems and "suitefit" in med and med["suitefit"] <= LIMIT and not any(fails["suitefit"])
    print(f"suitefit slowest/mean {med.get('suitefit', float('nan')):.3f} "
          f"{'<=' if ok else 'NOT <='} {LIMIT:.2f}: {'PASS' if ok else 'FAIL'}")
    if args.keep is None and ok:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
