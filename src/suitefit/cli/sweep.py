"""``suitefit sweep``: each test file alone in a fresh pytest, compared with the full run."""

from __future__ import annotations

import json
from pathlib import Path

import click

from suitefit.budget import detect_budget
from suitefit.config import load_config
from suitefit.costs import DEFAULT_WORKER
from suitefit.diagnose.sweep import DEFAULT_FILE_MB, sweep
from suitefit.errors import SuitefitError
from suitefit.history import History
from suitefit.units import fmt_mb, fmt_s


@click.command("sweep", context_settings={"ignore_unknown_options": True})
@click.option("--repeat", type=int, default=None, help="Runs of each file alone (default 1; 2+ finds flaky tests).")
@click.option("--jobs", "-j", type=int, default=None, help="Parallel pytest processes (default: CPUs, within the memory budget).")
@click.option("--memory-budget", default=None, help="Memory the parallel runs may use, e.g. 4GiB (default: as `suitefit run`: [tool.suitefit] memory_budget, else the cgroup limit or RAM minus memory_margin).")
@click.option("--run-id", type=int, default=None, help="The full run to compare with (default: the latest in the history).")
@click.option("--fresh", is_flag=True, help="Make a new full run even if the history has one.")
@click.option("--timeout", type=float, default=None, help="Kill one pytest process after this many seconds.")
@click.option("--history", "history_path", type=click.Path(), default=None, help="History file.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.argument("pytest_args", nargs=-1, type=click.UNPROCESSED)
def command(repeat: int | None, jobs: int | None, memory_budget: str | None, run_id: int | None,
            fresh: bool, timeout: float | None, history_path: str | None, as_json: bool,
            pytest_args: tuple[str, ...]) -> int:
    """Run every test file alone and report victims, dependents and flaky tests (exit 1 if any)."""
    cfg = load_config()
    repeat = repeat if repeat is not None else int(cfg.get("sweep.repeat"))
    if jobs is not None and jobs < 1:
        raise SuitefitError(f"--jobs must be at least 1, got {jobs}")
    # The same budget as `suitefit run`: flags, else [tool.suitefit], else cgroup/RAM minus margin.
    budget = detect_budget(memory_budget, jobs, cfg)
    # The plan's figure is above a worker's baseline; a file alone is a whole pytest process.
    file_mb = cfg.get("default_file_mb")
    default_mb = DEFAULT_FILE_MB if file_mb is None else DEFAULT_WORKER.baseline_mb + file_mb
    path = Path(history_path) if history_path else cfg.history_path
    if run_id is not None and not path.exists():
        raise SuitefitError(f"no history at {path}: run `suitefit profile` first")

    def progress(msg: str) -> None:
        if not as_json:
            click.echo(f"  {msg}", err=True)

    with History(path) as h:
        rep = sweep(h, cwd=Path.cwd(), pytest_args=pytest_args, repeat=repeat,
                    jobs=budget.workers or budget.cpus, budget_mb=budget.memory_mb, run_id=run_id,
                    fresh=fresh, default_file_mb=float(default_mb),
                    timeout_s=timeout, progress=progress)
    if as_json:
        click.echo(json.dumps(rep.to_json(), indent=2))
    else:
        made = "made now" if rep.suite_made else "from the history"
        click.echo(f"swept {len(rep.files)} files alone x{rep.repeat} against full run {rep.suite_run} "
                   f"({made}); {rep.jobs} at a time within {fmt_mb(rep.budget_mb)}; {fmt_s(rep.wall_s)}")
        click.echo(f"memory budget: {budget.memory_source}; CPUs: {budget.cpus_source}")
        for note in rep.notes:
            click.echo(f"note: {note}")
        if not rep.findings:
            click.echo("no order dependencies or flaky tests found")
        for f in rep.findings:
            click.echo(f"{f.kind:<9} {f.nodeid}: {f.explain()}")
        if any(f.kind in ("victim", "dependent") for f in rep.findings):
            click.echo("next: suitefit bisect NODEID  (finds the polluter or provider)")
    return 1 if rep.findings else 0
