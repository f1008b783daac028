"""Do page faults share the machine the way CPU does? The figure behind the plan's fault model.

One process touching N MiB of new memory alone; two such processes at once; one beside a
process that only burns CPU. Each process reports its own wall and CPU time for the
touching; medians over rounds (the rounds alternate the three cases).

    python benchmarks/bench_faults.py [--mb 800] [--rounds 5]

If faults were per-CPU work, two processes on two CPUs would each take as long as one
alone. On the KVM guests suitefit is developed on they took 1.97x as long (the host faults a
guest's memory in one fault at a time: two at once take as long as one after the other),
while the CPU burner beside one slowed it by nothing: docs/plan.md, "Calibrated predictions".
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence

TOUCH = """
import json, sys, time
t, c = time.perf_counter(), time.process_time()
b = bytearray({mb} * 1024 * 1024)
for i in range(0, len(b), 4096):
    b[i] = 1
print(json.dumps([time.perf_counter() - t, time.process_time() - c]))
"""

BURN = """
import time
end = time.perf_counter() + {s}
while time.perf_counter() < end:
    pass
"""


def _start(code: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def _touch_result(p: subprocess.Popen[str]) -> tuple[float, float]:
    out, _ = p.communicate()
    wall, cpu = json.loads(out)
    return float(wall), float(cpu)


def one_round(mb: int) -> dict[str, list[tuple[float, float]]]:
    """(wall, CPU) of the touching, per case, for one round."""
    touch = TOUCH.format(mb=mb)
    out: dict[str, list[tuple[float, float]]] = {}
    out["alone"] = [_touch_result(_start(touch))]
    pair = [_start(touch), _start(touch)]
    out["two at once"] = [_touch_result(p) for p in pair]
    burner = _start(BURN.format(s=3.0))
    time.sleep(0.1)  # the burner is running before the touching starts
    out["beside a CPU burner"] = [_touch_result(_start(touch))]
    burner.kill()
    burner.wait()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_faults.py", description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=800, help="MiB each process touches (default 800)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of the three cases (default 5)")
    a = ap.parse_args(argv)
    if a.mb < 1 or a.rounds < 1:
        ap.exit(2, "bench_faults.py: error: --mb and --rounds must be at least 1\n")
    cases: dict[str, list[tuple[float, float]]] = {}
    for _ in range(a.rounds):
        for k, v in one_round(a.mb).items():
            cases.setdefault(k, []).extend(v)
    alone = statistics.median(w for w, _ in cases["alone"])
    print(f"touching {a.mb} MiB, {a.rounds} rounds: median wall s / CPU s of each process (min-max wall)")
    for k, v in cases.items():
        walls = [w for w, _ in v]
        print(f"  {k:20s} {statistics.median(walls):6.3f} / {statistics.median(c for _, c in v):6.3f}"
              f"  ({min(walls):.3f}-{max(walls):.3f})  {statistics.median(walls) / alone:.2f}x alone")
    return 0


if __name__ == "__main__":
    sys.exit(main())
