"""`suitefit run`: plan from the history, then run the suite under that plan through xdist."""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from suitefit.cli._common import (
    history_for_a_run,
    history_option,
    restrict_to_paths,
    start_measured_run,
    xdist_option,
)
from suitefit.cli.handover import Handover
from suitefit.config import load_config
from suitefit.errors import SuitefitError
from suitefit.history import History
from suitefit.model import Measured, Plan, WorkerCost, predicted
from suitefit.units import fmt_mb, fmt_s


def _check_args(args: list[str]) -> None:
    for a in args:
        if xdist_option(a):
            raise SuitefitError(
                f"pytest argument {a!r} conflicts with the plan: use `suitefit run --workers N` "
                "(suitefit chooses -n, --dist and --max-worker-restart itself)"
            )


@click.command(context_settings={"ignore_unknown_options": True})
@history_option
@click.option("--memory-budget", default=None, help="memory the run may use, e.g. 6GiB (default: what the runner has, minus a margin)")
@click.option("--workers", type=int, default=None, help="pin the worker count instead of choosing it")
@click.option("--grace", type=float, default=3.0, show_default=True,
              help="seconds a process a test left behind may live on before it is ended")
@click.option("--shard", "shard_text", default=None, metavar="K/N",
              help="run shard K of N (default: the CI's own variables, e.g. CI_NODE_INDEX/CI_NODE_TOTAL)")
