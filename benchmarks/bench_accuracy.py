"""Is what suitefit reports true? Its numbers against an independent sampler and the suite's manifest.

Runs ``pytest --suitefit`` on a generated suite (default: the bundled example),
serially and with ``-n 2``, under ``tree_sampler`` (a separate process reading
/proc its own way), several times, and checks the medians:

- whole-run peak RSS (``runs.peak_rss_mb``) within 10% of the sampler's peak;
- each hog file's ``peak_mb`` within 15% of the MiB the manifest says it touches;
- the pool fixture's process count and the files that use it exactly as in the
  manifest (in every run).

    .venv/bin/python benchmarks/bench_accuracy.py [--suite DIR] [--runs 3] [--modes 0,2] [--json OUT]

Prints a table; exits 1 if a target is missed, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tree_sampler
from gen_suite import copy_suite, order_dependent

ROOT = Path(__file__).resolve().parent.parent
PEAK_TOL = 0.10
HOG_TOL = 0.15


@dataclass
class Check:
    mode: str
    what: str
    target: str
    values: list[float] = field(default_factory=list)  # one per run (ratio or count)
    exact: bool = False  # exact checks must hold in every run
    tol: float = 0.0
    detail: list[str] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def ok(self) -> bool:
        if not self.values:
            return False
        if self.exact:
            return all(v == 1 for v in self.values)
        return abs(self.median - 1) <= self.tol


def run_once(python: str, suite: Path, hist: Path, workers: str, deselect: list[str],
             interval: float) -> tuple[tree_sampler.Result, dict[str, Any]]:
    """One measured pytest run under the reference sampler; returns it and suitefit's summary."""
    from suitefit.history import History
    from suitefit.summary import run_summary

    # --opt=PATH: a separate PATH that exists outside the suite would move pytest's rootdir
    cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--suitefit", f"--suitefit-history={hist}"]
    if workers != "0":
        # The order-dependent consumer fails when xdist puts it on another worker than its
        # provider (that is the pair's point); it costs nothing worth measuring, so leave it out.
        cmd += ["-n", workers, *(f"--deselect={p}" for p in deselect)]
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    log = hist.with_suffix(".log")
    with log.open("w") as out:
        res = tree_sampler.measure(cmd, cwd=suite, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=900,
                                   interval=interval)
    if res.exit_code != 0:
        tail = "\n".join(log.read_text().splitlines()[-15:])
        raise SystemExit(f"{tail}\nbench_accuracy.py: pytest exited {res.exit_code}: {' '.join(cmd)}")
    with History(hist) as h:
        return res, run_summary(h, h.runs(limit=1)[0].id)


def evaluate(manifest: dict[str, Any], runs: dict[str, list[tuple[tree_sampler.Result, dict[str, Any]]]]) -> list[Check]:
    shape = manifest["shape"]
    hogs = {p: f["mb"] for p, f in manifest["files"].items() if f["kind"] == "hog"}
    pool_files = sorted(p for p, f in manifest["files"].items() if f["kind"] == "pool")
    checks: list[Check] = []
    for mode, rs in runs.items():
        peak = Check(mode, "whole-run peak RSS / sampler's", f"1 ± {PEAK_TOL:.0%}", tol=PEAK_TOL)
        hog_checks = {p: Check(mode, f"{p} peak / {mb} MiB", f"1 ± {HOG_TOL:.0%}", tol=HOG_TOL)
                      for p, mb in hogs.items()}
        procs = Check(mode, f"pool fixture procs == {shape['pool_procs']}", "exact", exact=True)
        files = Check(mode, f"pool fixture files == {len(pool_files)} manifest files", "exact", exact=True)
        for res, s in rs:
            peak.values.append(s["peak_rss_mb"] / res.peak_rss_mb)
            peak.detail.append(f"{s['peak_rss_mb']:.0f}/{res.peak_rss_mb:.0f}")
            by_path = {f["path"]: f for f in s["files"]}
            for p, mb in hogs.items():
                got = by_path.get(p, {}).get("peak_mb", 0.0)
                hog_checks[p].values.append(got / mb)
                hog_checks[p].detail.append(f"{got:.0f}")
            if pool_files:
                # the pool fixture: the one whose users are the pool files, else the one with most processes
                fx = [f for f in s["fixtures"] if f["scope"] == "session"]
                pool = next((f for f in fx if set(f["files"]) & set(pool_files)), None)
                pool = pool or max(fx, key=lambda f: f["procs"], default=None)
                n = pool["procs"] if pool else 0
                procs.values.append(float(n == shape["pool_procs"]))
                procs.detail.append(str(n))
                used = sorted(pool["files"]) if pool else []
                files.values.append(float(used == pool_files))
                files.detail.append("same" if used == pool_files else f"got {used}")
        checks += [peak, *hog_checks.values()]
        if pool_files:
            checks += [procs, files]
    return checks


