"""`suitefit run`'s start: plan in a forked child while this process imports pytest, then
hand this process to pytest.

The fork comes first, before click and the verbs are imported (``cli.main``): the child
parses the command line, reads the history, plans and records the run, and says what it
has to say on stderr itself; this process meanwhile imports pytest and the plugin's
session module, which the plan does not change, and never imports click or the planner.
On a runner with two CPUs the command's own start then costs the run about nothing up to
what pytest's import takes. The child hands pytest's command line back through a pipe
and exits; an error there is the command's, with the child's exit status.

Without ``fork`` (or once threads run here, where a fork is unsafe) the command runs in
turn: parsed, planned, then handed over, all in this process.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from suitefit.errors import SuitefitError

# Set in the planning child: the run's owner is the process that becomes pytest, not the
# child, which exits before the first test (``_common.start_measured_run``).
_owner_pid: int | None = None


def owner_pid() -> int:
    return _owner_pid or os.getpid()


@dataclass(frozen=True)
class Handover:
    """pytest's command line, run in this process (``run``) once the plan is made.

    Not an exec of a new interpreter: that paid a second Python start-up and a second
    import of what the plugin shares with the CLI (the history, the config, SQLite), the
    larger part of suitefit's fixed start on a one-worker run (benchmarks/README.md,
    "fifth round"). pytest runs as ``python -m pytest`` would: the same argv, the working
    directory first on ``sys.path``, stdin /dev/null (a test that reads it must not hang
    CI). Thread pools are left alone here: the conftest files are imported before the plan
    is read, and a one-worker plan runs its tests in this process, as plain pytest would;
    with workers, the plugin shares the CPUs out among them before they start
    (``threads.py``). From here the plugin (``run_close``) says the run's closing lines.
    """

    args: tuple[str, ...]
    history_path: Path
    run_id: int

    def run(self) -> int:
        try:
            import pytest
        except ImportError as e:
            from suitefit.history import History

            with History(self.history_path) as h:
                h.update_run(self.run_id, status="error")
            raise SuitefitError(f"cannot import pytest in {sys.executable}: {e}") from None
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


def run_beside_pytest(args: list[str]) -> Any:
    """`suitefit run ARGS`: fork, plan in the child, import pytest here, hand over."""
    threading = sys.modules.get("threading")
    if not hasattr(os, "fork") or (threading is not None and threading.active_count() > 1):
        return _in_turn(args)
    sys.stdout.flush()
    sys.stderr.flush()
    r, w = os.pipe()
    try:
        pid = os.fork()
    except OSError:  # no process to spare (a limit): plan here, in turn
        os.close(r)
        os.close(w)
        return _in_turn(args)
    if pid == 0:
        os.close(r)
        _plan_and_answer(w, args)
    os.close(w)
    try:
        with contextlib.suppress(ImportError):  # Handover.run says so, once the run is recorded
            # the part of pytest's start that the plan does not change: pytest, and the
            # plugin's session module, which every `--suitefit` run imports at its configure
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
                _fail(f"planning the run was killed by signal {os.WTERMSIG(status)} before it answered", 1)
            sys.exit(int(got.get("exit", 1)))  # the child has said why
        rc = Handover(tuple(got["args"]), Path(got["history"]), int(got["run_id"])).run()
    except KeyboardInterrupt:  # the child got the same signal and left the saying to us
        _fail("interrupted", 130, prefix="suitefit: ")
    except SuitefitError as e:
        _fail(str(e), e.exit_code)
    sys.exit(rc)


def _in_turn(args: list[str]) -> Any:
    from suitefit.cli.app import main as app_main

    return app_main(args)


def _fail(message: str, code: int, prefix: str = "suitefit: error: ") -> NoReturn:
    sys.stderr.write(f"{prefix}{message}\n")
    sys.stderr.flush()
    sys.exit(code)


def _plan_and_answer(w: int, args: list[str]) -> NoReturn:
    """The child: the whole command up to the handover, then its answer on ``w``."""
    global _owner_pid
    _owner_pid = os.getppid()
    out: dict[str, Any] = {"exit": 1}
    try:
        from suitefit.cli.app import parse_and_run

        rv = parse_and_run(args)
        if isinstance(rv, Handover):
            out = {"args": list(rv.args), "history": str(rv.history_path), "run_id": rv.run_id}
        else:  # --help, --version: click has printed it
            out = {"exit": rv if isinstance(rv, int) and not isinstance(rv, bool) else 0}
    except KeyboardInterrupt:  # the parent got the same signal and says so
        out = {"exit": 130}
    except SystemExit as e:
        out = {"exit": e.code if isinstance(e.code, int) else (0 if e.code is None else 1)}
    except BaseException as e:
        from suitefit.cli.app import say_error

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
