"""What does a one-worker plan cost in a separate xdist worker (`-n 1`) against in-process?

A one-worker plan runs the tests in the pytest process itself: cheapest, but a test
that kills that process (SIGKILL, the OOM killer) takes the reporter with it, and only
the journal names the test afterwards. Under `-n 1` a controller survives the worker
and names the test, its signal and memory at once. The controller costs its own
start-up (interpreter, plugins, the conftest import) and its resident memory.

Runs plain ``pytest -q`` and ``pytest -q -n 1`` on each suite, interleaved (the first
alternating), ``--runs`` times after one warm-up of each, under the independent
sampler (``tree_sampler.py``): whole-command wall time, CPU time (user+system of the
tree: on a shared, loaded machine the steadier figure for start-up work) and the peak
summed RSS of the tree. Suites: ``examples/heavy-suite`` (a 2 s, memory-holding conftest import, a pool
fixture, two hogs) and a tiny suite (5 files of 3 trivial tests).

    .venv/bin/python benchmarks/bench_one_worker.py [--runs 5] [--suites heavy,tiny] [--json OUT]

Prints medians (min-max) and the medians of the per-pair differences; no target.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import tree_sampler

ROOT = Path(__file__).resolve().parent.parent
MODES = {"in-process": [], "-n 1": ["-n", "1"]}


def tiny_suite(root: Path) -> None:
    (root / "tests").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    for i in range(5):
        (root / "tests" / f"test_t{i}.py").write_text(
            "import pytest\n@pytest.mark.parametrize('i', range(3))\ndef test_x(i):\n    assert i < 3\n")


def run_once(suite: Path, mode: str, env: dict[str, str]) -> tree_sampler.Result:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *MODES[mode]]
    r = tree_sampler.measure(cmd, cwd=suite, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             timeout=600)
    if r.exit_code != 0:
        raise SystemExit(f"bench_one_worker: {' '.join(cmd)} in {suite} exited {r.exit_code}")
    return r


def fmt(xs: list[float], unit: str) -> str:
    return f"{statistics.median(xs):.2f} {unit} ({min(xs):.2f}-{max(xs):.2f})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--suites", default="heavy,tiny")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    names = [s for s in a.suites.split(",") if s]
    if a.runs < 1 or not names or set(names) - {"heavy", "tiny"}:
        ap.error("--runs >= 1; --suites is a comma list of heavy, tiny")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SUITEFIT_"))}
    env.setdefault("OMP_NUM_THREADS", "1")
    out: dict[str, Any] = {"load_before": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            suite = Path(tmp) / name
            if name == "heavy":
                shutil.copytree(ROOT / "examples" / "heavy-suite", suite)
            else:
                tiny_suite(suite)
            for mode in MODES:
                run_once(suite, mode, env)  # warm-up: disk caches, .pyc files
            got: dict[str, list[tree_sampler.Result]] = {m: [] for m in MODES}
            for r in range(a.runs):
                for mode in (list(MODES) if r % 2 == 0 else list(reversed(MODES))):
                    got[mode].append(run_once(suite, mode, env))
            walls = {m: [x.wall_s for x in rs] for m, rs in got.items()}
            peaks = {m: [x.peak_rss_mb for x in rs] for m, rs in got.items()}
            cpus = {m: [x.cpu_s for x in rs] for m, rs in got.items()}
            dw = [b - a_ for a_, b in zip(walls["in-process"], walls["-n 1"], strict=True)]
            dc = [b - a_ for a_, b in zip(cpus["in-process"], cpus["-n 1"], strict=True)]
            dp = [b - a_ for a_, b in zip(peaks["in-process"], peaks["-n 1"], strict=True)]
            print(f"{name}: {a.runs} runs each")
            for m in MODES:
                print(f"  {m:<11} wall {fmt(walls[m], 's')}   CPU {fmt(cpus[m], 's')}   peak {fmt(peaks[m], 'MiB')}")
            print(f"  -n 1 costs  wall +{fmt(dw, 's')}   CPU +{fmt(dc, 's')}   peak +{fmt(dp, 'MiB')}")
            out[name] = {"walls": walls, "cpus": cpus, "peaks": peaks, "extra_wall_s": statistics.median(dw),
                         "extra_cpu_s": statistics.median(dc), "extra_peak_mb": statistics.median(dp)}
    out["load_after"] = os.getloadavg()[0]
    print(f"load average (1 min) before {out['load_before']:.2f}, after {out['load_after']:.2f}")
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
