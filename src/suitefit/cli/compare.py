"""``suitefit compare``: A/B timing of two commands, or file-by-file deltas of two recorded runs."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable

import click

from suitefit.config import load_config
from suitefit.diagnose.compare import (
    CommandComparison,
    RunsComparison,
    compare_commands,
    compare_runs,
)
from suitefit.diagnose.stats import Comparison
from suitefit.errors import SuitefitError
from suitefit.history import History
from suitefit.units import fmt_mb, fmt_s


def _section_default(key: str) -> float:
    """``[tool.suitefit.compare] KEY``, or its declared default (checked by the config schema)."""
    return float(load_config().get(f"compare.{key}"))


@click.command("compare")
@click.option("--a", "cmd_a", metavar="CMD", help="Command A (run through /bin/sh).")
@click.option("--b", "cmd_b", metavar="CMD", help="Command B (run through /bin/sh).")
@click.option("--runs", type=int, default=None, help="Measured runs of each side (default 10).")
@click.option("--warmup", type=int, default=None, help="Unmeasured warm-up runs of each side (default 1).")
@click.option("--confidence", type=float, default=None, help="Confidence level of the interval (default 0.95).")
@click.option("--margin", type=float, default=None,
              help="Effects smaller than this fraction are not claimed (default 0.03).")
@click.option("--effect", type=float, default=0.10, show_default=True,
              help="The effect size the 'runs needed' estimate speaks of.")
@click.option("--ci", "method", type=click.Choice(["t", "bootstrap"]), default="t", show_default=True,
              help="Interval method on the per-pair log-ratios.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap.")
@click.option("--timeout", type=float, default=None, help="Kill a run after this many seconds.")
@click.option("--runs-of", "runs_of", type=int, nargs=2, default=None, metavar="RUN_A RUN_B",
              help="Compare two recorded runs from the history instead, file by file.")
@click.option("--history", "history_path", type=click.Path(), default=None, help="History file.")
@click.option("--top", type=int, default=20, show_default=True, help="Files shown with --runs-of.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def command(cmd_a: str | None, cmd_b: str | None, runs: int | None, warmup: int | None,
            confidence: float | None, margin: float | None, effect: float, method: str, seed: int,
            timeout: float | None, runs_of: tuple[int, int] | None, history_path: str | None,
            top: int, as_json: bool) -> int:
    """A/B timing of two commands (interleaved, wall and CPU time), or of two recorded runs."""
    if runs_of:
        if cmd_a or cmd_b:
            raise SuitefitError("give either --a/--b or --runs-of, not both")
        path = history_path or str(load_config().history_path)
        with History(path, create=False) as h:
            rc = compare_runs(h, *runs_of)
        click.echo(json.dumps(rc.to_json(), indent=2) if as_json else _render_runs(rc, top))
        return 0
    if not cmd_a or not cmd_b:
        raise SuitefitError("give two commands with --a CMD --b CMD (or two run ids with --runs-of)")
    runs = int(runs if runs is not None else _section_default("runs"))
    warmup = int(warmup if warmup is not None else _section_default("warmup"))
    confidence = confidence if confidence is not None else _section_default("confidence")
    margin = margin if margin is not None else _section_default("margin")
    if not 0.5 <= confidence < 1:
        raise SuitefitError(f"--confidence must be in [0.5, 1), got {confidence}")
    if not 0 <= margin < 1 or not 0 < effect < 10:
        raise SuitefitError("--margin must be a fraction in [0, 1) and --effect a positive fraction")

    show_dots = not as_json and sys.stderr.isatty()

    def progress(side: str, idx: int, m: object) -> None:
        if show_dots:
            click.echo(".", nl=False, err=True)

    res = compare_commands(cmd_a, cmd_b, runs=runs, warmup=warmup, confidence=confidence,
                           margin=margin, effect=effect, method=method, seed=seed, timeout_s=timeout,
                           progress=progress)
    if show_dots:
        click.echo("", err=True)
    click.echo(json.dumps(res.to_json(), indent=2) if as_json else _render(res))
    return 0


def _side(c: Comparison, which: str) -> str:
    s = c.a if which == "a" else c.b
    return f"median {fmt_s(s.median)} (range {fmt_s(s.low)}-{fmt_s(s.high)})"


def _render(res: CommandComparison) -> str:
    assert res.wall is not None and res.cpu is not None
    w = res.wall
    lines = [f"A: {res.cmd_a}", f"B: {res.cmd_b}",
             f"{w.pairs} interleaved runs of each (A B, B A, ...)", ""]
    for c in (res.wall, res.cpu):
        lines.append(f"{c.metric} time  A {_side(c, 'a')}   B {_side(c, 'b')}")
        if c.verdict not in ("unmeasurable",) and math.isfinite(c.ratio):
            noise = f"{math.expm1(c.sd_log) * 100:.1f}%" if math.isfinite(c.sd_log) else "unknown"
            det = f"{c.detectable * 100:.0f}%" if math.isfinite(c.detectable) else "unknown"
            lines.append(f"  A/B ratio {c.ratio:.3f}; per-pair noise {noise}; "
                         f"smallest effect these runs detect (80% power): {det}")
        lines.append(f"  {c.metric}: {c.sentence()}")
    return "\n".join(lines)


def _render_runs(rc: RunsComparison, top: int) -> str:
    def s(x: float | None) -> str:
        return fmt_s(x)

    lines = [
        f"run {rc.run_a} -> run {rc.run_b}",
        f"wall {s(rc.wall_a)} -> {s(rc.wall_b)}   cpu {s(rc.cpu_a)} -> {s(rc.cpu_b)}   "
        f"peak RSS {fmt_mb(rc.peak_a)} -> {fmt_mb(rc.peak_b)}",
        "",
        f"{'file':<50} {'wall A':>8} {'wall B':>8} {'delta':>9} {'cpu A':>8} {'cpu B':>8} "
        f"{'peak A':>9} {'peak B':>9} {'delta':>9}",
    ]

    def signed(d: float | None, fmt: Callable[[float], str]) -> str:
        return "-" if d is None else ("+" if d >= 0 else "-") + fmt(abs(d))

    for f in rc.files[:top]:
        lines.append(
            f"{f.path:<50} {s(f.wall_a):>8} {s(f.wall_b):>8} {signed(f.wall_delta, fmt_s):>9} "
            f"{s(f.cpu_a):>8} {s(f.cpu_b):>8} {fmt_mb(f.peak_a):>9} {fmt_mb(f.peak_b):>9} "
            f"{signed(f.peak_delta, fmt_mb):>9}"
        )
    if len(rc.files) > top:
        lines.append(f"... {len(rc.files) - top} more files (--top N)")
    return "\n".join(lines)
