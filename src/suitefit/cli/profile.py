"""`suitefit profile`: run the suite once, measured, and store it in the history."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from suitefit.cli._common import (
    finalize_run,
    history_for_a_run,
    history_option,
    record_command_wall,
    resolve_history,
    run_pytest,
    start_measured_run,
)
from suitefit.errors import SuitefitError
from suitefit.exits import EXIT_FAILED, EXIT_OK, explain_exit
from suitefit.summary import run_summary


@click.command(context_settings={"ignore_unknown_options": True})
@history_option
@click.option("--json", "as_json", is_flag=True, help="print a machine-readable summary on stdout")
@click.option("-n", "--workers", default=None, help="run under pytest-xdist with this many workers")
@click.argument("pytest_args", nargs=-1, type=click.UNPROCESSED)
def command(history_path: Path | None, as_json: bool, workers: str | None, pytest_args: tuple[str, ...]) -> None:
    """Run the suite once while measuring; store it; print the hogs and expensive fixtures.

    Arguments after `--` go to pytest as they are.
    """
    h = history_for_a_run(resolve_history(history_path))
    args = list(pytest_args)
    if workers is not None:
        args = ["-n", workers, *args]
    run_id = start_measured_run(h, "profile", args)
    # "--opt=PATH", not "--opt PATH": pytest picks its rootdir before plugin options are known,
    # so a separate existing PATH outside the suite would count as a test path and move rootdir.
    full = ["--suitefit", f"--suitefit-history={h.path}", "--suitefit-run-id", str(run_id), *args]
    # With --json, stdout carries only the JSON: pytest's own output goes to stderr.
    rc = run_pytest(full, stdout=sys.stderr if as_json else None)
    status = finalize_run(h, run_id, rc)
    record_command_wall(h, run_id)
    if as_json:
        click.echo(json.dumps(run_summary(h, run_id), indent=2))
    problem = explain_exit(rc, status)
    if problem:
        raise SuitefitError(f"run {run_id}: {problem}", exit_code=rc if rc > 0 else 1)
    if rc not in (EXIT_OK, EXIT_FAILED):
        sys.exit(rc)
    sys.exit(rc)
