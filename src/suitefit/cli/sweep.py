"""``suitefit sweep``: each test file alone in a fresh pytest, compared with the full run."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import click

from suitefit.budget import detect_budget
from suitefit.config import load_config
from suitefit.costs import DEFAULT_WORKER
from suitefit.diagnose.sweep import DEFAULT_FILE_MB, SweepReport, sweep
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
@click.option("--bisect", "then_bisect", is_flag=True,
              help="Bisect each victim and dependent to its polluter or provider and remember it for "
                   "the next plan (--repeat defaults to 2 then: a flaky test is never bisected).")
@click.argument("pytest_args", nargs=-1, type=click.UNPROCESSED)
def command(repeat: int | None, jobs: int | None, memory_budget: str | None, run_id: int | None,
            fresh: bool, timeout: float | None, history_path: str | None, as_json: bool,
            then_bisect: bool, pytest_args: tuple[str, ...]) -> int:
    """Run every test file alone and report victims, dependents and flaky tests (exit 1 if any)."""
    cfg = load_config()
    # --bisect needs two runs of each file alone to tell a flaky test from an order dependency
    repeat = repeat if repeat is not None else (
        int(cfg.get("sweep.repeat")) if "repeat" in cfg.section("sweep") else 2 if then_bisect else 1)
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
        learned = _bisect_findings(h, rep, pytest_args, timeout, progress) if then_bisect else []
    if as_json:
        data = rep.to_json()
        if then_bisect:
            data["learned"] = learned
        click.echo(json.dumps(data, indent=2))
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
        for line in learned:
            click.echo(line)
        if any(f.kind in ("victim", "dependent") for f in rep.findings) and not then_bisect:
            click.echo("next: suitefit bisect NODEID  (finds the polluter or provider), "
                       "or sweep --bisect for all of them")
    return 1 if rep.findings else 0


def _bisect_findings(h: History, rep: SweepReport, pytest_args: tuple[str, ...], timeout: float | None,
                     progress: Callable[[str], None]) -> list[str]:
    """Bisect each victim and dependent against the swept run; remember what is found."""
    from suitefit.diagnose.bisect import bisect
    from suitefit.diagnose.explain import remember

    flaky = {f.file for f in rep.findings if f.kind == "flaky"}
    out: list[str] = []
    for f in rep.findings:
        if f.kind not in ("victim", "dependent"):
            continue
        if f.file in flaky:  # its file has a flaky test: an order cannot be trusted there
            out.append(f"not bisected {f.nodeid}: its file has a flaky test")
            continue
        try:
            res = bisect(h, f.nodeid, cwd=Path.cwd(), run_id=rep.suite_run, pytest_args=pytest_args,
                         timeout_s=timeout, progress=progress)
        except SuitefitError as e:
            out.append(f"not bisected {f.nodeid}: {e}")
            continue
        stored = remember(h, res.role, res.test, res.culprit,
                          f"{res.alone_outcome} alone, {res.suite_outcome} after {res.culprit}",
                          source=f"suitefit sweep --bisect of run {rep.suite_run}", run_id=res.run_id,
                          rootdir=str(Path.cwd()))
        if res.culprit is None:
            out.append(f"no single culprit for {f.nodeid}: {res.message}")
            continue
        out.append(f"{res.role} of {f.nodeid}: {res.culprit} ({res.pytest_runs} pytest runs); "
                   + (f"remembered: {stored}" if stored else "in one file: not an order of files"))
    return out
