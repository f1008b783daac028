"""The small process that watches one lane: ``python -m suitefit.lanes.supervisor LANE_DIR LOCK_FD``.

Started detached by ``lanes start`` (own session, stdin /dev/null, stdout and
stderr to the lane log). It builds the lane's venv if needed, runs the command in
its own process group, kills that whole group on timeout, and always ends by
writing ``status.json`` atomically: exit code, signal, duration. It holds the
lane's lock (inherited as ``LOCK_FD``) until it exits, so a supervisor that dies
without a status (SIGKILL, OOM) is seen by ``wait`` as "never reported".

Kept free of click/rich/psutil imports so it starts fast.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from suitefit.lanes import state
from suitefit.lanes.spec import LaneSpec
from suitefit.lanes.venvs import ensure_venv, venv_bin

_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Supervisor:
    def __init__(self, lane_dir: Path) -> None:
        self.dir = state.LaneDir(lane_dir)
        raw = state.read_json(self.dir.spec)
        if raw is None:
            raise SystemExit(f"suitefit-lane: cannot read {self.dir.spec}")
        self.spec = LaneSpec.from_json(raw)
        self.venv_dir = Path(raw.get("venv_dir", ".suitefit/venvs"))
        self.proc: subprocess.Popen[bytes] | None = None
        self.received: int | None = None  # a signal sent to the supervisor itself
        self.started = time.time()
        self.t0 = time.monotonic()
        self._escalate_at = float("inf")  # when SIGKILL follows an earlier SIGTERM

    # -- signals ----------------------------------------------------------
    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
            print(
                f"suitefit-lane: supervisor got {signal.Signals(signum).name}; "
                "stopping the lane's process group",
                flush=True,
            )
        self._kill_group(signal.SIGTERM)
        # A lane that ignores SIGTERM gets SIGKILL after kill_after seconds.
        self._escalate_at = min(self._escalate_at, time.monotonic() + self.spec.kill_after_s)

    def _kill_group(self, sig: int) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    # -- the run ----------------------------------------------------------
    def _env(self, venv: Path | None) -> dict[str, str]:
        env = dict(os.environ)
        if venv is not None:
            for k in ("PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE"):
                env.pop(k, None)
            env["VIRTUAL_ENV"] = str(venv)
            env["PATH"] = f"{venv_bin(venv)}{os.pathsep}{env.get('PATH', '')}"
        env.update(self.spec.env)
        env["SUITEFIT_LANE"] = self.spec.name
        return env

    def _finish(self, outcome: str, **fields: Any) -> int:
        duration = time.monotonic() - self.t0
        record = {
            "name": self.spec.name,
            "outcome": outcome,
            "started": self.started,
            "ended": time.time(),
            "duration_s": round(duration, 3),
            "command": self.spec.display(),
            "reported_by": "supervisor",
            **fields,
        }
        state.write_json_atomic(self.dir.status, record)
        return 0

    def run(self) -> int:
        for sig in _FORWARDED:
            signal.signal(sig, self._on_signal)
        venv: Path | None = None
        setup_s = 0.0
        if self.spec.requirements:
            t = time.monotonic()
            try:
                venv = ensure_venv(self.venv_dir, self.spec.requirements, sys.stdout)
            except RuntimeError as e:
                print(f"suitefit-lane: {e}", flush=True)
                return self._finish(state.ERROR, exit_code=None, signal=None, message=str(e))
            setup_s = time.monotonic() - t
        if self.received is not None:
            return self._finish(
                state.SIGNALLED,
                exit_code=None,
                signal=signal.Signals(self.received).name,
                message="stopped before the command started",
            )
        env = self._env(venv)
        argv = self.spec.argv()
        if venv is not None and "/" not in argv[0]:
            # Resolve against the lane's PATH (its venv first), not the supervisor's.
            found = shutil.which(argv[0], path=env["PATH"])
            if found:
                argv[0] = found
        try:
            self.proc = subprocess.Popen(
                argv,
                cwd=self.spec.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=sys.stdout,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: a timeout kills all of it
                close_fds=True,
            )
        except OSError as e:
            msg = f"cannot execute {argv[0]!r}: {e.strerror}"
            print(f"suitefit-lane: {msg}", flush=True)
            return self._finish(state.ERROR, exit_code=127, signal=None, message=msg)
        if self.received is not None:  # a signal that came while the lane was being started
            self._kill_group(signal.SIGTERM)
        cmd_started = time.monotonic()
        deadline = None if self.spec.timeout_s is None else cmd_started + self.spec.timeout_s
        state.write_json_atomic(
            self.dir.running,
            {
                "supervisor_pid": os.getpid(),
                "pid": self.proc.pid,
                "pgid": self.proc.pid,
                "pid_start": state.process_start(self.proc.pid),
                "timeout_s": self.spec.timeout_s,
                "kill_after_s": self.spec.kill_after_s,
                "command_started": time.time(),
                "setup_s": round(setup_s, 3),
            },
        )
        timed_out = False
        rc: int | None = None
        while rc is None:
            now = time.monotonic()
            if deadline is not None and now >= deadline and not timed_out:
                timed_out = True
                print(
                    f"suitefit-lane: timeout after {self.spec.timeout_s:g} s: "
                    "SIGTERM to the lane's process group",
                    flush=True,
                )
                self._kill_group(signal.SIGTERM)
                self._escalate_at = min(self._escalate_at, now + self.spec.kill_after_s)
            if now >= self._escalate_at:
                print("suitefit-lane: still alive: SIGKILL to the lane's process group", flush=True)
                self._kill_group(signal.SIGKILL)
                rc = self.proc.wait()
                break
            wake = self._escalate_at
            if deadline is not None and not timed_out:
                wake = min(wake, deadline)
            try:
                # Bounded so a signal to the supervisor (which sets _escalate_at) is acted on.
                rc = self.proc.wait(timeout=min(max(wake - now, 0.01), 0.5))
            except subprocess.TimeoutExpired:
                continue
        # Whatever the lane left running in its group ends with it.
        self._kill_group(signal.SIGKILL)
        fields: dict[str, Any] = {
            "exit_code": rc if rc >= 0 else None,
            "signal": signal.Signals(-rc).name if rc < 0 else None,
            "setup_s": round(setup_s, 3),
            "command_s": round(time.monotonic() - cmd_started, 3),
        }
        if timed_out:
            return self._finish(
                state.TIMEOUT, message=f"timed out after {self.spec.timeout_s:g} s", **fields
            )
        if rc < 0:
            return self._finish(state.SIGNALLED, message=f"killed by {fields['signal']}", **fields)
        if self.received is not None:
            fields["message"] = f"supervisor got {signal.Signals(self.received).name}"
        return self._finish(state.PASSED if rc == 0 else state.FAILED, **fields)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m suitefit.lanes.supervisor LANE_DIR LOCK_FD", file=sys.stderr)
        return 2
    lane_dir, lock_fd = Path(argv[0]), int(argv[1])
    os.set_inheritable(lock_fd, False)  # the lane command must not hold the lane's lock
    sup = Supervisor(lane_dir)
    try:
        return sup.run()
    except BaseException as e:  # still report: a missing status would read as "never reported"
        if not sup.dir.status.exists():
            sup._kill_group(signal.SIGKILL)
            sup._finish(
                state.ERROR, exit_code=None, signal=None, message=f"supervisor crashed: {e!r}"
            )
        raise


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
