"""What does measuring cost? Plain pytest against ``pytest --suitefit`` on the same suite.

Interleaved pairs (A B, B A, A B, ...: who goes first alternates, so drift and
warm caches favour neither), after one discarded warm-up of each. Reports the
median wall time of each side, the median of the per-pair ratios B/A, and a
bootstrap 95% confidence interval of that median; CPU time (user+system of the
whole tree, from rusage) the same way, since on a shared machine it is less
noisy than wall time. Target: median wall ratio <= 1.03.

    .venv/bin/python benchmarks/bench_overhead.py [--suite DIR] [--pairs 7] [-n N] [--json OUT]
        [--run] [--target 1.03] [--warmups 1] [--bytecode as-is|cached|installed]

``--run`` measures ``suitefit run --workers N`` (its CLI, plan, scheduler and journal
included) against plain ``pytest -n N`` instead of ``pytest --suitefit`` against plain
pytest. ``--warmups 0`` replaces the warm-up runs by one ``--collect-only`` of each side
(bytecode): for suites where a run takes minutes. ``--bytecode cached`` runs both sides
without PYTHONDONTWRITEBYTECODE and with a fresh PYTHONPYCACHEPREFIX, so that the
warm-ups leave every module's bytecode cached (see ``bench_overhead_parts.py``: with
that variable set, each run otherwise compiles suitefit's modules from source, in pytest's
process and in the sampler process). ``--bytecode installed`` compiles every module on the
python's path ahead, as installing a package does, and then runs both sides with
PYTHONDONTWRITEBYTECODE: what a fresh CI container sees, where pytest's own cache of
rewritten modules (test files, conftests, plugin packages) is never warm. Exits 1 if a target (wall and CPU median ratio
<= ``--target``) is missed, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_run import compile_ahead
from gen_suite import copy_suite, order_dependent

ROOT = Path(__file__).resolve().parent.parent
TARGET = 1.03


@dataclass
class Timed:
    wall_s: float
    cpu_s: float


ENV: dict[str, str] | None = None  # --bytecode cached: the runs' environment


def timed_run(cmd: list[str], cwd: Path) -> Timed:
    """Wall and CPU time (the tree's, through RUSAGE_CHILDREN) of one run; aborts if it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        tail = "\n".join(p.stdout.splitlines()[-15:])
        raise SystemExit(f"{tail}\nbench_overhead.py: pytest exited {p.returncode}: {' '.join(cmd)}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timed(wall, cpu)


def bootstrap_ci(values: list[float], n: int = 4000, seed: int = 1) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the median (pairs resampled with replacement)."""
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n) - 1]


def load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_overhead.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", type=Path, default=ROOT / "examples" / "heavy-suite",
                    help="suite directory (default: examples/heavy-suite)")
    ap.add_argument("--pairs", type=int, default=7, help="interleaved pairs (>= 5; default 7)")
    ap.add_argument("-n", dest="workers", default="0", help="xdist workers for both sides (default 0: serial)")
    ap.add_argument("--python", default=sys.executable, help="interpreter with suitefit installed")
    ap.add_argument("--extra", default="", help="extra arguments for the suitefit side, e.g. '--suitefit-interval=0.2'")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument("--run", action="store_true", help="measure `suitefit run --workers N` against `pytest -n N`")
    ap.add_argument("--target", type=float, default=TARGET, help=f"largest median ratio that passes (default {TARGET})")
    ap.add_argument("--warmups", type=int, default=1, help="discarded runs of each side first (default 1)")
    ap.add_argument("--keep", type=Path, default=None,
                    help="copy the suitefit side's history here at the end (its runs, plans and decisions)")
    ap.add_argument("--bytecode", choices=("as-is", "cached", "installed"), default="as-is",
                    help="as-is: the environment as given (default); cached: bytecode cached by the warm-ups; "
                         "installed: compiled ahead as an install does, nothing written by the runs")
    a = ap.parse_args(argv)
    if not a.suite.is_dir():
        ap.exit(2, f"bench_overhead.py: error: no suite directory {a.suite}\n")
    if a.pairs < 5:
        ap.exit(2, "bench_overhead.py: error: --pairs must be >= 5 (medians of fewer mean little)\n")
    if not a.workers.isdigit():
        ap.exit(2, f"bench_overhead.py: error: -n wants a worker count, not {a.workers!r}\n")
    plain = [a.python, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    if a.workers != "0":  # the order-dependent consumer fails on the wrong worker: leave it out
        plain += ["-n", a.workers, *(f"--deselect={p}" for p in order_dependent(a.suite))]
    global ENV
    with tempfile.TemporaryDirectory(prefix="suitefit-ovh-") as tmp:
        if a.bytecode in ("cached", "installed"):
            ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
            ENV["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        if a.bytecode == "installed":
            compile_ahead(a.python, ENV)
            ENV["PYTHONDONTWRITEBYTECODE"] = "1"
        suite = Path(tmp) / "suite"
        copy_suite(a.suite, suite)
        # one history for every measured run, as a user's grows; --opt=PATH keeps pytest's rootdir put
        hist = Path(tmp) / "history.sqlite"
        measured = [*plain, "--suitefit", f"--suitefit-history={hist}", *a.extra.split()]
        if a.run:
            if a.workers == "0":
                ap.exit(2, "bench_overhead.py: error: --run wants -n N (the xdist run it is compared with)\n")
            sf = str(Path(a.python).with_name("suitefit"))
            measured = [sf, "run", f"--history={hist}", f"--workers={a.workers}", *a.extra.split(), "--",
                        *plain[3:plain.index("-n")], *plain[plain.index("-n") + 2:]]
        sides = {"plain": plain, "suitefit": measured}
        print(f"load before: {load()}", file=sys.stderr)
        for _ in range(a.warmups):
            for cmd in sides.values():  # warm-up: bytecode, page cache
                timed_run(cmd, suite)
        if a.warmups == 0:
            timed_run([*plain, "--collect-only"], suite)
            if a.bytecode == "cached":  # the measured side's modules too
                timed_run([*plain, "--collect-only", "--suitefit", f"--suitefit-history={hist}"], suite)
        runs: dict[str, list[Timed]] = {"plain": [], "suitefit": []}
        for i in range(a.pairs):
            order = ["plain", "suitefit"] if i % 2 == 0 else ["suitefit", "plain"]
            for name in order:
                runs[name].append(timed_run(sides[name], suite))
            print(f"pair {i + 1}/{a.pairs} ({order[0]} first): plain {runs['plain'][-1].wall_s:.2f} s, "
                  f"suitefit {runs['suitefit'][-1].wall_s:.2f} s, CPU {runs['plain'][-1].cpu_s:.2f} s / "
                  f"{runs['suitefit'][-1].cpu_s:.2f} s, load {load()}", file=sys.stderr)
        if a.keep is not None and hist.exists():  # before the temporary directory goes with it
            a.keep.mkdir(parents=True, exist_ok=True)
            with sqlite3.connect(hist) as src, sqlite3.connect(a.keep / "history.sqlite") as dst:
                src.backup(dst)
            print(f"suitefit side's history kept in {a.keep / 'history.sqlite'}", file=sys.stderr)
    wall_ratios = [b.wall_s / p.wall_s for p, b in zip(runs["plain"], runs["suitefit"], strict=True)]
    cpu_ratios = [b.cpu_s / p.cpu_s for p, b in zip(runs["plain"], runs["suitefit"], strict=True)]
    out: dict[str, Any] = {"suite": str(a.suite), "pairs": a.pairs, "workers": a.workers, "extra": a.extra,
                           "bytecode": a.bytecode,
                           "dont_write_bytecode": bool(os.environ.get("PYTHONDONTWRITEBYTECODE")),
                           "target": a.target, "run": a.run, "commands": {k: " ".join(v) for k, v in sides.items()},
                           "load_after": load()}
    for what, ratios, attr in (("wall", wall_ratios, "wall_s"), ("cpu", cpu_ratios, "cpu_s")):
        lo, hi = bootstrap_ci(ratios)
        out[what] = {
            "plain_median_s": statistics.median(getattr(t, attr) for t in runs["plain"]),
            "suitefit_median_s": statistics.median(getattr(t, attr) for t in runs["suitefit"]),
            "ratio_median": statistics.median(ratios), "ci95": [lo, hi], "ratios": ratios,
        }
    print(f"suite {a.suite}, {'serial' if a.workers == '0' else f'-n {a.workers}'}, {a.pairs} interleaved pairs"
          + (f", suitefit side: {a.extra}" if a.extra else "") + f", bytecode {a.bytecode}"
          + (" (PYTHONDONTWRITEBYTECODE set)" if out["dont_write_bytecode"] and a.bytecode == "as-is" else ""))
    print(f"{'':6}{'plain':>10}{'suitefit':>10}{'ratio':>8}   95% CI (bootstrap)   per-pair ratios")
    for what in ("wall", "cpu"):
        d = out[what]
        print(f"{what:6}{d['plain_median_s']:>9.2f}s{d['suitefit_median_s']:>9.2f}s{d['ratio_median']:>8.3f}"
              f"   [{d['ci95'][0]:.3f}, {d['ci95'][1]:.3f}]       {' '.join(f'{r:.3f}' for r in d['ratios'])}")
    ok = out["wall"]["ratio_median"] <= a.target and out["cpu"]["ratio_median"] <= a.target
    out["ok"] = ok
    if a.json:
        a.json.write_text(json.dumps(out, indent=2))
    print(f"load after: {load()}")
    print(f"target: median wall and CPU ratios <= {a.target}: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
