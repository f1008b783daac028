"""What the verbs share: the history option, opening the history, launching pytest."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from suitefit import timing
from suitefit.cli.handover import owner_pid
from suitefit.config import Config, load_config
from suitefit.errors import SuitefitError
from suitefit.exits import EXIT_NO_TESTS
from suitefit.history import History, HistoryCorrupt, set_aside

if TYPE_CHECKING:
    from suitefit.model import CostModel

F = TypeVar("F", bound=Callable[..., Any])


def history_option(f: F) -> F:
    return click.option(
        "--history", "history_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
        help="history file (default: [tool.suitefit] history, else .suitefit/history.sqlite)",
    )(f)


def resolve_history(history_path: Path | None, cfg: Config | None = None) -> Path:
    if history_path is not None:
        return history_path
    return (cfg or load_config()).history_path


def open_history(history_path: Path | None, *, create: bool = True, cfg: Config | None = None) -> History:
    return History(resolve_history(history_path, cfg), create=create)


def history_for_a_run(path: Path) -> History:
    """The history a measured run writes to; a corrupt one is moved aside and a new one started.

    In CI the history usually comes from a cache, and a bad cache must not fail a build
    whose tests would pass: the run goes ahead with a first plan. The verbs that only read
    (plan, report, history) keep the error instead: there is nothing to show without it.
    """
    try:
        h = History(path)
    except HistoryCorrupt as e:
        return _start_over(path, e)
    try:
        h.check_intact()
    except HistoryCorrupt as e:
        h.close()
        return _start_over(path, e)
    return h


def _start_over(path: Path, e: HistoryCorrupt) -> History:
    why = str(e).split(" is corrupt ", 1)[-1].split("; move it aside", 1)[0]
    aside = set_aside(path, timing.wall())
    click.echo(f"suitefit: history {path} is corrupt {why}: moved aside to {aside.name}; "
               "starting a new history with a first plan", err=True)
    return History(path)


# pytest-xdist's options that choose workers and how tests go to them
XDIST_OPTIONS = ("-n", "--numprocesses", "--dist", "-d", "--tx", "--max-worker-restart", "--maxprocesses")


def xdist_option(arg: str) -> bool:
    """Is ``arg`` one of xdist's worker options (``-n4`` and ``--dist=load`` included)?"""
    return arg.split("=", 1)[0] in XDIST_OPTIONS or (arg.startswith("-n") and arg[2:].isdigit())


def pytest_command(python: str | None = None) -> list[str]:
    return [python or sys.executable, "-m", "pytest"]


def run_pytest(args: Sequence[str], *, stdout: Any = None, env: dict[str, str] | None = None,
               cwd: Path | None = None, stderr: Any = None) -> int:
    """Run pytest in a child process, its output streamed through; returns its exit code."""
    try:
        proc = subprocess.Popen(
            [*pytest_command(), *args], stdout=stdout, stderr=stderr, env=env or os.environ.copy(), cwd=cwd,
            stdin=subprocess.DEVNULL,
        )
    except OSError as e:
        raise SuitefitError(f"cannot start pytest: {e.strerror}") from None
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise


def start_measured_run(h: History, kind: str, pytest_args: Sequence[str], **meta: Any) -> int:
    """A new run owned by this process: if it dies unrecorded, the next command settles the run."""
    from suitefit.measure.proctree import create_time

    owner = owner_pid()
    return h.new_run(kind, started=timing.wall(), argv=list(pytest_args), cwd=os.getcwd(),
                     meta={**meta, "pid": owner, "pid_started": create_time(owner)})


def record_command_wall(h: History, run_id: int, unmeasured_s: float = 0.0) -> None:
    """From this command's start to its pytest's exit: what the plan's prediction of a
    command is compared with (a serial profile's end, after its last test, is measured
    here, where pytest's own process cannot see it). ``unmeasured_s``: what the command did
    first that is not the run (a profile's compiling collection), left out."""
    from suitefit.measure.proctree import age_s

    command_s = age_s()
    if command_s is not None:
        h.merge_run_meta(run_id, command_wall_s=round(command_s - unmeasured_s, 3))


def finalize_run(h: History, run_id: int, rc: int) -> str:
    """Mark a run whose pytest never reached its own sessionfinish (killed, crashed)."""
    run = h.run(run_id)
    if run.status == "running":
        status = "crashed" if rc < 0 else ("no-tests" if rc == EXIT_NO_TESTS else "error")
        h.update_run(run_id, status=status, exit_code=rc, finished=timing.wall(),
                     wall_s=timing.wall() - run.started)
        return status
    return run.status


def restrict_to_paths(costs: CostModel, args: Sequence[str], root: Path) -> CostModel:
    """The files pytest's path arguments select (`suitefit run -- tests/unit`, and `suitefit
    plan` with the same arguments): the plan is theirs, its worker count and prediction too.
    Unchanged where the arguments name no path, one that cannot be read as a path under the
    suite's folder, or no measured file (said in a line: a new file is planned as the run
    finds it); a path that is not there is named in a line."""
    from suitefit.costs import restrict
    from suitefit.selection import files_selected, measured_root, missing_paths

    root = measured_root([f.path for f in costs.files if f.measured], args, Path.cwd(), root)
    keep = files_selected(list(args), Path.cwd(), root)
    if keep is None:
        gone = missing_paths(list(args), Path.cwd())
        if gone:
            click.echo(f"suitefit: plan: no file or folder {gone[0]} here: the whole suite is planned",
                       err=True)
        return costs
    picked = restrict(costs, keep, "the paths given")
    if len(picked.files) == len(costs.files):
        return costs
    if not any(f.measured for f in picked.files):  # a new file, or a path that is not there
        measured = sum(f.measured for f in costs.files)
        click.echo(f"suitefit: plan: the paths given select none of the {measured} measured files: the "
                   "whole suite is planned (a new file is planned as the run finds it)", err=True)
        return costs
    click.echo(f"suitefit: plan: {picked.notes[-1]}", err=True)
    return picked