def table(checks: list[Check]) -> str:
    rows = [("mode", "check", "target", "median", "per run", "ok")]
    for c in checks:
        med = "-" if not c.values else (f"{sum(c.values):.0f}/{len(c.values)} runs" if c.exact else f"{c.median:.3f}")
        rows.append((c.mode, c.what, c.target, med, " ".join(c.detail), "ok" if c.ok else "MISS"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_accuracy.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", type=Path, default=ROOT / "examples" / "heavy-suite",
                    help="a generated suite with manifest.json (default: examples/heavy-suite)")
    ap.add_argument("--runs", type=int, default=3, help="runs per mode (median taken; default 3)")
    ap.add_argument("--modes", default="0,2", help="xdist worker counts, 0 = serial (default 0,2)")
    ap.add_argument("--interval", type=float, default=tree_sampler.DEFAULT_INTERVAL,
                    help="the reference sampler's interval in seconds (default 0.05)")
    ap.add_argument("--python", default=sys.executable, help="interpreter with suitefit installed")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    a = ap.parse_args(argv)
    manifest_path = a.suite / "manifest.json"
    if not manifest_path.is_file():
        ap.exit(2, f"bench_accuracy.py: error: no manifest.json in {a.suite}\n")
    if a.interval <= 0:
        ap.exit(2, "bench_accuracy.py: error: --interval must be > 0\n")
    if a.runs < 1:
        ap.exit(2, "bench_accuracy.py: error: --runs must be >= 1\n")
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    if not modes or not all(m.isdigit() for m in modes):
        ap.exit(2, f"bench_accuracy.py: error: --modes wants worker counts like 0,2, not {a.modes!r}\n")
    manifest = json.loads(manifest_path.read_text())
    consumers = order_dependent(a.suite)
    runs: dict[str, list[tuple[tree_sampler.Result, dict[str, Any]]]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="suitefit-acc-") as tmp:
        suite = copy_suite(a.suite, Path(tmp) / "suite")
        for i in range(a.runs):
            for m in modes:  # interleaved, so a noisy minute hits every mode
                res, s = run_once(a.python, suite, Path(tmp) / f"h-{m}-{i}.sqlite", m, consumers, a.interval)
                runs[m].append((res, s))
                print(f"run {i + 1}/{a.runs} -n {m}: sampler peak {res.peak_rss_mb:.0f} MiB, "
                      f"suitefit {s['peak_rss_mb']:.0f} MiB, wall {res.wall_s:.1f} s", file=sys.stderr)
    checks = evaluate(manifest, {("serial" if m == "0" else f"-n {m}"): rs for m, rs in runs.items()})
    print(f"suite {a.suite} ({manifest.get('name', '?')}), {a.runs} runs per mode, sampler every "
          f"{a.interval} s")
    print(table(checks))
    if a.json:
        a.json.write_text(json.dumps([{"mode": c.mode, "check": c.what, "target": c.target, "values": c.values,
                                       "detail": c.detail, "ok": c.ok} for c in checks], indent=2))
    missed = [c for c in checks if not c.ok]
    if missed:
        print(f"MISSED {len(missed)} target(s)")
        return 1
    print("all targets met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
