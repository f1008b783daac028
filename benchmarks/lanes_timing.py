"""Measure lanes: `lanes start` latency for a 4 s lane, and a 5 s lane beside 5 s of foreground.

Usage: python benchmarks/lanes_timing.py [--runs N]
Prints medians and ranges of N runs of the real CLI in a throw-away project.
The start latency is taken the way a CI step sees it: the CLI's stdout and
stderr are pipes, and the call returns only when every writer has closed them.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(cmd: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    took = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{cmd} failed: {p.stdout}{p.stderr}")
    return took


def show(label: str, xs: list[float]) -> None:
    print(
        f"{label}: median {statistics.median(xs):.3f} s "
        f"(min {min(xs):.3f}, max {max(xs):.3f}, n={len(xs)})"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    runs = ap.parse_args().runs
    sf = [sys.executable, "-m", "suitefit"]
    with tempfile.TemporaryDirectory() as d:
        proj = Path(d)
        (proj / "pyproject.toml").write_text(
            '[tool.suitefit.lanes.four]\ncommand = "sleep 4"\n'
            '[tool.suitefit.lanes.five]\ncommand = "sleep 5"\n'
        )
        starts, waits, overlaps, noop = [], [], [], []
        for _ in range(runs):
            noop.append(timed([*sf, "--version"], proj))
            starts.append(timed([*sf, "lanes", "start", "four"], proj))
            waits.append(timed([*sf, "lanes", "wait"], proj))
            overlaps.append(timed([*sf, "lanes", "run", "five", "--", "sleep", "5"], proj))
        show("suitefit --version (CLI start-up alone)", noop)
        show("lanes start, 4 s lane", starts)
        show("lanes wait right after (the lane's remaining time)", waits)
        show("lanes run five -- sleep 5 (5 s lane + 5 s foreground)", overlaps)


if __name__ == "__main__":
    main()
