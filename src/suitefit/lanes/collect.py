"""``lanes wait``: collect launched lanes, print each one's log as a group, judge them.

Only a status file saying "passed" is a pass. A lane whose supervisor is gone
without a status "never reported" and fails: a lane that never ran must not
look like one that passed. A lane still running past its deadline (plus the
supervisor's own kill grace) is killed here too, whole process group, as a
backstop for a supervisor that cannot act.
"""

from __future__ import annotations

import contextlib
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from suitefit.errors import SuitefitError
from suitefit.lanes import state

POLL_S = 0.05
BACKSTOP_SLACK_S = 5.0


@dataclass(frozen=True)
class LaneResult:
    name: str
    outcome: str
    duration_s: float | None
    exit_code: int | None
    signal: str | None
    message: str | None

    @property
    def ok(self) -> bool:
        return self.outcome == state.PASSED

    def describe(self) -> str:
        """One line: what happened to the lane."""
        if self.outcome in (state.PASSED, state.FAILED):
            what = f"{self.outcome} (exit {self.exit_code})"
        elif self.outcome == state.SIGNALLED:
            what = f"killed by {self.signal}"
        elif self.outcome == state.TIMEOUT:
            what = self.message or "timed out"
        elif self.outcome == state.NEVER_REPORTED:
            what = "never reported: no exit-status file"
            if self.message:
                what += f" ({self.message})"
        elif self.outcome == state.NEVER_STARTED:
            what = "never started"
        else:
            what = f"error: {self.message}"
        if self.duration_s is not None:
            what += f" in {self.duration_s:.2f} s"
        return what

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "outcome": self.outcome,
            "ok": self.ok,
            "duration_s": self.duration_s,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "message": self.message,
        }


def result_from_status(name: str, status: dict[str, Any]) -> LaneResult:
    outcome = str(status.get("outcome", state.ERROR))
    exit_code = status.get("exit_code")
    # Belt and braces: a "passed" record must also say exit 0 with no signal.
    if outcome == state.PASSED and (exit_code != 0 or status.get("signal")):
        outcome = state.ERROR
    dur = status.get("duration_s")
    return LaneResult(
        name=name,
        outcome=outcome,
        duration_s=float(dur) if isinstance(dur, (int, float)) else None,
        exit_code=exit_code if isinstance(exit_code, int) else None,
        signal=status.get("signal"),
        message=status.get("message"),
    )


def _decide(d: state.LaneDir, now_wall: float, wait_deadline: float | None) -> LaneResult | None:
    """The lane's result if it has one now, else None (still running)."""
    status = d.read_status()
    if status is not None:
        return result_from_status(d.name, status)
    launched = state.read_json(d.launched) or {}
    running = state.read_json(d.running) or {}
    started = launched.get("started")
    elapsed = now_wall - started if isinstance(started, (int, float)) else None
    if not state.lock_is_held(d.lock):
        # The status is written before the lock is dropped: look once more.
        status = d.read_status()
        if status is not None:
            return result_from_status(d.name, status)
        # Orphans of a dead supervisor: the lane's group, and its own (a pip install, say).
        state.kill_group_if_ours(running.get("pgid"), running.get("pid_start"), signal.SIGKILL)
        sup = launched.get("supervisor_pid")
        state.kill_group_if_ours(sup, launched.get("supervisor_start"), signal.SIGKILL)
        result = LaneResult(
            d.name, state.NEVER_REPORTED, elapsed, None, None,
            "its supervisor ended without writing an exit status",
        )  # fmt: skip
        _record(d, result)
        return result
    timeout = running.get("timeout_s")
    cmd_started = running.get("command_started")
    overdue = (
        isinstance(timeout, (int, float))
        and isinstance(cmd_started, (int, float))
        and now_wall
        > cmd_started + timeout + float(running.get("kill_after_s", 5)) + BACKSTOP_SLACK_S
    )
    waited_out = wait_deadline is not None and time.monotonic() >= wait_deadline
    if overdue or waited_out:
        state.kill_group_if_ours(running.get("pgid"), running.get("pid_start"), signal.SIGKILL)
        # The supervisor leads its own session and group.
        sup = launched.get("supervisor_pid")
        state.kill_group_if_ours(sup, launched.get("supervisor_start"), signal.SIGKILL)
        why = (
            "timed out: killed by `lanes wait` ("
            + (
                "past its timeout; its supervisor did not stop it"
                if overdue
                else "wait --timeout reached"
            )
            + ")"
        )
        result = LaneResult(d.name, state.TIMEOUT, elapsed, None, "SIGKILL", why)
        _record(d, result)
        return result
    return None


