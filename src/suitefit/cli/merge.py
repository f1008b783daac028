"""`suitefit merge`: fold shard result files into one summary, one exit status, and the history."""

from __future__ import annotations

import json
from pathlib import Path

import click

from suitefit.cli._common import history_option, open_history
from suitefit.errors import SuitefitError
from suitefit.units import fmt_s


@click.command()
@history_option
@click.option("--json", "as_json", is_flag=True, help="machine-readable summary")
@click.argument("files", nargs=-1, type=click.Path(path_type=Path))
def command(history_path: Path | None, as_json: bool, files: tuple[Path, ...]) -> None:
    """Merge the result files of all N shards (`suitefit run --shard K/N`).

    Fails when a shard is missing, shards collected different suites, or a test ran
    twice or never. Exit 1 when any test failed, 0 when all passed.
    """
    from suitefit.shard_results import fold_into_history, read_result, validate

    if not files:
        raise SuitefitError("give the shard result files to merge (suitefit merge shard-*.json)")
    results = [read_result(p) for p in files]
    merged = validate(results)
    h = open_history(history_path)
    ids = fold_into_history(h, results)
    summary = {**merged.to_json(), "history_runs": ids}
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        outs = ", ".join(f"{v} {k}" for k, v in sorted(merged.outcomes.items()))
        walls = ", ".join(f"{i + 1}/{merged.shards}: {fmt_s(w)}" for i, w in enumerate(merged.shard_walls))
        click.echo(f"suitefit merge: {merged.shards} shards, {merged.tests} tests ran exactly once ({outs})")
        click.echo(f"  shard wall times: {walls}")
        if summary["slowest_over_mean"]:
            click.echo(f"  slowest shard is {summary['slowest_over_mean']:.2f}x the mean")
        for nodeid in merged.failed[:20]:
            click.echo(f"  FAILED {nodeid}")
        click.echo(f"  recorded as runs {ids[0]}..{ids[-1]} in {h.path} (the next split uses them)")
    raise SystemExit(0 if merged.ok else 1)
