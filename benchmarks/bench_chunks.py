"""Chunks of long files cut at equal counts against cut at equal shares of their time.

On a kept history (any project's ``.suitefit/history.sqlite``): the plan for ``--cpus``
workers is made twice from the same cost model, once as suitefit makes it (each long
file's chunks cut where its recorded time is shared equally) and once with that shape
removed (cut at equal counts, as before). Each chunk's time is then read back from one
recorded run's own per-test times in its slice (``--check RUN``: best a run other than the
one the cuts came from, where the file ran whole on one worker), and both plans are
simulated with those times: the scheduling core, replayed on recorded costs. This machine
has 2 CPUs, so 16 workers are simulated, not run.

    .venv/bin/python benchmarks/bench_chunks.py HISTORY --check RUN [--cpus 16]
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from dataclasses import replace
from pathlib import Path

from suitefit.costs import build_cost_model, chunked_in
from suitefit.history import History
from suitefit.model import Budget, Plan
from suitefit.plan import make_plan
from suitefit.plan.core import chunk_of
from suitefit.plan.simulate import simulate


def run_test_times(db: Path, run_id: int, path: str) -> list[float] | None:
    """A file's test times in run order, where it ran whole on one worker in ``run_id`` (not
    as chunks: their order on a worker is not the file's)."""
    with History(db, create=False) as h:
        if (run_id, path) in chunked_in(h, [run_id]):
            return None
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT worker, wall_s FROM tests WHERE run_id = ? AND file = ? ORDER BY seq",
                         [run_id, path]).fetchall()
    if not rows or len({r[0] for r in rows}) != 1:
        return None
    return [float(r[1] or 0.0) for r in rows]


def with_recorded_chunks(plan: Plan, db: Path, run_id: int) -> tuple[Plan, dict[str, list[float]]]:
    """The plan with each chunk's time as the run's tests in its slice took (whole units as planned)."""
    units, shown = [], {}
    cache: dict[str, list[float] | None] = {}
    for u in plan.units:
        if u.chunk is None:
            units.append(u)
            continue
        path = u.files[0]
        times = cache.setdefault(path, run_test_times(db, run_id, path))
        if times is None:
            units.append(u)
            continue
        t = sum(times[i] for i in chunk_of(list(range(len(times))), u.chunk, u.span))
        shown.setdefault(path, []).append(t)
        units.append(replace(u, wall_s=t))
    return replace(plan, units=tuple(units)), shown


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_chunks.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("history", type=Path)
    ap.add_argument("--check", type=int, required=True, help="the run whose per-test times are the truth")
    ap.add_argument("--cpus", type=int, default=16, help="the simulated machine's CPUs (default 16)")
    a = ap.parse_args(argv)
    if not a.history.exists():
        ap.exit(2, f"bench_chunks.py: error: no history at {a.history}\n")
    with History(a.history, create=False) as h:
        costs = build_cost_model(h)
    flat = replace(costs, files=tuple(replace(f, time_shares=()) for f in costs.files))
    budget = Budget(1e9, a.cpus, workers=a.cpus)
    for name, model in (("equal counts", flat), ("by time, as planned", costs)):
        plan = make_plan(model, budget)
        checked, shown = with_recorded_chunks(plan, a.history, a.check)
        kw = dict(startup_s=0.0, baseline_mb=plan.baseline_mb, budget_mb=None, slow=plan.slow,
                  fixed_mb=plan.fixed_mb)
        planned = simulate(plan, **kw)  # type: ignore[arg-type]
        replayed = simulate(checked, **kw)  # type: ignore[arg-type]
        print(f"{name}: {a.cpus} workers, planned {planned.wall_s:.1f} s, replayed on run {a.check}'s "
              f"test times {replayed.wall_s:.1f} s ({planned.wall_s / replayed.wall_s - 1:+.0%})")
        for path, ts in sorted(shown.items()):
            ideal = sum(ts) / len(ts)
            print(f"  {path}: {len(ts)} chunks, {' '.join(f'{t:.1f}' for t in ts)} s; "
                  f"the longest {max(ts) / ideal:.2f}x the even share")
    return 0


if __name__ == "__main__":
    sys.exit(main())
