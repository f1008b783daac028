"""``suitefit bisect TEST``: find the earlier test that pollutes TEST or provides for it."""

from __future__ import annotations

import json
from pathlib import Path

import click

from suitefit.config import load_config
from suitefit.diagnose.bisect import bisect
from suitefit.diagnose.explain import remember
from suitefit.history import History


@click.command("bisect", context_settings={"ignore_unknown_options": True})
@click.argument("test")
@click.option("--run-id", type=int, default=None,
              help="The recorded run whose order to replay (default: the latest that ran TEST).")
@click.option("--timeout", type=float, default=None, help="Kill one pytest process after this many seconds.")
@click.option("--history", "history_path", type=click.Path(), default=None, help="History file.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.argument("pytest_args", nargs=-1, type=click.UNPROCESSED)
def command(test: str, run_id: int | None, timeout: float | None, history_path: str | None,
            as_json: bool, pytest_args: tuple[str, ...]) -> int:
    """Replay what ran before TEST in its worker and bisect it to the polluter or provider."""
    path = Path(history_path) if history_path else load_config().history_path

    def progress(msg: str) -> None:
        if not as_json:
            click.echo(f"  {msg}", err=True)

    with History(path, create=False) as h:
        res = bisect(h, test, cwd=Path.cwd(), run_id=run_id, pytest_args=pytest_args,
                     timeout_s=timeout, progress=progress)
        # What bisect finds, the next plan honours (suitefit plan --constraints lists it).
        stored = remember(h, res.role, res.test, res.culprit,
                          f"{res.alone_outcome} alone, {res.suite_outcome} after {res.culprit}",
                          source="suitefit bisect", run_id=res.run_id, rootdir=str(Path.cwd()))
    if as_json:
        click.echo(json.dumps(res.to_json(), indent=2))
    else:
        click.echo(f"{res.test}: {res.suite_outcome} in run {res.run_id} ({res.worker}), "
                   f"{res.alone_outcome} alone; {res.prefix_len} tests ran before it")
        if res.culprit:
            click.echo(f"{res.role}: {res.culprit}")
        click.echo(res.message)
        click.echo(f"{res.pytest_runs} pytest runs")
        click.echo(f"reproduce: {res.command}")
        if stored:
            click.echo(f"remembered: {stored} (suitefit plan --constraints)")
    return 0 if res.culprit else 1
