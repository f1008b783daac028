"""Benchmark of ``suitefit compare`` with real processes: does it claim only what is there?

1. A/A: two identical commands, ``--trials`` comparisons at the defaults (10 runs, 1
   warm-up, 95%, 3% margin); counts how often wall or CPU time claims a difference.
2. A known 10% difference (``sleep`` 0.22 s vs 0.20 s for wall time; a CPU burn of
   0.11 s vs 0.10 s of process time for CPU time) at 2, 5 and 10 runs: how often it is
   detected, the ratio and interval found.
3. The pure statistics on simulated log-normal noise: false-claim rate by runs and noise.

Run: ``python benchmarks/bench_compare.py [--trials 20]``. Prints measured figures only.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from suitefit.diagnose.compare import compare_commands
from suitefit.diagnose.stats import analyse

BURN = (f"{sys.executable} -c \"import time; t=time.process_time()\n"
        "while time.process_time()-t<{s}: pass\"")


def claims(verdict: str) -> bool:
    return verdict in ("b-faster", "b-slower")


def aa(trials: int) -> None:
    cmd = BURN.format(s=0.05)
    wall_claims = cpu_claims = 0
    t0 = time.perf_counter()
    for i in range(trials):
        r = compare_commands(cmd, cmd, runs=10, warmup=1, seed=i)
        assert r.wall and r.cpu
        wall_claims += claims(r.wall.verdict)
        cpu_claims += claims(r.cpu.verdict)
        print(f"  A/A trial {i + 1:2d}: wall {r.wall.verdict:<8} ratio {r.wall.ratio:.3f} "
              f"CI {r.wall.ci_low:.3f}-{r.wall.ci_high:.3f} noise {r.wall.sd_log * 100:.1f}% | "
              f"cpu {r.cpu.verdict:<8} ratio {r.cpu.ratio:.3f}")
    print(f"A/A: {trials} trials of 10 runs each: wall claimed a difference {wall_claims} times, "
          f"cpu {cpu_claims} times ({time.perf_counter() - t0:.0f} s)")


def known_effect(trials: int) -> None:
    cases = [("wall", "sleep 0.22", "sleep 0.2"),
             ("cpu", BURN.format(s=0.11), BURN.format(s=0.10))]
    for metric, a, b in cases:
        for runs in (2, 5, 10):
            found = []
            for i in range(trials):
                r = compare_commands(a, b, runs=runs, warmup=1, seed=i)
                c = r.wall if metric == "wall" else r.cpu
                assert c is not None
                found.append(c)
            hits = sum(c.verdict == "b-faster" for c in found)
            wrong = sum(c.verdict == "b-slower" for c in found)
            ratios = sorted(c.ratio for c in found)
            print(f"10% {metric} effect, {runs:2d} runs: detected {hits}/{trials}, wrong way {wrong}, "
                  f"median ratio {ratios[len(ratios) // 2]:.3f}; e.g. {found[0].sentence()}")


def simulated() -> None:
    rng = random.Random(1)
    for n in (5, 10, 30):
        row = []
        for sd in (0.01, 0.05, 0.20):
            k, t = 0, 4000
            for _ in range(t):
                a = [rng.lognormvariate(0, sd) for _ in range(n)]
                b = [rng.lognormvariate(0, sd) for _ in range(n)]
                k += claims(analyse(a, b).verdict)
            row.append(f"noise {sd * 100:.0f}%: {k / t * 100:.2f}%")
        print(f"simulated A/A false-claim rate, {n:2d} runs: " + ", ".join(row))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--effect-trials", type=int, default=5)
    args = ap.parse_args()
    simulated()
    aa(args.trials)
    known_effect(args.effect_trials)


if __name__ == "__main__":
    main()
