"""Rendering a recorded run for people: the HTML report, the Markdown summary, live progress.

Everything shown is read from the history through ``queries.load_view``; the
renderers only format it.
"""

from suitefit.report.html import render_compare, render_run
from suitefit.report.markdown import render_compare_markdown, render_markdown
from suitefit.report.progress import Progress
from suitefit.report.queries import RunView, load_view, pick_run

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
