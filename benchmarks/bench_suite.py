"""`suitefit run` against pytest-xdist's modes on a real suite: wall, peak tree memory, CPU.

bench_run.py measures generated shapes whose costs are known; this takes a suite someone
else wrote (a checkout, or a package's tests from its wheel) as it is. It seeds a fresh
history with ONE serial `suitefit profile` (the first plan is what a new user gets), then
runs every command, round-robin for ``--rounds`` rounds, the first command rotating each
round, each under the independent tree sampler (tree_sampler.py):

- ``suitefit``            suitefit run -- ARGS       (its plans learn from every run before)
- ``load``, ``loadfile``, ``worksteal``   python -m pytest ARGS -n N --dist MODE
- ``load+pin`` ...        the same with OMP/MKL/OPENBLAS/NUMEXPR_NUM_THREADS set to CPUs / N,
                          as `suitefit run` sets them for its workers (``--pinned``)

    .venv/bin/python benchmarks/bench_suite.py --suite DIR --python PY [--rounds 3] [--pinned]
        [--only suitefit,load+pin,...] [--env K=V ...] [--keep DIR] [--json OUT] -- PYTEST ARGS...

The suite directory is used in place (its history goes to ``--keep``/history.sqlite, or a
temporary directory). Prints medians (min-max) per command, suitefit's ratios to each mode,
and each `suitefit run`'s predicted wall and peak against what the sampler measured.
Exits 2 on bad input or when a command fails (a failing suite measures nothing useful).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from pathlib import Path
from statistics import median as med

import tree_sampler
from bench_run import plan_line, predicted

from suitefit.measure.proctree import cpu_ticks, steal_share
from suitefit.threads import THREAD_VARS, threads_per_worker

MODES = ("load", "loadfile", "worksteal")


def commands(python: str, suitefit: str, args: list[str], history: Path, workers: int, cpus: int,
             pinned: bool) -> dict[str, tuple[list[str], dict[str, str]]]:
    out: dict[str, tuple[list[str], dict[str, str]]] = {
        "suitefit": ([suitefit, "run", "--history", str(history), "--", *args], {})}
    for mode in MODES:
        out[mode] = ([python, "-m", "pytest", *args, "-n", str(workers), "--dist", mode], {})
    if pinned:  # the thread variables exactly as `suitefit run` sets them for its workers
        share = threads_per_worker(cpus, workers)
        pins = dict.fromkeys(THREAD_VARS, str(share)) if share is not None else {}
        for mode in MODES:
            out[f"{mode}+pin"] = (out[mode][0], pins)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_suite.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", type=Path, required=True, help="the suite's directory (pytest's rootdir)")
    ap.add_argument("--python", default=sys.executable, help="its interpreter, with pytest, xdist, suitefit")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=None, help="xdist -n (default: CPUs we may use)")
    ap.add_argument("--pinned", action="store_true", help="also xdist's modes with thread pools pinned")
    ap.add_argument("--only", default=None, help="these commands only, e.g. suitefit,load+pin (after --pinned)")
    ap.add_argument("--env", action="append", default=[], help="K=V for every command (repeatable)")
    ap.add_argument("--keep", type=Path, default=None, help="keep the history and logs here")
    ap.add_argument("--json", type=Path, default=None, help="also write every measurement here")
    ap.add_argument("--timeout", type=float, default=3600.0, help="per command, seconds")
    ap.add_argument("pytest_args", nargs="*", help="pytest's arguments, after --")
    a = ap.parse_args(argv)
    if not a.suite.is_dir() or a.rounds < 1 or any("=" not in kv for kv in a.env):
        print("bench_suite.py: --suite must be a directory, --rounds >= 1, --env K=V", file=sys.stderr)
        return 2
    work = a.keep or Path(tempfile.mkdtemp(prefix="bench_suite-"))
    work.mkdir(parents=True, exist_ok=True)
    history = work / "history.sqlite"
    if history.exists():
        print(f"bench_suite.py: {history} exists: the first plan must come from one profile", file=sys.stderr)
        return 2
    cpus = len(os.sched_getaffinity(0))
    workers = a.workers or cpus
    env = {**os.environ, **dict(kv.split("=", 1) for kv in a.env)}
    suitefit = str(Path(a.python).with_name("suitefit"))
    cmds = commands(a.python, suitefit, list(a.pytest_args), history, workers, cpus, a.pinned)
    if a.only:
        wanted = a.only.split(",")
        if "suitefit" not in wanted or any(n not in cmds for n in wanted):
            print(f"bench_suite.py: --only must name suitefit and some of {', '.join(cmds)}", file=sys.stderr)
            return 2
        cmds = {n: cmds[n] for n in wanted}

    def measure(name: str, cmd: list[str], extra: dict[str, str], log: Path) -> tree_sampler.Result:
        ticks = cpu_ticks()
        with log.open("w") as out:
            r = tree_sampler.measure(cmd, cwd=a.suite, env={**env, **extra}, stdout=out, stderr=out,
                                     timeout=a.timeout)
        # the host's share of the CPU time wanted meanwhile: a run it took 10% from is 10% slower
        steal = steal_share(ticks, cpu_ticks())
        print(f"  {name:16} {r.wall_s:8.1f} s {r.peak_rss_mb:8.0f} MiB {r.cpu_s or 0.0:8.1f} s CPU  exit {r.exit_code}"
              + ("" if steal is None else f"  steal {steal:.1%}"), flush=True)
        if r.exit_code != 0:
            print(f"bench_suite.py: {name} exited {r.exit_code}; see {log}", file=sys.stderr)
            raise SystemExit(2)
        return r

    print(f"profile (serial, into {history}):", flush=True)
    measure("profile", [suitefit, "profile", "--history", str(history), "--", *a.pytest_args], {},
            work / "profile.log")
    names = list(cmds)
    got: dict[str, list[tree_sampler.Result]] = {n: [] for n in names}
    preds: list[tuple[float, float, float, float, str]] = []
    for rnd in range(a.rounds):
        print(f"round {rnd + 1}:", flush=True)
        for i in range(len(names)):
            name = names[(i + rnd) % len(names)]
            log = work / f"r{rnd + 1}_{name}.log"
            r = measure(name, *cmds[name], log)
            got[name].append(r)
            if name == "suitefit" and (p := predicted(log)) is not None:
                preds.append((p[0], r.wall_s, p[1], r.peak_rss_mb, plan_line(log)))

    print(f"\n{workers} workers, medians (min-max) of {a.rounds} round(s):")
    print("| command | wall s | peak MiB | CPU s |\n|---|---|---|---|")
    for n in names:
        w, p, c = ([getattr(r, k) or 0.0 for r in got[n]] for k in ("wall_s", "peak_rss_mb", "cpu_s"))
        print(f"| {n} | {med(w):.1f} ({min(w):.1f}-{max(w):.1f}) | {med(p):.0f} ({min(p):.0f}-{max(p):.0f}) "
              f"| {med(c):.1f} |")
    sw = med([r.wall_s for r in got["suitefit"]])
    sp = med([r.peak_rss_mb for r in got["suitefit"]])
    print("\nsuitefit against each mode: " + ", ".join(
        f"{n} {sw / med([r.wall_s for r in got[n]]):.2f}x wall / "
        f"{sp / med([r.peak_rss_mb for r in got[n]]):.2f}x peak" for n in names if n != "suitefit"))
    print("\nsuitefit's predictions (predicted against measured, + where the prediction was higher):")
    for i, (pw, mw, pp, mp, line) in enumerate(preds, 1):
        print(f"  run {i}: wall {pw:.1f} s / {mw:.1f} s ({pw / mw - 1:+.0%}), "
              f"peak {pp:.0f} / {mp:.0f} MiB ({pp / mp - 1:+.0%})  [{line}]")
    if a.json:
        a.json.write_text(json.dumps({n: [dataclasses.asdict(r) for r in rs] for n, rs in got.items()}, indent=1,
                                     default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
