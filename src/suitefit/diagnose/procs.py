"""The process boundary of the diagnose verbs: start a command, time its whole tree.

Wall time from the suitefit clock; CPU time and peak RSS from ``os.wait4``, whose
resource usage on Linux covers the child and every descendant it waited for (a
shell's children, pytest's xdist workers), unlike ``psutil`` sampling that misses
short-lived processes. Descendants that outlive the command are not counted.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from suitefit import timing


@dataclass(frozen=True)
class Measured:
    """One finished run of a command."""

    exit_code: int  # negative: killed by that signal
    wall_s: float
    cpu_s: float  # user + system of the whole waited-for tree
    maxrss_mb: float  # largest single process of the tree (not summed)
    output_tail: str  # last lines of stdout+stderr, for error messages

    @property
    def last_line(self) -> str:
        lines = [ln.strip() for ln in self.output_tail.splitlines() if ln.strip()]
        return lines[-1] if lines else ""


def run_measured(argv: Sequence[str] | str, *, cwd: Path | str | None = None,
                 env: Mapping[str, str] | None = None, timeout_s: float | None = None,
                 tail_lines: int = 20) -> Measured:
    """Run ``argv`` (a list, or a string for ``/bin/sh -c``) to completion and measure it."""
    cmd = ["/bin/sh", "-c", argv] if isinstance(argv, str) else list(argv)
    with tempfile.TemporaryFile() as out:
        t0 = timing.perf_counter()
        try:
            proc = subprocess.Popen(cmd, cwd=cwd, env=dict(env) if env is not None else None,
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        except OSError as e:
            return Measured(127, 0.0, 0.0, 0.0, f"cannot start {cmd[0]}: {e.strerror}")
        deadline = None if timeout_s is None else t0 + timeout_s
        try:
            status, rusage = _wait4(proc.pid, deadline)
        except BaseException:
            _kill_tree(proc.pid)
            os.waitpid(proc.pid, 0)
            proc.returncode = -9
            raise
        wall = timing.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read()[-8192:].decode("utf-8", "replace")
    tail = "\n".join(text.splitlines()[-tail_lines:])
    return Measured(proc.returncode, wall, rusage.ru_utime + rusage.ru_stime,
                    rusage.ru_maxrss / 1024.0, tail)


def _wait4(pid: int, deadline: float | None) -> tuple[int, resource.struct_rusage]:
    if deadline is None:
        _, status, rusage = os.wait4(pid, 0)
        return status, rusage
    while True:
        got, status, rusage = os.wait4(pid, os.WNOHANG)
        if got == pid:
            return status, rusage
        if timing.perf_counter() > deadline:
            _kill_tree(pid)
            _, status, rusage = os.wait4(pid, 0)
            return status, rusage
        timing.sleep(0.01)


def _kill_tree(pid: int) -> None:
    """The command runs in its own session: kill its whole process group."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
