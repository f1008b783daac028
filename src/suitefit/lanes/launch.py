"""``lanes start``: launch each lane's supervisor fully detached and return at once.

Detached means: stdin from /dev/null, stdout and stderr to the lane's log, no
other inherited descriptor, and a session of its own. A background child that
keeps the step's stdout/stderr pipes open makes the CI step wait for it, and the
overlap silently disappears (a 4 s lane made its launch take 4.0 s).
"""

from __future__ import annotations

import fcntl
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from suitefit.errors import SuitefitError
from suitefit.lanes import state
from suitefit.lanes.spec import LaneSpec
from suitefit.lanes.venvs import is_complete, venv_bin, venv_path

# Words a shell resolves itself; their absence from PATH says nothing.
_SHELL_WORDS = {
    "!", "[", "[[", ".", ":", "alias", "break", "case", "cd", "command", "continue", "eval",
    "exec", "exit", "export", "for", "function", "if", "local", "read", "return", "set",
    "shift", "source", "test", "time", "trap", "ulimit", "umask", "unset", "until", "wait",
    "while", "{", "(", "echo", "printf", "true", "false", "kill", "type",
}  # fmt: skip


@dataclass(frozen=True)
class Launched:
    name: str
    supervisor_pid: int
    log: Path
    process: subprocess.Popen[bytes]


def first_program(spec: LaneSpec) -> str | None:
    """The program a lane runs first, when it can be told without running a shell."""
    if not spec.shell:
        return spec.command[0]
    try:
        words = shlex.split(spec.command[0], comments=True)
    except ValueError:
        return None
    if not words:
        return None
    word = words[0]
    if word in _SHELL_WORDS or "=" in word or any(c in word for c in "$`|&;<>(){}*?~"):
        return None
    return word


def check_command(spec: LaneSpec, venv_dir: Path) -> None:
    """Fail now, with one line, for a lane whose program does not exist."""
    prog = first_program(spec)
    if prog is None:
        return
    where = f"lane {spec.name!r}"
    if not spec.cwd.is_dir():
        raise SuitefitError(f"{where}: working directory {spec.cwd} does not exist")
    if "/" in prog:
        p = Path(prog) if Path(prog).is_absolute() else spec.cwd / prog
        if not p.exists():
            raise SuitefitError(f"{where}: command {prog!r} does not exist")
        if not spec.shell and not os.access(p, os.X_OK):
            raise SuitefitError(f"{where}: command {prog!r} is not executable")
        return
    path = spec.env.get("PATH", os.environ.get("PATH", ""))
    if spec.requirements:
        venv = venv_path(venv_dir, spec.requirements)
        if not is_complete(venv):
            # It may be a console script its requirements install; the supervisor
            # reports "cannot execute" if it is not.
            return
        path = f"{venv_bin(venv)}{os.pathsep}{path}"
    if shutil.which(prog, path=path) is None:
        raise SuitefitError(f"{where}: command {prog!r} not found on PATH")


def prepare(state_dir: Path, specs: list[LaneSpec], venv_dir: Path) -> None:
    """Check every lane before launching any: a half-started set helps nobody."""
    names = [s.name for s in specs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SuitefitError(f"lane(s) given twice: {', '.join(dupes)}")
    uncollected = []
    for spec in specs:
        d = state.LaneDir(state_dir / spec.name)
        if d.is_launched() and not d.is_collected():
            uncollected.append(spec.name)
        check_command(spec, venv_dir)
    if uncollected:
        raise SuitefitError(
            f"lane(s) started earlier were never collected: {', '.join(uncollected)} "
            f"(run `suitefit lanes wait` first; state in {state_dir})"
        )


def launch(state_dir: Path, spec: LaneSpec, venv_dir: Path) -> Launched:
    """Start one lane's supervisor, detached; return without waiting for anything."""
    d = state.LaneDir(state_dir / spec.name)
    if d.path.exists():
        shutil.rmtree(d.path)
    d.path.mkdir(parents=True)
    state.write_json_atomic(d.spec, {**spec.to_json(), "venv_dir": str(venv_dir.resolve())})
    lock_fd = os.open(d.lock, os.O_RDWR | os.O_CREAT, 0o644)
    log_fd = os.open(d.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
    try:
        # Taken here and handed over: the lock is held from before `start`
        # returns until the supervisor dies, so `wait` can never see a gap.
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "suitefit.lanes.supervisor",
                str(d.path.resolve()),
                str(lock_fd),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=log_fd,
            close_fds=True,
            pass_fds=(lock_fd,),
            start_new_session=True,
            cwd=d.path,
        )
    except OSError as e:
        raise SuitefitError(
            f"lane {spec.name!r}: cannot start its supervisor: {e.strerror}"
        ) from None
    finally:
        os.close(lock_fd)
        os.close(log_fd)
    state.write_json_atomic(
        d.launched,
        {
            "name": spec.name,
            "supervisor_pid": proc.pid,
            "supervisor_start": state.process_start(proc.pid),
            "started": time.time(),
            "command": spec.display(),
            "timeout_s": spec.timeout_s,
        },
    )
    return Launched(spec.name, proc.pid, d.log, proc)


def start(state_dir: Path, specs: list[LaneSpec], venv_dir: Path) -> list[Launched]:
    if not specs:
        raise SuitefitError("no lanes to start: declare [tool.suitefit.lanes.NAME] or pass --lane")
    state_dir.mkdir(parents=True, exist_ok=True)
    prepare(state_dir, specs, venv_dir)
    return [launch(state_dir, spec, venv_dir) for spec in specs]
