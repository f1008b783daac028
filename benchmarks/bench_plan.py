"""How fast the planner is on a big history, and how even its shards are.

1. Planning speed: a synthetic history of 100,000 tests in 5,000 files (3 recorded
   runs on 4 workers, pool fixtures and memory hogs included), written through the
   real History API into SQLite. Timed: reading the cost model from the history,
   ``make_plan``, ``plan_shards`` for 4 shards and one shard's ``make_plan``.
   Medians of ``--reps`` runs; the targets are < 2 s each.
2. Shard balance (``--compare``): the same per-test durations split into N shards
   by suitefit and by pytest-split's ``least_duration`` and ``duration_based_chunks``
   (pytest-split installed in a benchmark-only venv under .venvs/). Each shard's
   predicted work counts the setup of every pool fixture it must start; reported
   as slowest shard / mean shard, plus how many fixture groups each split tore apart.

    python benchmarks/bench_plan.py [--reps 5] [--cpus 4 16] [--compare]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from suitefit.costs import build_cost_model
from suitefit.history import FileRecord, FixtureRecord, History, TestRecord, WorkerRecord
from suitefit.model import Budget, CostModel, FileCost, FixtureCost, WorkerCost
from suitefit.plan import make_plan, plan_shards, shard_split

ROOT = Path(__file__).resolve().parents[1]
N_FILES = 5000
TESTS_PER_FILE = 20
POOLS = 10


def synth_suite(n_files: int, tests_per_file: int, pools: int, seed: int = 7) -> tuple[
        dict[str, list[float]], dict[str, float], dict[str, str], dict[str, tuple[float, float]]]:
    """Per file: test durations, peak MiB, pool used ('' none); per pool: (setup_s, mb)."""
    rnd = random.Random(seed)
    durations: dict[str, list[float]] = {}
    peaks: dict[str, float] = {}
    pool_of: dict[str, str] = {}
    for i in range(n_files):
        p = f"tests/pkg{i % 50:02d}/test_mod{i:05d}.py"
        durations[p] = [rnd.lognormvariate(-3.0, 1.2) for _ in range(tests_per_file)]
        peaks[p] = 1500.0 if rnd.random() < 0.01 else rnd.uniform(5, 120)
        pool_of[p] = f"pool{rnd.randrange(pools)}" if rnd.random() < 0.04 else ""
    pools_cost = {f"pool{j}": (rnd.uniform(1.0, 4.0), rnd.uniform(100, 400)) for j in range(pools)}
    return durations, peaks, pool_of, pools_cost


def write_synth_history(path: Path, runs: int = 3, workers: int = 4, n_files: int = N_FILES) -> int:
    durations, peaks, pool_of, pools = synth_suite(n_files, TESTS_PER_FILE, POOLS)
    rnd = random.Random(11)
    n_tests = 0
    with History(path) as h:
        for r in range(runs):
            started = 1_000_000.0 + 10_000 * r
            run_id = h.new_run("profile", started=started, workers=workers)
            t = {f"gw{w}": started + 2.0 for w in range(workers)}
            held: dict[str, set[str]] = defaultdict(set)
            tests, files, fixtures = [], [], []
            seq: dict[str, int] = defaultdict(int)
            for i, (p, ds) in enumerate(durations.items()):
                w = f"gw{i % workers}"
                noise = rnd.uniform(0.9, 1.1)
                t0 = t[w]
                extra = 0.0
                pool = pool_of[p]
                if pool and pool not in held[w]:
                    held[w].add(pool)
                    extra = pools[pool][0]
                    fixtures.append(FixtureRecord(run_id, w, pool, "session", "", pools[pool][0], 0.1,
                                                  2, pools[pool][1]))
                for k, d in enumerate(ds):
                    tests.append(TestRecord(run_id, f"{p}::test_{k}", p, w, seq[w], t[w], 0.0,
                                            d * noise, 0.0, d * noise, d * noise, "passed"))
                    seq[w] += 1
                    t[w] += d * noise
                t[w] += extra
                files.append(FileRecord(run_id, p, w, t0, t[w], t[w] - t0, t[w] - t0, len(ds), 200.0,
                                        peaks[p] + (pools[pool][1] if extra else 0.0), 0.0))
            n_tests = len(tests)
            h.add_tests(tests)
            h.add_files(files)
            h.add_fixtures(fixtures)
            h.add_fixture_files(run_id, [(pool_of[p], p) for p in durations if pool_of[p]])
            for w in t:
                h.upsert_worker(WorkerRecord(run_id, w, 100, started, started + 2.0, 2.0, 200.0, None,
                                             seq[w]))
            # the counts a real run records at its end: without them every run looks as if it
            # might hold failures, and the cost model reads all its tests' rows to look for them
            h.update_run(run_id, status="passed", exit_code=0, wall_s=max(t.values()) - started,
                         passed=len(tests), failed=0, errors=0)
    return n_tests


def timed(fn, reps: int) -> tuple[float, list[float], object]:  # type: ignore[no-untyped-def]
    """Median wall seconds of ``reps`` calls, all wall times, the last result; CPU time noted."""
    times, cpus, out = [], [], None
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    timed.last_cpu = statistics.median(cpus)  # type: ignore[attr-defined]
    return statistics.median(times), times, out


def fmt_t(med: float, ts: list[float]) -> str:
    return (f"median {med:.3f} s wall (min {min(ts):.3f}, max {max(ts):.3f}; "
            f"CPU {timed.last_cpu:.3f} s)")  # type: ignore[attr-defined]


def bench_speed(reps: int, cpus_list: list[int]) -> None:
    print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())} "
          f"on {os.cpu_count()} CPUs (other processes inflate wall time, not CPU time)")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "h.sqlite"
        t0 = time.perf_counter()
        n_tests = write_synth_history(path)
        print(f"synthetic history: {n_tests} tests in {N_FILES} files x 3 runs, written in "
              f"{time.perf_counter() - t0:.1f} s ({path.stat().st_size / 1e6:.0f} MB)")
        with History(path) as h:
            med, ts, costs = timed(lambda: build_cost_model(h), reps)
        assert isinstance(costs, CostModel)
        print(f"cost model from history: {fmt_t(med, ts)} over {reps} runs; {len(costs.files)} files, "
              f"{len(costs.fixtures)} fixtures")
        for cpus in cpus_list:
            budget = Budget(16 * 1024, cpus)
            med, ts, plan = timed(lambda b=budget: make_plan(costs, b), reps)
            print(f"make_plan, {cpus} CPUs: {fmt_t(med, ts)}"
                  f" -> {plan.workers} workers, {len(plan.units)} units, "  # type: ignore[attr-defined]
                  f"predicted {plan.predicted_wall_s:.0f} s")  # type: ignore[attr-defined]
            med, ts, _ = timed(lambda b=budget: plan_shards(costs, b, 4), reps)
            print(f"plan_shards(4), {cpus} CPUs: {fmt_t(med, ts)}")
            med, ts, _ = timed(lambda b=budget: make_plan(costs, b, shards=4, shard=1), reps)
            print(f"make_plan(shard 1/4), {cpus} CPUs: {fmt_t(med, ts)}")


# -- shard balance against pytest-split -------------------------------------------------------

SPLIT_SCRIPT = r"""
import json, sys
from pytest_split.algorithms import Algorithms
data = json.load(sys.stdin)
class Item:
    def __init__(self, nodeid): self.nodeid = nodeid
