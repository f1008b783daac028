"""`suitefit history`: the recorded runs, newest first."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from suitefit.cli._common import history_option, open_history
from suitefit.units import fmt_mb, fmt_s


@click.command()
@history_option
@click.option("--limit", default=20, show_default=True, help="how many runs to list")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def command(history_path: Path | None, limit: int, as_json: bool) -> None:
    """List the recorded runs."""
    h = open_history(history_path, create=False)
    h.settle_abandoned()  # a run whose process was killed is not still running
    runs = h.runs(limit=limit)
    if as_json:
        click.echo(json.dumps([
            {"id": r.id, "kind": r.kind, "status": r.status, "exit_code": r.exit_code,
             "started": r.started, "wall_s": r.wall_s, "workers": r.workers, "tests": r.collected,
             "peak_rss_mb": r.peak_rss_mb, "crashed_in": r.meta_dict.get("crashed_in", [])} for r in runs
        ], indent=2))
        return
    if not runs:
        click.echo(f"no runs recorded in {h.path}")
        return
    t = Table(title=f"runs in {h.path}")
    # "session": pytest's session as suitefit measured it, not the command around it
    for col in ("id", "when", "kind", "status", "tests", "workers", "session", "peak RSS"):
        t.add_column(col, justify="right" if col in ("id", "tests", "workers", "session", "peak RSS") else "left",
                     no_wrap=True)
    for r in runs:
        when = dt.datetime.fromtimestamp(r.started).strftime("%m-%d %H:%M:%S")
        t.add_row(str(r.id), when, r.kind, r.status, str(r.collected if r.collected is not None else "-"),
                  str(r.workers), fmt_s(r.wall_s), fmt_mb(r.peak_rss_mb))
    console = Console(emoji=False, highlight=False)
    console.print(t)
    for r in runs:
        line = crashed_line(r.id, r.meta_dict.get("crashed_in"))
        if r.status == "crashed" and line:
            console.print(line, markup=False, soft_wrap=True)


def crashed_line(run_id: int, crashed_in: Any) -> str | None:
    """``run 3 crashed while running T (main, 812 MiB at its last reading)``, from the journal."""
    if not isinstance(crashed_in, list) or not crashed_in:
        return None
    named = "; ".join(f"{x.get('nodeid')} ({x.get('worker')}, {fmt_mb(x.get('mb'))} at its last reading)"
                      for x in crashed_in if isinstance(x, dict))
    return f"run {run_id} crashed while running {named}, as its in-flight journal recorded"
