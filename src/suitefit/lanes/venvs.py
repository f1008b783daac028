"""Each lane's own virtualenv, cached by a hash of its requirements.

A lane never installs into the interpreter the foreground steps use: two pip
installs into one site-packages at once is a real race. Lanes with the same
requirements share one venv, built once under a file lock; lanes with different
requirements get different folders, so no two installs ever meet.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
import venv
from pathlib import Path
from typing import TextIO

COMPLETE = ".suitefit-complete"


def venv_key(requirements: tuple[str, ...]) -> str:
    """Cache key: the requirements (order-insensitive) and the interpreter that runs them."""
    blob = json.dumps(
        {"python": sys.version, "executable": sys.base_prefix, "requirements": sorted(requirements)}
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def venv_path(venv_dir: Path, requirements: tuple[str, ...]) -> Path:
    return venv_dir / venv_key(requirements)


def venv_bin(path: Path) -> Path:
    return path / "bin"


def is_complete(path: Path) -> bool:
    return (path / COMPLETE).exists()


def _host_pip_can_target() -> bool:
    """pip >= 22.3 here can install into another interpreter (``--python``): no pip in the venv."""
    try:
        import pip
    except ImportError:
        return False
    try:
        major, minor = (int(x) for x in pip.__version__.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (22, 3)


def ensure_venv(venv_dir: Path, requirements: tuple[str, ...], log: TextIO) -> Path:
    """Return the venv for ``requirements``, building it first if no finished one is cached.

    Raises ``RuntimeError`` with a one-line reason when the build fails.
    """
    path = venv_path(venv_dir, requirements)
    venv_dir.mkdir(parents=True, exist_ok=True)
    with open(venv_dir / f"{path.name}.lock", "w") as lock:
        # Held for the whole build: a second lane with the same requirements waits
        # here and then reuses the finished venv instead of installing beside it.
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_complete(path):
            print(f"suitefit-lane: using cached venv {path}", file=log, flush=True)
            return path
        print(
            f"suitefit-lane: building venv {path} for: {' '.join(requirements)}",
            file=log,
            flush=True,
        )
        host_pip = _host_pip_can_target()
        try:
            venv.EnvBuilder(with_pip=not host_pip, clear=True, symlinks=True).create(path)
        except (OSError, subprocess.CalledProcessError) as e:
            raise RuntimeError(f"cannot create venv {path}: {e}") from None
        python = venv_bin(path) / "python"
        pip = (
            [sys.executable, "-m", "pip", "--python", str(python)]
            if host_pip
            else [str(python), "-m", "pip"]
        )
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        rc = subprocess.call(
            [*pip, "install", "--disable-pip-version-check", "-q", *requirements],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
        )
        if rc != 0:
            raise RuntimeError(f"pip install into {path} failed with exit {rc} (see the lane log)")
        (path / COMPLETE).write_text("\n".join(requirements) + "\n")
        return path
