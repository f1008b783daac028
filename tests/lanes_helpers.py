"""Shared helpers for the lanes tests: a throw-away project and the real CLI in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Result:
    rc: int
    out: str
    err: str
    seconds: float


def write_project(root: Path, lanes_toml: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(lanes_toml)
    return root


def suitefit(
    cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> Result:
    """Run the real ``suitefit`` CLI with its output captured through pipes.

    Pipes on purpose: a lane that inherited them would keep this call waiting
    until the lane ended, which is exactly the regression the tests must catch.
    """
    full_env = {k: v for k, v in os.environ.items() if k != "GITHUB_ACTIONS"}
    full_env.update(env or {})
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "suitefit", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
    )
    return Result(p.returncode, p.stdout, p.stderr, time.perf_counter() - t0)


def lane_state(cwd: Path, name: str, what: str) -> dict[str, Any]:
    return dict(json.loads((cwd / ".suitefit" / "lanes" / name / what).read_text()))


def assert_one_line_error(r: Result, *needles: str) -> None:
    assert r.rc != 0, r
    assert "Traceback" not in r.err, r.err
    lines = r.err.strip().splitlines()
    assert len(lines) == 1, r.err
    assert lines[0].startswith("suitefit: error: "), r.err
    for n in needles:
        assert n in lines[0], (n, lines[0])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(predicate: Any, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return False
