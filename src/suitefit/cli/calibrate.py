"""`suitefit calibrate`: run a slice of the suite side by side, to measure contention.

`suitefit profile` runs it after a serial profile (``--no-calibrate`` or ``[tool.suitefit]
calibrate = false`` skip it); the verb runs it again on its own. What it runs is chosen by
``plan/calibration.py``; how it is recorded is a run's own recording (kind ``calibrate``),
so the cost model reads it like any run with workers.
"""

from __future__ import annotations

import subprocess
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
    xdist_option,
)
from suitefit.config import Config, load_config
from suitefit.exits import EXIT_FAILED, EXIT_OK, explain_exit
from suitefit.history import History
from suitefit.median import median
from suitefit.summary import failed_tests
from suitefit.units import fmt_s


@click.command(context_settings={"ignore_unknown_options": True})
@history_option
@click.option("--workers", type=click.IntRange(min=2), default=None,
              help="run side by side on this many workers (default: one a CPU, at most 8)")
@click.argument("pytest_args", nargs=-1, type=click.UNPROCESSED)
def command(history_path: Path | None, workers: int | None, pytest_args: tuple[str, ...]) -> None:
    """Run files the history timed alone side by side, so that plans know how much workers slow each other.

    Arguments after `--` go to pytest as they are (the same ones the profile had).
    """
    cfg = load_config()
    h = history_for_a_run(resolve_history(history_path, cfg))
    try:
        line, ok = calibrate(h, cfg, list(pytest_args), workers=workers)
    finally:
        h.close()
    click.echo(f"suitefit: {line}", err=True)
    if not ok:
        sys.exit(1)


def skip_reason(args: list[str]) -> str | None:
    """Why a profile run with ``args`` is not followed by a calibration (None: it is)."""
    import importlib.util

    if importlib.util.find_spec("xdist") is None:
        return "pytest-xdist is not installed"
    for i, a in enumerate(args):
        if xdist_option(a):
            return "the arguments choose xdist's workers themselves"
        if (a == "-p" and i + 1 < len(args) and args[i + 1] == "no:xdist") or a == "-pno:xdist":
            return "the arguments turn pytest-xdist off"
    return None


def calibrate(h: History, cfg: Config, args: list[str], *, workers: int | None = None) -> tuple[str, bool]:
    """Run the calibration; (the line that says what it measured or why not, whether it ran)."""
    from suitefit.budget import detect_budget
    from suitefit.costs import build_cost_model
    from suitefit.measure.proctree import age_s
    from suitefit.plan.calibration import choose

    before_s = age_s() or 0.0  # this command's time before the calibration (a profile's run)
    why = skip_reason(args)
    if why is not None:
        return f"calibration skipped: {why}", False
    serial = h.execute("SELECT id FROM runs WHERE workers <= 1 AND status IN ('passed', 'failed') "
                       "AND id IN (SELECT DISTINCT run_id FROM files) ORDER BY id DESC LIMIT 1")
    if not serial:
        return "calibration skipped: no serial run in the history to compare with (`suitefit profile` first)", False
    budget = detect_budget(None, workers, cfg)
    if budget.workers == 1:
        return "calibration skipped: [tool.suitefit] workers = 1: the plans run no workers side by side", False
    costs = build_cost_model(h, groups=cfg.groups, root=cfg.root)
    pick = choose(costs, budget.cpus, budget.memory_mb, workers=budget.workers)
    if not pick.files:
        return f"calibration skipped: {pick.why}", False
    run_id = start_measured_run(h, "calibrate", args, workers_planned=pick.workers,
                                calibration_files=len(pick.files), calibration_window_s=round(pick.window_s, 3))
    listing = h.path.parent / f"calibrate-{run_id}.txt"
    listing.write_text("".join(f"{p}\n" for p in pick.files), encoding="utf-8")
    log = h.path.parent / f"calibrate-{run_id}.log"
    full = ["--suitefit", f"--suitefit-history={h.path}", f"--suitefit-run-id={run_id}",
            f"--suitefit-only={listing}", "--suitefit-progress=off",
            "-n", str(pick.workers), "--dist", "loadfile", *_in_order(), "--max-worker-restart=0",
            "-p", "no:cacheprovider", *args]
    click.echo(f"suitefit: calibrating: {pick.why}, to measure how much they slow each other "
               f"(run {run_id}; pytest's output in {log})", err=True)
    # its workers get a plan's workers' thread pools from the plugin (``session._share_cpus``)
    with open(log, "wb") as out:
        rc = run_pytest(full, stdout=out, stderr=subprocess.STDOUT)
    listing.unlink(missing_ok=True)  # its input; the log (pytest's output) stays, the files are in the history
    status = finalize_run(h, run_id, rc)
    record_command_wall(h, run_id, unmeasured_s=before_s)
    problem = explain_exit(rc, status)
    if problem or rc not in (EXIT_OK, EXIT_FAILED):
        return f"calibration run {run_id} did not finish: {problem or f'pytest exited {rc}'} (see {log})", False
    return _measured_line(h, cfg, run_id, pick.workers), True


