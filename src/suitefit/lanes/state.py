"""The on-disk state of launched lanes: one folder per lane under the state dir.

``<state>/<lane>/`` holds ``spec.json`` (what to run), ``lane.log`` (its stdout
and stderr), ``lock`` (held by the lane's supervisor for as long as it lives),
``launched.json`` (written by ``start``), ``running.json`` (the lane's process
group and deadline, written by the supervisor), ``status.json`` (written
atomically when the lane ends) and ``collected`` (written by ``wait``).

The lock is what makes a missing status decidable: the kernel drops it when the
supervisor dies, however it dies, so "no status and the lock is free" means the
lane will never report.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SPEC = "spec.json"
LOG = "lane.log"
LOCK = "lock"
LAUNCHED = "launched.json"
RUNNING = "running.json"
STATUS = "status.json"
COLLECTED = "collected"

# Outcomes a status can carry; only "passed" is a success.
PASSED = "passed"
FAILED = "failed"
TIMEOUT = "timeout"
SIGNALLED = "signal"
ERROR = "error"
NEVER_REPORTED = "never-reported"
NEVER_STARTED = "never-started"


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` so a reader sees either nothing or the whole file, even across a crash."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dirfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dirfd)
    finally:
        os.close(dirfd)


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object at ``path``, or None when it is absent or unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def lock_is_held(path: Path) -> bool:
    """True while some process (the lane's supervisor) holds the lane's lock."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops the lock if we took it
    return False


def process_start(pid: int) -> float | None:
    """When process ``pid`` started (an opaque number), or None if there is no such process.

    Recorded with each pid we may signal later, so that a recycled pid is never hit.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return float(fields[19])  # field 22, starttime in clock ticks
    except FileNotFoundError:
        return None
    except OSError:  # not Linux: ask psutil
        try:
            import psutil

            return float(psutil.Process(pid).create_time())
        except Exception:
            return None


def kill_group_if_ours(pgid: object, started: object, sig: int) -> None:
    """Signal process group ``pgid`` unless its leader's pid now belongs to someone else.

    A leader that is gone is fine: the kernel does not reuse a pid still in use as
    a process-group id, so any member left is one of ours.
    """
    if not isinstance(pgid, int) or pgid <= 1:
        return
    now = process_start(pgid)
    if now is not None and now != started:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


@dataclass(frozen=True)
class LaneDir:
    """Paths of one lane's state folder."""

    path: Path

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def spec(self) -> Path:
        return self.path / SPEC

    @property
    def log(self) -> Path:
        return self.path / LOG

    @property
    def lock(self) -> Path:
        return self.path / LOCK

    @property
    def launched(self) -> Path:
        return self.path / LAUNCHED

    @property
    def running(self) -> Path:
        return self.path / RUNNING

    @property
    def status(self) -> Path:
        return self.path / STATUS

    @property
    def collected(self) -> Path:
        return self.path / COLLECTED

    def is_launched(self) -> bool:
        return self.launched.exists()

    def is_collected(self) -> bool:
        return self.collected.exists()

    def read_status(self) -> dict[str, Any] | None:
        return read_json(self.status)

    def mark_collected(self) -> None:
        with contextlib.suppress(OSError):
            self.collected.write_text("collected\n")


def lane_dirs(state_dir: Path) -> list[LaneDir]:
    """Every launched lane in ``state_dir``, oldest launch first."""
    if not state_dir.is_dir():
        return []
    found = [LaneDir(p) for p in state_dir.iterdir() if p.is_dir() and (p / LAUNCHED).exists()]

    def launched_at(d: LaneDir) -> float:
        info = read_json(d.launched) or {}
        return float(info.get("started", 0.0))

    return sorted(found, key=lambda d: (launched_at(d), d.name))