@click.option("--result", "result_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="where a shard writes its portable result (default .suitefit/shard-K-of-N.json)")
@click.option("--explain-failures/--no-explain-failures", "explain", default=None,
              help="after the suite, bisect each new failure in fresh processes to its polluter or "
                   "provider and remember it for the next plan (default: [tool.suitefit] explain_failures)")
@click.option("--explain-limit", type=click.IntRange(min=1), default=None, metavar="N",
              help="diagnose at most N new failures (default 5, or the number in explain_failures)")
@click.option("--explain-time", type=click.FloatRange(min=1), default=300.0, show_default=True, metavar="S",
              help="time box of the whole diagnosis, in seconds")
@click.option("--separate-worker", type=click.Choice(["auto", "always", "never"]), default="auto",
              show_default=True,
              help="with a one-worker plan, run the tests in one xdist worker, so that a controller outlives "
                   "a test that kills the process and names it (auto: after a crashed run, if the "
                   "controller's memory fits beside the predicted peak)")
@click.argument("pytest_args", nargs=-1, type=click.UNPROCESSED)
def command(**options: Any) -> Handover:
    """Run the suite under a plan made from the history (through pytest-xdist).

    Arguments after `--` go to pytest. Every run is recorded, so each run improves the next plan.
    """
    return _prepare(**options)


def _prepare(history_path: Path | None, memory_budget: str | None, workers: int | None, grace: float,
             shard_text: str | None, result_path: Path | None, explain: bool | None,
             explain_limit: int | None, explain_time: float, separate_worker: str,
             pytest_args: tuple[str, ...]) -> Handover:
    """The plan, the run's record and pytest's command line: all that needs the history."""
    from suitefit.budget import detect_budget
    from suitefit.costs import load_costs_or_discover
    from suitefit.plan.planner import make_plan

    args = list(pytest_args)
    _check_args(args)
    if grace < 0:
        raise SuitefitError(f"--grace must be >= 0 seconds, got {grace}")
    from suitefit import shard_results

    shard: tuple[int, int] | None = None
    shard_source = ""
    if shard_text is not None:
        shard, shard_source = shard_results.parse_shard(shard_text), "--shard"
    else:
        found = shard_results.shard_from_env(os.environ)
        if found is not None:
            shard, shard_source = found
    cfg = load_config()
    path = history_path or cfg.history_path
    # checked before the plan reads it: a corrupt one is set aside; opened once for the
    # whole command (each close of SQLite's last connection checkpoints its WAL)
    h = history_for_a_run(path) if path.exists() else None
    explain_n = _explain_count(explain, explain_limit, cfg.explain_failures)
    costs, existed, _ = load_costs_or_discover(cfg, path, history=h)
    costs = restrict_to_paths(costs, args, cfg.root)
    for line in costs.left_out:
        click.echo(f"suitefit: {line}", err=True)
    budget = detect_budget(memory_budget, workers, cfg)
    spec = None
    split = None
    if shard is not None:
        from suitefit.plan.planner import shard_split

        k, n = shard
        plan = make_plan(costs, budget, shards=n, shard=k)
        split = shard_split(costs, n)
        spec = shard_results.ShardSpec(k, n, dict(split.assignment))
        click.echo(f"suitefit: shard {k}/{n} (from {shard_source}): "
                   + ("balanced by measured time" if split.balanced else
                      "no history: a stable hash split by file"), err=True)
    else:
        plan = make_plan(costs, budget)
    plan = replace(plan, measured=Measured.of(plan, costs))
    h = h or History(path)
    for gone in h.settle_abandoned():  # killed outright: say what its journal named, once
        from suitefit.cli.history import crashed_line  # rich: only when there is something to say

        said = crashed_line(gone, h.run(gone).meta_dict.get("crashed_in"))
        if said:
            click.echo(f"suitefit: {said}", err=True)
    if not existed or costs.runs_used == 0:
        click.echo("suitefit: no measured runs in the history yet: a safe first plan "
                   "(every file at a default cost); this run's measurements plan the next one", err=True)
    assert plan.measured is not None
    click.echo(
        f"suitefit: plan: {plan.workers} worker(s), {predicted(plan, 'wall', fmt_s(plan.predicted_wall_s))}, "
        f"peak {fmt_mb(plan.predicted_peak_mb)} of a {fmt_mb(budget.memory_mb)} budget "
        f"({budget.memory_source}; {fmt_mb(plan.headroom_mb)} of it kept as headroom); "
        f"`suitefit plan` explains each decision", err=True)
    if not plan.measured.nothing and not plan.measured.complete:
        click.echo(f"suitefit: plan: {plan.measured.words()}", err=True)
    for w in plan.warnings:
        click.echo(f"suitefit: warning: {w}", err=True)
    separate, why = False, ""
    if plan.workers == 1 and _has_xdist():
        if shard is not None and split is not None:  # the controller of its share of the tests
            from suitefit.plan.planner import shard_costs

            controller_mb = shard_costs(costs, split, shard[0]).controller_peak_mb
        else:
            controller_mb = costs.controller_peak_mb
        separate, why = choose_separate_worker(separate_worker, plan, costs.worker, h, controller_mb)
        if why:
            click.echo(f"suitefit: {why}", err=True)
    run_id = start_measured_run(h, "shard-run" if shard else "run", args, workers_planned=plan.workers,
                                shard=list(shard) if shard else None)
    plan_json = plan.to_json()  # once: ~30 ms for a 300-file plan
    h.update_run(run_id, plan=plan_json, budget_mb=budget.memory_mb)
    if why:
        h.merge_run_meta(run_id, separate_worker=separate, separate_worker_why=why)
    plan_file = h.path.parent / f"plan-{run_id}.json"
    plan_file.write_text(json.dumps(plan_json, indent=1))
    # `--opt=PATH`, never `--opt PATH`: a bare path argument would move pytest's rootdir.
    full = ["--suitefit", f"--suitefit-history={h.path}", f"--suitefit-run-id={run_id}",
            f"--suitefit-plan={plan_file}", f"--suitefit-grace={grace}",
            f"--suitefit-threshold={budget.memory_mb:.0f}MiB"]
    if explain_n:
        # The plugin diagnoses from pytest's own process once the session is over
        # (run_close.RunClose.explain_failures says why).
        full += [f"--suitefit-explain={explain_n}", f"--suitefit-explain-s={explain_time}"]
    if spec is not None:
        spec_file = h.path.parent / f"shard-spec-{run_id}.json"
        spec.dump(spec_file)
        result = result_path or h.path.parent / f"shard-{spec.k}-of-{spec.n}.json"
        full += [f"--suitefit-shard-spec={spec_file}", f"--suitefit-shard-result={result}"]
    if plan.workers >= 2 or separate:
        full += ["-n", str(plan.workers), "--max-worker-restart=0"]
    else:
        full += ["-n", "0"] if _has_xdist() else []
    h.close()
    return Handover((*full, *args), h.path, run_id)


def _explain_count(flag: bool | None, limit: int | None, configured: int) -> int:
    """New failures to diagnose: the flag wins over [tool.suitefit] explain_failures."""
    if flag is False:
        return 0
    if flag is None and not configured:
        return 0
    from suitefit.config import DEFAULT_EXPLAIN_FAILURES

    return limit or configured or DEFAULT_EXPLAIN_FAILURES


def choose_separate_worker(choice: str, plan: Plan, worker: WorkerCost, h: History,
                           controller_mb: float | None = None) -> tuple[bool, str]:
    """Run a one-worker plan in an xdist worker (``-n 1``) instead of in pytest's process? And why.

    In-process, a test that kills the process (SIGKILL, the OOM killer) takes the reporter
    with it and only the journal names the test afterwards. A controller outlives its worker
    and names the test, signal and memory at once, for the price of one more process: its
    start-up and its baseline memory (docs/plan.md, "One worker: in-process or separate",
    gives the measured figures). ``auto`` pays that price when a death is likely: the last
    run crashed, and the controller fits in the budget beside the predicted peak. A peak
    near the budget alone is not enough: there the controller's memory is what brings the
    kill closer, and its start-up made the budget case 1.37x slower than serial pytest
    (benchmarks/README.md). The controller counts at its measured peak (``controller_mb``,
    what the plans with workers count), else at one worker's baseline.
    """
    ctl_mb = worker.baseline_mb if controller_mb is None else controller_mb
    cost = f"costs a controller process (~{fmt_mb(ctl_mb)}, ~{fmt_s(worker.startup_s)} start-up)"
    if choice == "never":
        return False, ""
    if choice == "always":
        return True, f"one worker, run in a separate xdist worker (--separate-worker always): {cost}"
    budget = plan.admit_mb
    last = next((r for r in h.runs(limit=20) if r.kind in ("run", "shard-run") and r.status != "running"), None)
    crashed = last is not None and (last.status == "crashed" or bool(h.events(last.id, "worker_died")))
    if not crashed or last is None:
        return False, ""
    risk = f"run {last.id} crashed"
    if budget and plan.predicted_peak_mb + ctl_mb > budget:
        return False, (f"one worker, in pytest's own process: {risk}, but a separate worker's controller "
                       f"(~{fmt_mb(ctl_mb)}) would not fit in the budget; the journal names a killed test")
    return True, (f"one worker, run in a separate xdist worker: {risk}; its controller names a test that kills "
                  f"the worker at once ({cost}; --separate-worker never to skip)")


def _has_xdist() -> bool:
    return importlib.util.find_spec("xdist") is not None