items = [Item(n) for n in data["order"]]
out = {}
for name in ("least_duration", "duration_based_chunks"):
    groups = Algorithms[name].value(data["splits"], items, data["durations"])
    out[name] = [[it.nodeid for it in g.selected] for g in groups]
print(json.dumps(out))
"""


def _shard_work(shards: list[list[str]], dur: dict[str, float], pool_of: dict[str, str],
                pools: dict[str, tuple[float, float]]) -> tuple[list[float], int]:
    """Work per shard including each pool it must start; and how many pools were torn apart."""
    works, homes = [], defaultdict(set)
    for k, nodeids in enumerate(shards):
        files = {n.split("::")[0] for n in nodeids}
        used = {pool_of[f] for f in files if pool_of[f]}
        for p in used:
            homes[p].add(k)
        works.append(sum(dur[n] for n in nodeids) + sum(pools[p][0] for p in used))
    return works, sum(1 for p in homes if len(homes[p]) > 1)


def bench_compare(n_files: int, shards: int) -> None:
    durations, peaks, pool_of, pools = synth_suite(n_files, 10, 6, seed=3)
    dur = {f"{p}::test_{k}": d * 20 for p, ds in durations.items() for k, d in enumerate(ds)}
    files = tuple(FileCost(p, sum(ds) * 20, peaks[p], tests=len(ds), fixtures=(pool_of[p],) if pool_of[p] else ())
                  for p, ds in durations.items())
    fixtures = tuple(FixtureCost(n, "session", s, procs=2, mb=mb) for n, (s, mb) in pools.items())
    costs = CostModel(files, fixtures, WorkerCost(2.0, 200.0), runs_used=3)
    split = shard_split(costs, shards)
    ours = [[n for n in dur if split.shard_of(n.split("::")[0]) == k] for k in range(1, shards + 1)]
    results = {"suitefit": ours}
    try:
        sys.path.insert(0, str(ROOT / "tests"))
        from venvs import make_venv

        py = make_venv(("pytest==9.0.3", "pytest-split==0.11.0"))
        res = subprocess.run([str(py), "-c", SPLIT_SCRIPT], input=json.dumps(
            {"splits": shards, "order": list(dur), "durations": dur}), text=True,
            capture_output=True, check=True)
        results.update(json.loads(res.stdout))
    except Exception as e:  # the comparison is optional; say why it is missing
        print(f"pytest-split comparison skipped: {e}")
    print(f"shard balance: {n_files} files, {len(dur)} tests, {len(pools)} pool fixtures, "
          f"{shards} shards (predicted work incl. each shard's pool setups)")
    for name, sh in results.items():
        works, torn = _shard_work(sh, dur, pool_of, pools)
        mean = statistics.mean(works)
        homes: dict[str, set[int]] = defaultdict(set)
        for k, s in enumerate(sh):
            for n in s:
                homes[n.split("::")[0]].add(k)
        split_files = sum(1 for ks in homes.values() if len(ks) > 1)
        print(f"  {name:22s} slowest/mean {max(works) / mean:.3f}  slowest {max(works):7.1f} s  "
              f"mean {mean:7.1f} s  pools torn apart {torn}/{len(pools)}  files split {split_files}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--cpus", type=int, nargs="+", default=[4, 16, 64])
    ap.add_argument("--compare", action="store_true", help="also compare shard balance with pytest-split")
    ap.add_argument("--compare-files", type=int, nargs="+", default=[200, 1000])
    ap.add_argument("--shards", type=int, default=4)
    args = ap.parse_args()
    bench_speed(args.reps, args.cpus)
    if args.compare:
        for n in args.compare_files:
            bench_compare(n, args.shards)


if __name__ == "__main__":
    main()
