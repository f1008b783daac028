"""Where a project's pyproject.toml is: a lean module, for the plugin's start-up too
(``config`` and its data model are imported only when there is something to read)."""

from __future__ import annotations

from pathlib import Path


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml at or above ``start``."""
    for d in [start, *start.parents]:
        p = d / "pyproject.toml"
        if p.is_file():
            return p
    return None
