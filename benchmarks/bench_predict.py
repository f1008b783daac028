"""How far `suitefit plan`'s predicted wall is from what runs took, at 1, 2 and 16 workers,
and its predicted peak from what runs measured.

For each recorded run R in a history (a suite bench_run.py kept with ``--keep``, or any
project's ``.suitefit/history.sqlite``): the cost model is built from the OTHER runs
(leave one out, so R's own times cannot leak into its prediction), a plan is made with
R's worker count pinned, and its predicted wall is compared with R's measured session
wall. This machine has 2 CPUs, so 16 workers cannot be measured: there, the "actual"
is the same plan's simulation with each unit's time as R measured it (its files, and
its persistent fixtures' setup, which the plan pays once per unit and R's cost model
charges to the fixture: the scheduling core replayed on recorded costs), which says how
much run-to-run variation of costs alone moves the wall at 16 workers. The peak: a planned
run's own plan (as recorded: what `suitefit run` printed) against its tree's peak plus its
sampler process, which the plan counts. Not left one out: a plan made from other runs may
choose otherwise (hogs apart or not), and its peak would be another schedule's.

    .venv/bin/python benchmarks/bench_predict.py HISTORY [--cpus 16] [--budget-mb N]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from suitefit.costs import build_cost_model, slowdown_factor
from suitefit.history import History
from suitefit.model import Budget, CostModel, Plan
from suitefit.plan import make_plan
from suitefit.plan.simulate import simulate


def _with_costs(plan: Plan, model: CostModel, run: CostModel) -> Plan:
    """The plan with each unit's time as one recorded run measured it.

    Both cost models charge a persistent fixture's setup to the fixture, not to the file
    that happened to set it up in that run, and the plan pays it once per unit that uses
    it (a group split over several workers pays it on each). Each unit's planned time is
    scaled by its files' and fixtures' cost in ``run`` against their cost in ``model``
    (what the plan was made from): the plan's structure (chunks, repeated setups) stays,
    the measured work is that run's. A raw per-file replay would count a pool's setup once
    for the whole run however many workers start it.
    """
    mf = {fc.path: fc.wall_s for fc in model.files}
    rf = {fc.path: fc.wall_s for fc in run.files}
    mx = {fx.name: fx.setup_s for fx in model.fixtures}
    rx = {fx.name: fx.setup_s for fx in run.fixtures}
    units = []
    for u in plan.units:
        planned = sum(mf.get(f, 0.0) for f in u.files) + sum(mx.get(n, 0.0) for n in u.fixtures)
        measured = sum(rf.get(f, mf.get(f, 0.0)) for f in u.files) + \
            sum(rx.get(n, mx.get(n, 0.0)) for n in u.fixtures)
        units.append(replace(u, wall_s=u.wall_s * (measured / planned if planned > 0 else 1.0)))
    return replace(plan, units=tuple(units))


def _serial_reference(src: Path) -> dict[str, float]:
    """Each file's median time over the history's serial runs (one process, no plan)."""
    times: dict[str, dict[int, float]] = {}
    with sqlite3.connect(src) as c:
        for run_id, path, wall in c.execute(
                "SELECT f.run_id, f.path, f.wall_s FROM files f JOIN runs r ON r.id = f.run_id "
                "WHERE COALESCE(r.workers, 0) <= 1"):
            per_run = times.setdefault(path, {})
            per_run[run_id] = per_run.get(run_id, 0.0) + wall
    return {p: statistics.median(v.values()) for p, v in times.items()}


def _serial_equivalent(model: CostModel, ref: dict[str, float]) -> tuple[CostModel, float]:
    """``model``'s file times as a serial run would take them, and the factor divided out.

    A cost model built from runs with workers only (no serial run to measure the slowdown
    against) holds their contended times; at 16 simulated workers the plan applies its own
    slowdown on top. Both sides of the 16-worker comparison are brought to the serial
    reference by the rule the cost model measures slowdown with (``slowdown_factor``), so
    that what is left is run-to-run variation of the costs.
    """
    factor = slowdown_factor([(fc.wall_s, ref[fc.path]) for fc in model.files if fc.path in ref])
    if factor is None:
        return model, 1.0
    files = tuple(replace(fc, wall_s=fc.wall_s / factor) for fc in model.files)
    return replace(model, files=files), factor


def _only(src: Path, run_id: int, dst: Path) -> None:
    """A copy of the history with every run but one removed."""
    with sqlite3.connect(src) as s, sqlite3.connect(dst) as d:
        s.backup(d)
    with sqlite3.connect(dst) as d:
        others = [int(r[0]) for r in d.execute("SELECT id FROM runs WHERE id != ?", [run_id])]
        for (table,) in d.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            cols = [c[1] for c in d.execute(f"PRAGMA table_info({table})")]
            if "run_id" in cols:
                d.execute(f"DELETE FROM {table} WHERE run_id != ?", [run_id])
        d.executemany("DELETE FROM runs WHERE id = ?", [[i] for i in others])


def _without(src: Path, run_id: int, dst: Path) -> None:
    """A copy of the history with one run removed (leave one out)."""
    with sqlite3.connect(src) as s, sqlite3.connect(dst) as d:
        s.backup(d)
    with sqlite3.connect(dst) as d:
        for (table,) in d.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            cols = [c[1] for c in d.execute(f"PRAGMA table_info({table})")]
            if "run_id" in cols:
                d.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])
        d.execute("DELETE FROM runs WHERE id = ?", [run_id])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_predict.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("history", type=Path)
    ap.add_argument("--cpus", type=int, default=16, help="the simulated machine's CPUs (default 16)")
    ap.add_argument("--budget-mb", type=float, default=1e9,
                    help="memory budget where a run was not planned (default: none binding)")
    a = ap.parse_args(argv)
    if not a.history.exists():
        ap.exit(2, f"bench_predict.py: error: no history at {a.history}\n")
    with History(a.history, create=False) as h:
        runs = [r for r in h.runs() if r.status in ("passed", "failed") and r.wall_s]
    errors: dict[int, list[float]] = {}
    peak_errors: dict[int, list[float]] = {}
    sim_errors: list[float] = []
    ref = _serial_reference(a.history)
    with tempfile.TemporaryDirectory() as tmp:
        for r in runs:
            if len(runs) < 2:
                break
            if r.kind == "calibrate":  # a slice of the files, not a whole run: nothing to compare
                print(f"run {r.id} (calibrate): a slice of the suite's files, left out")
                continue
            copy = Path(tmp) / f"h{r.id}.sqlite"
            _without(a.history, r.id, copy)
            with History(copy) as h2:
                costs = build_cost_model(h2)
            n = max(1, r.workers)
            plan = make_plan(costs, Budget(a.budget_mb, 2, workers=n))
            # the plan predicts the whole command (`suitefit run` to its end), which the run
            # recorded in its meta; a profile run has no such figure and is not compared
            command = r.meta_dict.get("command_wall_s")
            err = plan.predicted_wall_s / float(command) - 1 if command else float("nan")
            if command:
                errors.setdefault(n, []).append(err)
            planned_peak = float((r.plan_dict or {}).get("predicted_peak_mb") or 0.0)
            peak = (r.peak_rss_mb + float(r.meta_dict.get("sampler_rss_mb") or 0.0)) if r.peak_rss_mb else None
            perr = planned_peak / peak - 1 if peak and planned_peak else float("nan")
            if peak and planned_peak:
                peak_errors.setdefault(n, []).append(perr)
            serial_costs, model_factor = _serial_equivalent(costs, ref)
            big = make_plan(serial_costs, Budget(a.budget_mb, a.cpus, workers=a.cpus))
            kw = dict(startup_s=0.0, baseline_mb=big.baseline_mb, budget_mb=None, slow=big.slow,
                      fixed_mb=big.fixed_mb)
            planned = simulate(big, **kw)  # type: ignore[arg-type]
            alone = Path(tmp) / f"only{r.id}.sqlite"
            _only(a.history, r.id, alone)
            with History(alone) as h3:
                run_costs, run_factor = _serial_equivalent(build_cost_model(h3), ref)
            replayed = simulate(_with_costs(big, serial_costs, run_costs), **kw)  # type: ignore[arg-type]
            sim_errors.append(planned.wall_s / replayed.wall_s - 1 if replayed.wall_s else 0.0)
            print(f"run {r.id} ({r.kind}, {n} worker(s)): predicted {plan.predicted_wall_s:.2f} s, "
                  f"command {command or float('nan'):.2f} s ({err:+.0%}); "
                  + (f"its plan's peak {planned_peak:.0f} MiB, measured {peak or float('nan'):.0f} MiB "
                     f"({perr:+.0%}); " if planned_peak else "")
                  + f"{a.cpus} workers: planned "
                  f"{planned.wall_s:.2f} s vs replayed on this run's file times {replayed.wall_s:.2f} s "
                  f"({sim_errors[-1]:+.0%})"
                  + (f"; file times / {model_factor:.2f} (model) and / {run_factor:.2f} (this run) to their "
                     f"serial reference" if abs(model_factor - 1) > 0.005 or abs(run_factor - 1) > 0.005 else ""))
    for n, es in sorted(errors.items()):
        print(f"{n} worker(s): median error {statistics.median(es):+.1%} over {len(es)} run(s) "
              f"(range {min(es):+.0%} to {max(es):+.0%})")
    for n, es in sorted(peak_errors.items()):
        print(f"{n} worker(s): peak as planned, median error {statistics.median(es):+.1%} over {len(es)} run(s) "
              f"(range {min(es):+.0%} to {max(es):+.0%})")
    if sim_errors:
        print(f"{a.cpus} workers (simulated on recorded costs): median {statistics.median(sim_errors):+.1%} "
              f"(range {min(sim_errors):+.0%} to {max(sim_errors):+.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
