"""`suitefit profile`: run the suite once, measured, and store it in the history."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click

from suitefit import timing
from suitefit.cli._common import (
    finalize_run,
    history_for_a_run,
    history_option,
    record_command_wall,
    resolve_history,
    run_pytest,
    start_measured_run,
)
from suitefit.config import load_config
from suitefit.errors import SuitefitError
from suitefit.exits import EXIT_FAILED, EXIT_OK, explain_exit
from suitefit.history import History
from suitefit.summary import run_summary


@click.command(context_settings={"ignore_unknown_options": True})
@history_option
@click.option("--json", "as_json", is_flag=True, help="print a machine-readable summary on stdout")
@click.option("-n", "--workers", default=None, help="run under pytest-xdist with this many workers")
@click.option("--calibrate/--no-calibrate", default=None,
              help="after a serial profile, run a slice of its files side by side to measure how much "
                   "workers slow each other (default: [tool.suitefit] calibrate, true)")
@click.argument("pytest_args", nargs=-1, type=click.UNPROCESSED)
def command(history_path: Path | None, as_json: bool, workers: str | None, calibrate: bool | None,
            pytest_args: tuple[str, ...]) -> None:
    """Run the suite once while measuring; store it; print the hogs and expensive fixtures.

    Arguments after `--` go to pytest as they are.
    """
    h = history_for_a_run(resolve_history(history_path))
    args = list(pytest_args)
    if workers is not None:
        args = ["-n", workers, *args]
    compiling_s = _compile_first(args)
    run_id = start_measured_run(h, "profile", args, **({"compiled_first_s": round(compiling_s, 3)}
                                                       if compiling_s else {}))
    # "--opt=PATH", not "--opt PATH": pytest picks its rootdir before plugin options are known,
    # so a separate existing PATH outside the suite would count as a test path and move rootdir.
    full = ["--suitefit", f"--suitefit-history={h.path}", f"--suitefit-run-id={run_id}", *args]
    # With --json, stdout carries only the JSON: pytest's own output goes to stderr.
    rc = run_pytest(full, stdout=sys.stderr if as_json else None)
    status = finalize_run(h, run_id, rc)
    record_command_wall(h, run_id, unmeasured_s=compiling_s)
    _probe_faults(h, run_id)
    if rc in (EXIT_OK, EXIT_FAILED) and workers is None:
        _calibrate_after(h, args, calibrate)
    if as_json:
        click.echo(json.dumps(run_summary(h, run_id), indent=2))
    problem = explain_exit(rc, status)
    if problem:
        raise SuitefitError(f"run {run_id}: {problem}", exit_code=rc if rc > 0 else 1)
    if rc not in (EXIT_OK, EXIT_FAILED):
        sys.exit(rc)
    sys.exit(rc)


def _probe_faults(h: History, run_id: int) -> None:
    """What a MiB of new memory costs this machine to fault in (``measure/faultprobe.py``),
    kept with the profile: the plan's fault model bounds it from the files' system time
    otherwise, which other kernel work inflates. Once the tests are done: ~60 ms."""
    from suitefit.measure.faultprobe import s_per_mb

    rate = s_per_mb()
    if rate:
        h.merge_run_meta(run_id, fault_probe_s_per_mb=round(rate, 7))


def _calibrate_after(h: History, args: list[str], flag: bool | None) -> None:
    """The profile's calibration (``cli/calibrate.py``), unless turned off; never its exit code."""
    from suitefit.cli.calibrate import calibrate, skip_reason

    try:
        cfg = load_config()
        on = flag if flag is not None else bool(cfg.get("calibrate"))
    except SuitefitError as e:
        click.echo(f"suitefit: calibration skipped: {e}", err=True)
        return
    if not on or (flag is None and skip_reason(args) is not None):
        return
    line, _ = calibrate(h, cfg, args)
    click.echo(f"suitefit: {line}", err=True)


def _compile_first(args: list[str]) -> float:
    """Collect once, unmeasured, where no test bytecode is cached yet: the profile then
    records the start-up that later runs of this checkout pay, not a first run's compiling
    (which the next plan would take for every run's: after a profile of a fresh copy of
    networkx, the first plan predicted 76 s for a 51 s run, from a 14.2 s start-up where
    later runs start in 2.4 s)."""
    from suitefit.bytecode import uncached_test_files

    try:
        cfg = load_config()
    except SuitefitError:  # the run says so, if it matters to it
        return 0.0
    counts = uncached_test_files(cfg, args)
    if counts is None or 2 * counts[0] <= counts[1]:
        return 0.0
    click.echo(f"suitefit: no bytecode cached for {counts[0]} of {counts[1]} test file(s): collecting once "
               f"first, unmeasured, so that the profile measures what later runs here pay", err=True)
    t0 = timing.perf_counter()
    run_pytest([*args, "--collect-only", "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return timing.perf_counter() - t0
