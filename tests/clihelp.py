"""Running the real `suitefit` CLI in a subprocess, as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def suitefit(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300,
             stdin: Any = subprocess.DEVNULL, python: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python``: another interpreter's suitefit (an older pytest's virtualenv)."""
    e = {**os.environ, **(env or {})}
    e.pop("PYTEST_ADDOPTS", None)
    e.pop("PYTEST_XDIST_WORKER", None)
    e.pop("PYTEST_XDIST_WORKER_COUNT", None)
    return subprocess.run([python or sys.executable, "-m", "suitefit", *args], cwd=cwd, env=e, text=True,
                          capture_output=True, timeout=timeout, stdin=stdin)


def assert_one_line_error(res: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Non-zero exit, a `suitefit: error:` line, and no traceback."""
    assert res.returncode != 0, res
    # pytest's own output (stdout) may quote the user's tracebacks; suitefit's stderr never has one
    assert "Traceback (most recent call last)" not in res.stderr, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("suitefit: error:")]
    assert len(lines) == 1, res.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def json_out(res: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(res.stdout)
