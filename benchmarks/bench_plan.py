"""How long does planning take on a big suite? History -> cost model -> plan, timed.

Writes a synthetic history (through the real History API, as the planner's tests
do: tests/plan_synth.py) of ``--tests`` tests in ``--files`` files over ``--runs``
runs, with a few pool fixtures shared by many files and some memory hogs, then
times, ``--repeat`` times each, for a 2-CPU and a 64-CPU budget:

- ``load``: ``load_cost_model`` (SQLite history -> CostModel);
- ``plan``: ``make_plan`` (the pure planner: groups, worker count, dispatch simulation);
- ``cli``:  ``suitefit plan --json`` as a subprocess (interpreter start included).

Target (issue #3): load + plan under 2 s (median).

    .venv/bin/python benchmarks/bench_plan.py [--tests 100000] [--files 5000] [--runs 2] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from plan_synth import SynthFile, SynthFixture, SynthRun, write_history  # noqa: E402

from suitefit.budget import detect_budget  # noqa: E402
from suitefit.config import load_config  # noqa: E402
from suitefit.costs import load_cost_model  # noqa: E402
from suitefit.plan.planner import make_plan  # noqa: E402

TARGET_S = 2.0


def synth(n_tests: int, n_files: int, n_runs: int, workers: int = 8) -> list[SynthRun]:
    per = max(1, n_tests // n_files)
    fixtures = [SynthFixture(f"pool{k}", setup_s=2.0 + k, procs=2, mb=200.0) for k in range(5)]
    files = {}
    for i in range(n_files):
        p = f"tests/pkg{i // 100:03d}/test_{i:05d}.py"
        fx = (f"pool{i % 5}",) if i % 50 == 0 else ()
        files[p] = SynthFile(p, wall_s=0.05 + (i * 7919 % 100) / 50, tests=per,
                             peak_mb=900.0 if i % 997 == 0 else 5.0 + i % 40, fixtures=fx)
    paths = list(files)
    placement = {f"gw{w}": paths[w::workers] for w in range(workers)}
    return [SynthRun(placement, files, fixtures, scale=1.0 + 0.05 * r) for r in range(n_runs)]


T = TypeVar("T")


def timed(fn: Callable[[], T], repeat: int) -> tuple[list[float], T]:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return times, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_plan.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--tests", type=int, default=100_000)
    ap.add_argument("--files", type=int, default=5_000)
    ap.add_argument("--runs", type=int, default=2, help="runs in the synthetic history (default 2)")
    ap.add_argument("--repeat", type=int, default=3, help="timings per step (median taken; default 3)")
    a = ap.parse_args(argv)
    if a.tests < 1 or a.files < 1 or a.runs < 1 or a.repeat < 1 or a.files > a.tests:
        ap.exit(2, "bench_plan.py: error: --tests >= --files >= 1, --runs >= 1, --repeat >= 1\n")
    with tempfile.TemporaryDirectory(prefix="suitefit-benchplan-") as tmp:
        hist = Path(tmp) / "history.sqlite"
        t = time.perf_counter()
        write_history(hist, synth(a.tests, a.files, a.runs))
        print(f"history: {a.tests} tests in {a.files} files x {a.runs} runs written in "
              f"{time.perf_counter() - t:.1f} s", file=sys.stderr)
        (Path(tmp) / "pyproject.toml").write_text("[tool.suitefit]\n")
        cfg = load_config(Path(tmp))
        rows = [("CPUs", "load s", "plan s", "load+plan s", "cli s", "workers", "units", "target")]
        ok_all = True
        for cpus in (2, 64):
            budget = detect_budget("64GiB", None, cfg)
            budget = replace(budget, cpus=cpus, cpus_source="bench_plan")
            lt, (costs, _) = timed(partial(load_cost_model, cfg, hist), a.repeat)
            pt, plan = timed(partial(make_plan, costs, budget), a.repeat)
            cli = [str(Path(sys.executable).parent / "suitefit"), "plan", "--json", "--history", str(hist),
                   "--memory-budget", "64GiB"]
            ct, _ = timed(partial(subprocess.run, cli, cwd=tmp, check=True, capture_output=True), a.repeat)
            total = statistics.median(lt) + statistics.median(pt)
            ok = total < TARGET_S
            ok_all &= ok
            rows.append((str(cpus), f"{statistics.median(lt):.2f}", f"{statistics.median(pt):.2f}",
                         f"{total:.2f}", f"{statistics.median(ct):.2f}", str(plan.workers),
                         str(len(plan.units)), f"{'met' if ok else 'MISS'} < {TARGET_S:.0f} s"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    print(f"planning {a.tests} tests in {a.files} files ({a.runs} runs in the history), medians of {a.repeat}")
    print("\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows))
    print("(the cli column is the whole `suitefit plan --json` command on the machine's CPUs, for reference)")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
