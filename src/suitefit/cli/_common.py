"""What the verbs share: the history option, opening the history, launching pytest."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from suitefit import timing
from suitefit.config import Config, load_config
from suitefit.errors import SuitefitError
from suitefit.exits import EXIT_NO_TESTS
from suitefit.history import History, HistoryCorrupt, set_aside

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


def pytest_command(python: str | None = None) -> list[str]:
    return [python or sys.executable, "-m", "pytest"]


def run_pytest(args: Sequence[str], *, stdout: Any = None, env: dict[str, str] | None = None,
               cwd: Path | None = None) -> int:
    """Run pytest in a child process, its output streamed through; returns its exit code."""
    try:
        proc = subprocess.Popen(
            [*pytest_command(), *args], stdout=stdout, env=env or os.environ.copy(), cwd=cwd,
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

    owner = _owner_pid or os.getpid()
    return h.new_run(kind, started=timing.wall(), argv=list(pytest_args), cwd=os.getcwd(),
                     meta={**meta, "pid": owner, "pid_started": create_time(owner)})


# Set in the child that prepares a run (``prepare_beside_pytest``): the run's owner is the
# process that becomes pytest, not the child, which exits before the first test.
_owner_pid: int | None = None


def record_command_wall(h: History, run_id: int) -> None:
    """From this command's start to its pytest's exit: what the plan's prediction of a
    command is compared with (a serial profile's end, after its last test, is measured
    here, where pytest's own process cannot see it)."""
    from suitefit.measure.proctree import age_s

    command_s = age_s()
    if command_s is not None:
        h.merge_run_meta(run_id, command_wall_s=round(command_s, 3))


def finalize_run(h: History, run_id: int, rc: int) -> str:
    """Mark a run whose pytest never reached its own sessionfinish (killed, crashed)."""
    run = h.run(run_id)
    if run.status == "running":
        status = "crashed" if rc < 0 else ("no-tests" if rc == EXIT_NO_TESTS else "error")
        h.update_run(run_id, status=status, exit_code=rc, finished=timing.wall(),
                     wall_s=timing.wall() - run.started)
        return status
    return run.status


@dataclass(frozen=True)
class Handover:
    """pytest's command line, run in this process once click has returned (``cli.main``).

    Not an exec of a new interpreter: that paid a second Python start-up and a second
    import of what the plugin shares with the CLI (the history, the config, SQLite), the
    larger part of suitefit's fixed start on a one-worker run (benchmarks/README.md,
    "fifth round"). pytest runs as ``python -m pytest`` would: the same argv, the working
    directory first on ``sys.path``, stdin /dev/null (a test that reads it must not hang
    CI), BLAS/OpenMP pools pinned to a thread. Returned by the command rather than called
    from it, so that click's context is gone before the first test. From here the plugin
    (``run_close``) says the run's closing lines.
    """

    args: tuple[str, ...]
    history_path: Path
    run_id: int

    def run(self) -> int:
        from suitefit.threads import pin_threads

        try:
            import pytest
        except ImportError as e:
            with History(self.history_path) as h:
                h.update_run(self.run_id, status="error")
            raise SuitefitError(f"cannot import pytest in {sys.executable}: {e}") from None
        pin_threads(os.environ)
        sys.stdout.flush()
        sys.stderr.flush()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        spec = importlib.util.find_spec("pytest.__main__")
        sys.argv = [spec.origin if spec is not None and spec.origin else "pytest", *self.args]
        if not getattr(sys.flags, "safe_path", False) and sys.path:  # -P (3.11+)
            sys.path[0] = os.getcwd()  # what `python -m` puts first
        return int(pytest.console_main())


def prepare_beside_pytest(prepare: Callable[[], Handover]) -> Handover:
    """``prepare()`` (reading the history, the cost model, the plan, the run's record) in a
    forked child, while this process imports pytest: the two do not depend on each other,
    and on a runner with two CPUs the plan then costs the run's start nothing up to what
    pytest's import takes (~150 ms). The child says what it has to say on stderr itself,
    hands the command line back through a pipe and exits; an error there is the command's.

    Without ``fork`` (or once threads run here, where a fork is unsafe) it runs in turn.
    """
    import threading

    if not hasattr(os, "fork") or threading.active_count() > 1:
        return prepare()
    sys.stdout.flush()
    sys.stderr.flush()
    r, w = os.pipe()
    try:
        pid = os.fork()
    except OSError:  # no process to spare (a limit): plan here, in turn
        os.close(r)
        os.close(w)
        return prepare()
    if pid == 0:  # the child: never returns
        global _owner_pid
        _owner_pid = os.getppid()
        os.close(r)
        out: dict[str, Any] = {"exit": 1}
        try:
            h = prepare()
            out = {"args": list(h.args), "history": str(h.history_path), "run_id": h.run_id}
        except KeyboardInterrupt:  # the parent got the same signal and says so
            out = {"exit": 130}
        except BaseException as e:
            from suitefit.cli import say_error

            code = say_error(e)
            if code is None:  # what would have been a traceback here is one there, then the exit
                import traceback

                traceback.print_exc()
            out = {"exit": 1 if code is None else code}
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
                rest = memoryview(json.dumps(out).encode())
                while rest:  # a long command line can be more than one write takes
                    rest = rest[os.write(w, rest):]
            finally:
                os._exit(0)
    os.close(w)
    with contextlib.suppress(ImportError):  # Handover.run says so, once the run is recorded
        # the part of pytest's start that the plan does not change: pytest, and the plugin's
        # session module, which every `--suitefit` run imports at its configure
        import pytest  # noqa: F401

        import suitefit.session  # noqa: F401
    with os.fdopen(r, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    try:
        got = json.loads(data or b"{}")
    except ValueError:
        got = {}
    if "args" not in got:
        if os.WIFSIGNALED(status):
            raise SuitefitError(f"planning the run was killed by signal {os.WTERMSIG(status)} before it answered")
        raise SystemExit(int(got.get("exit", 1)))
    return Handover(tuple(got["args"]), Path(got["history"]), int(got["run_id"]))
