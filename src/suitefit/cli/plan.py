"""``suitefit plan``: print the plan the history supports, its predictions, and why."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from suitefit.budget import detect_budget
from suitefit.cli._common import restrict_to_paths
from suitefit.config import load_config
from suitefit.costs import load_costs_or_discover
from suitefit.errors import SuitefitError
from suitefit.model import CONTENTION_UNKNOWN, Measured, Plan
from suitefit.plan import make_plan, plan_shards
from suitefit.plan.core import tail_base
from suitefit.units import fmt_mb, fmt_s

SHOWN_UNITS = 25


def _print_plan(console: Any, plan: Plan, show_all: bool) -> None:
    from rich.table import Table

    title = "plan" if plan.shard is None else f"shard {plan.shard[0]}/{plan.shard[1]}"
    table = Table(title=f"{title}: {len(plan.units)} units on {plan.workers} worker(s), "
                        f"longest first", title_justify="left")
    for col in ("#", "unit", "files", "predicted", "peak", "worker"):
        table.add_column(col, justify="left" if col in ("unit", "worker") else "right")
    where = {u: w for w, us in plan.placement.items() for u in us}
    tails: dict[str, set[str]] = {}  # a unit's tail that the prediction moved at the end
    for w, us in plan.placement.items():
        for name in us:
            if (base := tail_base(name)) is not None:
                tails.setdefault(base, set()).add(w)
    units = plan.units if show_all else plan.units[:SHOWN_UNITS]
    for i, u in enumerate(units, 1):
        moved = f" (tail: {', '.join(sorted(tails[u.name]))})" if u.name in tails else ""
        table.add_row(str(i), u.name, str(len(u.files)), fmt_s(u.wall_s), fmt_mb(u.peak_mb),
                      where.get(u.name, "-") + moved)
    console.print(table)
    if len(units) < len(plan.units):
        console.print(f"  ... {len(plan.units) - len(units)} more units (--all shows them)")
    b = plan.budget
    nothing = plan.measured is not None and plan.measured.nothing
    said = "guessed (nothing measured yet)" if nothing else "predicted"
    unknown = f" ({CONTENTION_UNKNOWN})" if plan.measured is not None and plan.measured.contention_unknown else ""
    console.print(f"{said}: wall {fmt_s(plan.predicted_wall_s)}{unknown}, peak {fmt_mb(plan.predicted_peak_mb)} of a {fmt_mb(b.memory_mb)} budget "
                  f"({fmt_mb(plan.headroom_mb)} of it headroom), {plan.workers} worker(s)", highlight=False, markup=False)
    if plan.measured is not None:
        console.print(f"measured: {plan.measured.words()}", highlight=False, markup=False)
    console.print("why (every figure below is from default costs, not measurements):" if nothing else "why:",
                  highlight=False, markup=False)
    for r in plan.reasons:
        console.print(f"  - {r}", highlight=False, markup=False)
    for w in plan.warnings:
        console.print(f"  warning: {w}", style="yellow", highlight=False, markup=False)


@click.command("plan")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.option("--memory-budget", metavar="SIZE", help="Memory budget, e.g. 6GiB (default: detected).")
@click.option("--workers", type=click.IntRange(min=1), help="Pin the worker count.")
@click.option("--shards", type=click.IntRange(min=1), help="Split into N CI shards.")
@click.option("--history", "history_path", type=click.Path(dir_okay=False, path_type=Path),
              help="History file (default: [tool.suitefit] history).")
@click.option("--all", "show_all", is_flag=True, help="List every unit, not only the first 25.")
@click.option("--constraints", "show_constraints", is_flag=True,
              help="List the learned order constraints with their evidence (and nothing else).")
@click.option("--as-groups", is_flag=True,
              help="With --constraints: print them as [tool.suitefit] groups TOML, for review.")
@click.option("--write", "write_pyproject", is_flag=True,
              help="With --as-groups: add that table to pyproject.toml instead of printing it.")
@click.argument("pytest_args", nargs=-1, type=click.UNPROCESSED)
def command(as_json: bool, memory_budget: str | None, workers: int | None, shards: int | None,
            history_path: Path | None, show_all: bool, show_constraints: bool, as_groups: bool,
            write_pyproject: bool, pytest_args: tuple[str, ...]) -> None:
    """Plan workers, groups, order and shards from the history, with one reason per decision.

    Arguments after `--` are the ones `suitefit run` would pass to pytest: paths among them
    plan only those files, as that run would."""
    cfg = load_config()
    path = history_path or cfg.history_path
    if (as_groups or write_pyproject) and not show_constraints:
        raise SuitefitError("--as-groups and --write go with --constraints")
    if write_pyproject and not as_groups:
        raise SuitefitError("--write goes with --as-groups")
    if show_constraints:
        from suitefit.cli.constraints import show

        show(cfg, path, as_json=as_json, as_groups=as_groups, write=write_pyproject)
        return
    budget = detect_budget(memory_budget, workers, cfg)
    costs, found, discovered = load_costs_or_discover(cfg, path)
    costs = restrict_to_paths(costs, pytest_args, cfg.root)
    for line in costs.left_out:
        click.echo(f"suitefit: {line}", err=True)
    head = (f"history: {path} ({costs.runs_used} run(s) used)" if costs.runs_used else
            f"no history at {path}" if not found else f"history {path} holds no finished run")
    if not costs.runs_used:
        head += (f": a safe first plan from default costs for {len(discovered)} test file(s) found "
                 f"by name; memory admission stays on at run time")
    if shards is not None:
        split, plans = plan_shards(costs, budget, shards)
        plans = [replace(p, measured=Measured.of(p, costs)) for p in plans]
        if as_json:
            click.echo(json.dumps({"history": str(path), "history_found": bool(costs.runs_used),
                                   "shards": shards, "balanced": split.balanced,
                                   "plans": [p.to_json() for p in plans]}, indent=2))
            return
        console = _console()
        console.print(head, highlight=False, markup=False)
        from rich.table import Table

        t = Table(title=f"{shards} shards", title_justify="left")
        for c in ("shard", "files", "units", "workers", "predicted wall", "peak"):
            t.add_column(c, justify="right")
        for p in plans:
            assert p.shard is not None
            t.add_row(f"{p.shard[0]}/{p.shard[1]}", str(sum(len(u.files) for u in p.units)),
                      str(len(p.units)), str(p.workers), fmt_s(p.predicted_wall_s),
                      fmt_mb(p.predicted_peak_mb))
        console.print(t)
        walls = [p.predicted_wall_s for p in plans]
        mean = sum(walls) / len(walls)
        console.print(f"slowest shard {fmt_s(max(walls))} vs mean {fmt_s(mean)} "
                      f"({max(walls) / mean - 1:+.1%})" if mean else "no work", highlight=False)
        for p in plans:
            console.print()
            _print_plan(console, p, show_all)
        return
    plan = make_plan(costs, budget)
    plan = replace(plan, measured=Measured.of(plan, costs))
    if as_json:
        d = plan.to_json()
        d["history"] = str(path)
        d["history_found"] = bool(costs.runs_used)
        click.echo(json.dumps(d, indent=2))
        return
    console = _console()
    console.print(head, highlight=False, markup=False)
    _print_plan(console, plan, show_all)


def _console() -> Any:
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 120, highlight=False, soft_wrap=True,
                   emoji=False)