def _record(d: state.LaneDir, r: LaneResult) -> None:
    """Keep wait's own verdict on disk too, so a later look tells the same story."""
    with contextlib.suppress(OSError):
        state.write_json_atomic(d.status, {**r.to_json(), "reported_by": "wait"})


def select(
    state_dir: Path, names: tuple[str, ...], known: set[str]
) -> tuple[list[state.LaneDir], list[LaneResult]]:
    """The lane folders to collect, and results for named lanes that never started."""
    launched = [d for d in state.lane_dirs(state_dir) if not d.is_collected()]
    if not names:
        if not launched:
            raise SuitefitError(
                f"no lanes to collect in {state_dir}: none were started, or all were already collected",
                exit_code=1,
            )
        return launched, []
    by_name = {d.name: d for d in state.lane_dirs(state_dir)}
    picked, missing = [], []
    for n in names:
        d = by_name.get(n)
        if d is not None and not d.is_collected():
            picked.append(d)
        elif d is not None:
            raise SuitefitError(
                f"lane {n!r} was already collected; start it again first", exit_code=1
            )
        elif n in known:
            missing.append(LaneResult(n, state.NEVER_STARTED, None, None, None, "no launch record"))
        else:
            raise SuitefitError(
                f"unknown lane {n!r}: not declared in [tool.suitefit.lanes] and not started"
            )
    return picked, missing


def wait(
    lanes: list[state.LaneDir],
    out: TextIO,
    *,
    github: bool,
    timeout_s: float | None = None,
    on_result: Callable[[LaneResult], None] | None = None,
) -> list[LaneResult]:
    """Wait for every lane; print each one's log as a group the moment it ends."""
    pending = list(lanes)
    results: dict[str, LaneResult] = {}
    wait_deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while pending:
        now = time.time()
        for d in list(pending):
            r = _decide(d, now, wait_deadline)
            if r is None:
                continue
            pending.remove(d)
            results[d.name] = r
            d.mark_collected()
            print_group(d, r, out, github=github)
            if on_result:
                on_result(r)
        if pending:
            time.sleep(POLL_S)
    return [results[d.name] for d in lanes]


def print_group(d: state.LaneDir, r: LaneResult, out: TextIO, *, github: bool) -> None:
    title = f"lane {r.name}: {r.describe()}"
    try:
        log = d.log.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        log = f"(no log: {e.strerror})\n"
    if log and not log.endswith("\n"):
        log += "\n"
    if github:
        # stop-commands: a `::` line in the lane's log must not act as a workflow command.
        token = f"suitefit-{uuid.uuid4().hex}"
        out.write(f"::group::{title}\n::stop-commands::{token}\n{log}::{token}::\n::endgroup::\n")
        if not r.ok:
            out.write(f"::error title=suitefit lane {r.name}::{title}\n")
    else:
        out.write(f"──── {title} ────\n{log}")
        out.write(f"──── end of lane {r.name} ────\n")
    out.flush()


def summary(results: list[LaneResult]) -> list[str]:
    """Closing lines: one per lane, then the verdict."""
    width = max((len(r.name) for r in results), default=0)
    lines = [f"  {r.name:<{width}}  {'ok  ' if r.ok else 'FAIL'}  {r.describe()}" for r in results]
    bad = sum(not r.ok for r in results)
    if not results:
        lines.append("lanes: none collected")
    elif bad:
        lines.append(f"lanes: {bad} of {len(results)} FAILED")
    else:
        lines.append(f"lanes: all {len(results)} passed")
    return lines


def markdown_summary(results: list[LaneResult]) -> str:
    """A table for the GitHub Actions step summary."""
    rows = [
        f"| `{r.name}` | {'✅' if r.ok else '❌'} {r.outcome} | "
        f"{'' if r.duration_s is None else f'{r.duration_s:.2f} s'} | {r.describe()} |"
        for r in results
    ]
    return "\n".join(
        [
            "### suitefit lanes",
            "",
            "| lane | outcome | duration | detail |",
            "|---|---|---|---|",
            *rows,
            "",
            "",
        ]
    )
