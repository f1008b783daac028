"""Rendering a recorded run for people: the HTML report, the Markdown summary, live progress.

Everything shown is read from the history through ``queries.load_view``; the
renderers only format it. The names below are loaded on first use: ``pytest
--suitefit`` imports ``report.progress`` in every measured run, and importing the
HTML and SVG renderers with it cost ~20 ms of a run's overhead for nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from suitefit.report.html import render_compare, render_run
    from suitefit.report.markdown import render_compare_markdown, render_markdown
    from suitefit.report.progress import Progress
    from suitefit.report.queries import RunView, load_view, pick_run

_WHERE = {
    "Progress": "progress",
    "RunView": "queries",
    "load_view": "queries",
    "pick_run": "queries",
    "render_compare": "html",
    "render_compare_markdown": "markdown",
    "render_markdown": "markdown",
    "render_run": "html",
}

__all__ = [
    "Progress",
    "RunView",
    "load_view",
    "pick_run",
    "render_compare",
    "render_compare_markdown",
    "render_markdown",
    "render_run",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
