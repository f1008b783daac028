"""Does measuring change test outcomes? The refcount-sensitive suite, run again and again.

``tests/fixtures/refcount_suite`` asserts that ``sys.getrefcount`` of small ints and of
a module-level singleton is unchanged across a loop, the way numpy's suite does: a
Python thread running beside a test (as suitefit's sampler once did) breaks it now
and then. This runs it ``--runs`` times in a row under ``pytest --suitefit``, serially
and with ``-n 2``, after checking that it passes without suitefit, and counts the
runs that failed. Exits 1 if any failed.

    .venv/bin/python benchmarks/bench_refcount.py [--runs 20] [--modes 0,2] [--pythonpath SRC]

``--pythonpath SRC`` puts another suitefit source tree first on the path (e.g. an
older commit's ``src`` from ``git archive``) to measure it the same way.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "tests" / "fixtures" / "refcount_suite"


def run(suite: Path, args: list[str], env: dict[str, str]) -> tuple[int, str]:
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", *args], cwd=suite, env=env,
                       capture_output=True, text=True, timeout=600)
    return p.returncode, (p.stdout.strip().splitlines() or [""])[-1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_refcount.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--modes", default="0,2", help="xdist worker counts, 0 = serial (default 0,2)")
    ap.add_argument("--pythonpath", default=None, help="a suitefit source tree to measure instead")
    a = ap.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SUITEFIT_", "REFCOUNT_"))}
    if a.pythonpath:
        env["PYTHONPATH"] = a.pythonpath
    failed_any = False
    with tempfile.TemporaryDirectory(prefix="suitefit-refcount-") as tmp:
        suite = Path(tmp) / "suite"
        shutil.copytree(SUITE, suite)
        for mode in a.modes.split(","):
            xdist = ["-n", mode] if mode != "0" else []
            label = "serial" if mode == "0" else f"-n {mode}"
            code, last = run(suite, xdist, env)
            print(f"{label}: without suitefit: {'passed' if code == 0 else 'FAILED'} ({last})")
            fails = []
            for i in range(a.runs):
                code, last = run(suite, [*xdist, "--suitefit", f"--suitefit-history={Path(tmp) / 'h.sqlite'}"], env)
                if code != 0:
                    fails.append(f"run {i + 1}: {last}")
            print(f"{label}: with --suitefit: {a.runs - len(fails)}/{a.runs} runs passed"
                  + ("".join(f"\n  {f}" for f in fails)))
            failed_any = failed_any or bool(fails)
    return 1 if failed_any else 0


if __name__ == "__main__":
    sys.exit(main())
