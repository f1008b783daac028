"""Planning by two checkouts side by side: the same plans, and how much CPU each takes.

A change meant to make planning cheaper without changing a decision is measured here.
`bench_plan.py`'s synthetic history (5,000 files, 10 pool fixtures, 1% hogs; written once, by
this checkout) is planned by this checkout and by another one (``--against DIR``, e.g. made by
``git worktree add /tmp/old SHA``). Each plans in a process of its own, with its ``src`` first
on ``sys.path`` and PYTHONHASHSEED=0; the two alternate, ``--rounds`` times. Per budget
(CPUs:MiB) it prints the median CPU time of each side's ``make_plan`` and whether every plan's
JSON was the same byte for byte. Exit 1 when a plan differs, 2 on bad input.

    python benchmarks/bench_plan_ab.py --against /tmp/old [--rounds 3] [--configs 4:16384,64:16384,32:6144]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = "4:16384,16:16384,64:16384,32:10240,32:6144,8:6144"

# run in each side's own process: plan the history for every budget, CPU time and JSON out
PLANNER = """
import json, sys, time
from suitefit.costs import build_cost_model
from suitefit.history import History
from suitefit.model import Budget
from suitefit.plan import make_plan
import suitefit
assert suitefit.__file__.startswith(sys.argv[3]), (suitefit.__file__, sys.argv[3])
with History(sys.argv[1]) as h:
    costs = build_cost_model(h)
out = {}
for cfg in sys.argv[2].split(","):
    cpus, mb = cfg.split(":")
    t = time.process_time()
    plan = make_plan(costs, Budget(float(mb), int(cpus)))
    out[cfg] = {"cpu": time.process_time() - t, "plan": json.dumps(plan.to_json(), sort_keys=True)}
json.dump(out, sys.stdout)
"""


def _configs(text: str) -> list[str]:
    out = []
    for c in (c.strip() for c in text.split(",")):
        cpus, _, mb = c.partition(":")
        try:
            ok = int(cpus) >= 1 and float(mb) > 0
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"a budget is CPUS:MIB (e.g. 64:16384), got {c!r}")
        out.append(f"{int(cpus)}:{mb}")
    return out


def _plan(src: Path, history: Path, configs: list[str]) -> dict[str, dict[str, object]]:
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=str(src))
    got = subprocess.run([sys.executable, "-c", PLANNER, str(history), ",".join(configs), str(src)],
                         env=env, capture_output=True, text=True, check=False)
    if got.returncode != 0:
        tail = (got.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"planning with {src} failed: {tail}")
    return json.loads(got.stdout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--against", type=Path, required=True, help="the other checkout (its src/suitefit is used)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--configs", default=CONFIGS, help=f"budgets as CPUS:MIB, comma-separated (default {CONFIGS})")
    ap.add_argument("--files", type=int, default=None, help="files in the synthetic history (default 5,000)")
    a = ap.parse_args(argv)
    try:
        configs = _configs(a.configs)
    except ValueError as e:
        print(f"bench_plan_ab: {e}", file=sys.stderr)
        return 2
    other = a.against.resolve() / "src"
    if not (other / "suitefit" / "plan").is_dir():
        print(f"bench_plan_ab: {a.against} is not a suitefit checkout (no src/suitefit/plan in it)", file=sys.stderr)
        return 2
    if a.rounds < 1:
        print(f"bench_plan_ab: --rounds must be at least 1, got {a.rounds}", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_plan

    sides = {"this": ROOT / "src", "against": other}
    cpu: dict[str, dict[str, list[float]]] = {s: {c: [] for c in configs} for s in sides}
    plans: dict[str, set[str]] = {c: set() for c in configs}
    with tempfile.TemporaryDirectory(prefix="bench-plan-ab-") as tmp:
        history = Path(tmp) / "history.sqlite"
        kw = {} if a.files is None else {"n_files": a.files}
        bench_plan.write_synth_history(history, **kw)
        for r in range(a.rounds):
            order = ["against", "this"] if r % 2 == 0 else ["this", "against"]
            for side in order:
                try:
                    got = _plan(sides[side], history, configs)
                except RuntimeError as e:
                    print(f"bench_plan_ab: {e}", file=sys.stderr)
                    return 2
                for c in configs:
                    cpu[side][c].append(float(got[c]["cpu"]))  # type: ignore[arg-type]
                    plans[c].add(str(got[c]["plan"]))
            print(f"round {r + 1}/{a.rounds} done", flush=True)
    print(f"this checkout ({ROOT}) against {a.against}, {a.rounds} round(s), CPU medians of make_plan:")
    print("| CPUs:MiB | against | this | this / against | plans |")
    print("|---|---|---|---|---|")
    differ = False
    for c in configs:
        o, n = statistics.median(cpu["against"][c]), statistics.median(cpu["this"][c])
        same = len(plans[c]) == 1
        differ |= not same
        print(f"| {c} | {o:.2f} s | {n:.2f} s | {n / o:.2f} | {'same' if same else 'DIFFER'} |")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