def _in_order() -> list[str]:
    """xdist 3.8+ hands out files with the most tests first unless told not to: the longest
    first (the calibration's order) keeps the last file on a worker, which runs alone, short."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        parts = version("pytest-xdist").split(".")[:2]
        return ["--no-loadscope-reorder"] if (int(parts[0]), int(parts[1])) >= (3, 8) else []
    except (PackageNotFoundError, ValueError, IndexError):
        return []


def _measured_line(h: History, cfg: Config, run_id: int, workers: int) -> str:
    """What the calibration measured, read back through the cost model the plans use."""
    from suitefit.costs import build_cost_model

    costs = build_cost_model(h, groups=cfg.groups, root=cfg.root)
    failed = len(failed_tests(h, run_id, 0.0))
    wall = h.run(run_id).wall_s
    parts = []
    factor = costs.run_slowdown.get(run_id)
    if factor is not None:
        took = f"side by side on {workers} workers, files took x{factor:.2f} their time alone"
        first_s, first_n = costs.first_uses.get(run_id, (0.0, 0))
        if first_n:
            took += (f" ({first_n} test(s) left out for {fmt_s(first_s)} over their serial time: one-off "
                     f"stalls, such as a first use of what the profile had warm, not contention)")
        ref_s, ref_n = costs.reference_stalls.get(run_id, (0.0, 0))
        if ref_n:
            took += (f" ({ref_n} of its test(s) stalled in the serial run, {fmt_s(ref_s)} more than their "
                     f"time here explains, such as a full garbage collection: left out of the serial time "
                     f"this is read against)")
        parts.append(took)
    else:
        parts.append(f"too few files ran cleanly to measure how {workers} workers slow each other")
    starts = [float(r[0]) for r in h.execute("SELECT startup_s FROM workers WHERE run_id = ? "
                                             "AND startup_s IS NOT NULL", [run_id])]
    alone = costs.startup_by_workers.get(1)
    if starts:
        parts.append(f"a worker started in {fmt_s(median(starts))}" + (f" ({fmt_s(alone)} alone)" if alone else ""))
    plans = costs.slowdown.get(workers)
    if factor is not None and plans is not None and abs(plans - factor) > 0.005:
        parts.append(f"plans use x{plans:.2f}, measured by whole runs with {workers} workers")
    elif factor is not None:
        parts.append(f"plans use it until a whole run with {workers} workers measures its own")
    line = f"calibration run {run_id} ({fmt_s(wall or 0.0)}): " + "; ".join(parts)
    if failed:
        line += (f". {failed} test(s) failed beside other files that passed in the serial profile: "
                 f"`suitefit report` shows run {run_id}")
    return line
