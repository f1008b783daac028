"""``[tool.suitefit]`` in pyproject.toml: the user's readable, overridable settings.

Unknown keys are an error (a typo must not be silently ignored). Each verb reads
its own sub-table through ``Config.section``; top-level keys are shared.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suitefit.errors import SuitefitError
from suitefit.units import parse_size_mb

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULT_HISTORY = ".suitefit/history.sqlite"

# Top-level keys and the verbs' sections. A verb that adds a section lists it here.
KNOWN_KEYS = {
    "history",
    "memory_budget",
    "memory_margin",
    "workers",
    "groups",
    "threshold",
    "default_file_s",
    "default_file_mb",
    "lanes",
    "doctor",
    "sweep",
    "compare",
    "report",
    "shards",
    "explain_failures",
    "release_fixtures",
}
DEFAULT_EXPLAIN_FAILURES = 5  # new failures `suitefit run` diagnoses when asked without a number


@dataclass(frozen=True)
class Config:
    root: Path  # folder holding pyproject.toml (or cwd when there is none)
    pyproject: Path | None
    raw: Mapping[str, Any] = field(default_factory=dict)

    @property
    def history_path(self) -> Path:
        p = Path(str(self.raw.get("history", DEFAULT_HISTORY)))
        return p if p.is_absolute() else self.root / p

    @property
    def memory_budget_mb(self) -> float | None:
        v = self.raw.get("memory_budget")
        return None if v is None else parse_size_mb(v, "[tool.suitefit] memory_budget")

    @property
    def memory_margin(self) -> float:
        v = self.raw.get("memory_margin", 0.10)
        if not isinstance(v, (int, float)) or not 0 <= v < 1:
            raise SuitefitError(f"[tool.suitefit] memory_margin must be a fraction in [0, 1), got {v!r}")
        return float(v)

    @property
    def workers(self) -> int | None:
        v = self.raw.get("workers")
        if v is None:
            return None
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise SuitefitError(f"[tool.suitefit] workers must be a positive integer, got {v!r}")
        return v

    @property
    def groups(self) -> dict[str, tuple[str, ...]]:
        v = self.raw.get("groups", {})
        if not isinstance(v, dict) or not all(
            isinstance(files, list) and all(isinstance(f, str) for f in files) for files in v.values()
        ):
            raise SuitefitError(
                "[tool.suitefit] groups must map a group name to a list of test file paths"
            )
        return {str(k): tuple(files) for k, files in v.items()}

    @property
    def explain_failures(self) -> int:
        """How many new failures `suitefit run` diagnoses after the suite (0: none)."""
        v = self.raw.get("explain_failures", False)
        if isinstance(v, bool):
            return DEFAULT_EXPLAIN_FAILURES if v else 0
        if not isinstance(v, int) or v < 0:
            raise SuitefitError(f"[tool.suitefit] explain_failures must be true, false or a number of "
                                f"failures >= 0, got {v!r}")
        return v

    @property
    def release_fixtures(self) -> bool | tuple[str, ...]:
        """Early release of expensive fixtures: true (default), false, or only the named ones."""
        v = self.raw.get("release_fixtures", True)
        if isinstance(v, bool):
            return v
        if isinstance(v, list) and all(isinstance(n, str) and n for n in v):
            return tuple(v)
        raise SuitefitError(
            f"[tool.suitefit] release_fixtures must be true, false or a list of fixture names, got {v!r}"
        )

    def section(self, name: str) -> dict[str, Any]:
        v = self.raw.get(name, {})
        if not isinstance(v, dict):
            raise SuitefitError(f"[tool.suitefit.{name}] must be a table")
        return dict(v)


def find_pyproject(start: Path) -> Path | None:
    for d in [start, *start.parents]:
        p = d / "pyproject.toml"
        if p.is_file():
            return p
    return None


def load_config(start: Path | None = None) -> Config:
    """Read ``[tool.suitefit]`` from the nearest pyproject.toml at or above ``start``."""
    start = (start or Path.cwd()).resolve()
    pp = find_pyproject(start)
    if pp is None:
        return Config(root=start, pyproject=None, raw={})
    try:
        data = tomllib.loads(pp.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise SuitefitError(f"{pp}: not valid TOML: {e}") from None
    except OSError as e:
        raise SuitefitError(f"{pp}: cannot read: {e.strerror}") from None
    raw = data.get("tool", {}).get("suitefit", {})
    if not isinstance(raw, dict):
        raise SuitefitError(f"{pp}: [tool.suitefit] must be a table")
    unknown = sorted(set(raw) - KNOWN_KEYS)
    if unknown:
        raise SuitefitError(
            f"{pp}: unknown key(s) in [tool.suitefit]: {', '.join(unknown)} "
            f"(known: {', '.join(sorted(KNOWN_KEYS))})"
        )
    return Config(root=pp.parent, pyproject=pp, raw=raw)
