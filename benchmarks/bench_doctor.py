"""Wall time of `suitefit doctor` on a project: one cold probe, then cached runs; medians.

    python benchmarks/bench_doctor.py PROJECT [--runs 5] [--python PATH] [-- PYTEST ARGS]

Each run is a fresh `python -m suitefit doctor --json` process (what a user or CI pays),
timed from outside. The first run uses --refresh-probe, so it includes the probe when
the configuration needs one; the rest reuse the cached probe answer.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path


def once(project: Path, extra: list[str]) -> tuple[float, dict[str, object]]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "suitefit", "doctor", "--json", *extra],
                          cwd=project, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        sys.exit(f"doctor failed (exit {proc.returncode}): {proc.stderr.strip()}")
    return wall, json.loads(proc.stdout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("project", type=Path)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--python", default=None)
    ap.add_argument("pytest_args", nargs="*")
    a = ap.parse_args()
    opts = ["--python", str(Path(a.python).absolute())] if a.python else []
    tail = ["--", *a.pytest_args] if a.pytest_args else []
    cold, rep = once(a.project, [*opts, "--refresh-probe", *tail])
    probe = rep.get("probe")
    warm = [once(a.project, [*opts, *tail])[0] for _ in range(a.runs)]
    print(f"project {a.project}: findings {[f['id'] for f in rep['findings']]}")  # type: ignore[index]
    print(f"first run (probe {'run' if probe else 'not needed'}): {cold:.2f} s")
    print(f"cached runs: median {statistics.median(warm):.2f} s, range {min(warm):.2f}-{max(warm):.2f} s "
          f"over {len(warm)} runs")


if __name__ == "__main__":
    main()
