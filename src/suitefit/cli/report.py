"""``suitefit report``: the HTML report of a run, two runs compared, or a Markdown summary."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import click

from suitefit.config import load_config
from suitefit.errors import SuitefitError
from suitefit.history import History


def _write(path: Path, text: str, *, append: bool = False) -> None:
    """Write whole or not at all (a temp file renamed into place); appends go straight in."""
    where = f"cannot write the report to {path}"
    if append:
        try:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as e:
            raise SuitefitError(f"{where}: {e.strerror or e}") from None
        return
    if path.is_dir():
        raise SuitefitError(f"{where}: it is a folder")
    folder = path.parent
    for above in (folder, *folder.parents):
        if above.exists():
            if not above.is_dir():
                raise SuitefitError(f"{where}: {above} is a file, not a folder")
            break
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SuitefitError(f"{where}: cannot create the folder {folder} ({e.strerror or e})") from None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".suitefit-report-", dir=folder)
    except OSError as e:
        raise SuitefitError(f"{where}: cannot create a file in {folder} ({e.strerror or e})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise SuitefitError(f"{where}: {e.strerror or e}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@click.command(help="Write the HTML report of RUN (default: the newest run), or compare two runs.")
@click.argument("run", required=False, type=int)
@click.option("-o", "--output", metavar="FILE", help="Where to write ('-' for stdout).")
@click.option("--history", "history_path", metavar="PATH", help="The history file (default from pyproject).")
@click.option("--compare", nargs=2, type=int, metavar="RUN_A RUN_B", help="Two runs side by side.")
@click.option("--markdown", is_flag=True,
              help="A short Markdown summary; appended to $GITHUB_STEP_SUMMARY when that is set.")
def command(run: int | None, output: str | None, history_path: str | None,
            compare: tuple[int, int] | None, markdown: bool) -> None:
    from suitefit.report import (
        load_view,
        pick_run,
        render_compare,
        render_compare_markdown,
        render_markdown,
        render_run,
    )

    cfg = load_config()
    if compare and run is not None:
        raise SuitefitError("give either RUN or --compare RUN_A RUN_B, not both")
    path = Path(history_path) if history_path else cfg.history_path
    with History(path, create=False) as history:
        history.settle_abandoned()  # a killed run is shown crashed, with what its journal named
        if not history.runs(limit=1):
            raise SuitefitError(f"history {path} holds no runs: record one with `suitefit profile` "
                                "or `pytest --suitefit` first")
        if compare:
            a = load_view(history, pick_run(history, compare[0]))
            b = load_view(history, pick_run(history, compare[1]))
            text = render_compare_markdown(a, b) if markdown else render_compare(a, b)
            default = f"suitefit-compare-{a.run.id}-{b.run.id}.html"
            what = f"comparison of runs {a.run.id} and {b.run.id}"
        else:
            v = load_view(history, pick_run(history, run))
            text = render_markdown(v) if markdown else render_run(v)
            default = f"suitefit-report-{v.run.id}.html"
            what = f"report of run {v.run.id}"

    if markdown:
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if output == "-" or (output is None and not summary):
            sys.stdout.write(text)
            return
        if output is None and summary:
            _write(Path(summary), text + "\n", append=True)
            click.echo(f"suitefit: summary appended to $GITHUB_STEP_SUMMARY ({summary})", err=True)
            return
        assert output is not None
        _write(Path(output), text)
        click.echo(f"suitefit: Markdown {what} written to {output}", err=True)
        return
    if output == "-":
        sys.stdout.write(text)
        return
    target = Path(output or (None if compare else cfg.get("report.output")) or default)
    _write(target, text)
    size = len(text.encode("utf-8"))
    click.echo(f"suitefit: {what} written to {target} ({size / 1024:.0f} KiB)")
