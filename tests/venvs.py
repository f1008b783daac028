"""Throw-away virtualenvs with other pytest/xdist versions, built once and cached.

Used by tests that must watch behaviour on the oldest and newest pytest we support
(and on pytest 9.0.x vs 9.2.x, where ``--dist loadgroup`` differs). Cached under
``.venvs/`` in the repository, keyed by the requirements, guarded by a file lock
so parallel test workers build each one once.
"""

from __future__ import annotations

import fcntl
import hashlib
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".venvs"

OLDEST = ("pytest==8.0.2", "pytest-xdist==3.5.0")
PYTEST_90 = ("pytest==9.0.3", "pytest-xdist==3.8.0")
PYTEST_92 = ("pytest==9.2.0", "pytest-xdist==3.8.0")


def make_venv(requirements: tuple[str, ...], *, with_suitefit: bool = False, from_wheel: bool = False) -> Path:
    """Return the python executable of a venv holding ``requirements`` (and suitefit if asked:
    editable, or ``from_wheel`` as a user installs it, rebuilt when the sources change)."""
    wheel = suitefit_wheel() if from_wheel else None
    key = hashlib.sha256(
        ("\n".join(sorted(requirements)) + f"\nsuitefit={with_suitefit}\n{wheel}\n{sys.version}").encode()
    ).hexdigest()[:12]
    target = CACHE / key
    python = target / "bin" / "python"
    CACHE.mkdir(exist_ok=True)
    with open(CACHE / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / ".complete").exists():
            return python
        venv.EnvBuilder(with_pip=True, clear=True).create(target)
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, *requirements, "psutil>=5.9", "click>=8.1", "rich>=13.0"], check=True)
        if wheel is not None:
            subprocess.run([*pip, "--no-deps", str(wheel)], check=True)
        elif with_suitefit:
            subprocess.run([*pip, "--no-deps", "-e", str(ROOT)], check=True)
        (target / ".complete").write_text("\n".join(requirements))
    return python


def suitefit_wheel() -> Path:
    """This checkout built as a wheel, once per content of its sources."""
    sources = [*sorted(p for p in (ROOT / "src" / "suitefit").rglob("*") if p.is_file() and "__pycache__" not in p.parts),
               ROOT / "pyproject.toml"]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:12]
    out = CACHE / f"wheel-{digest}"
    CACHE.mkdir(exist_ok=True)
    with open(CACHE / "wheel.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not any(out.glob("*.whl")):
            subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-deps",
                            "-w", str(out), str(ROOT)], check=True)
    return next(out.glob("*.whl"))
