"""``suitefit audit-workflows [DIR]``: parse, call suitefit.workflow_audit, print."""

from __future__ import annotations

import json
from pathlib import Path

import click

from suitefit.workflow_audit import audit, render


@click.command("audit-workflows")
@click.argument("directory", default=".", metavar="[DIR]")
@click.option("--json", "as_json", is_flag=True, help="Print the audit as JSON.")
def command(directory: str, as_json: bool) -> int:
    """Find workflow guards that no job runs on the change they guard.

    DIR is a repository root (with .github/workflows) or the workflows folder
    itself. Lists jobs and their path filters, test modules that read workflow
    files and the jobs that run them; also lanes or background commands started
    and never collected. Exits 1 when it finds anything.
    """
    result = audit(Path(directory))
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=1))
    else:
        for line in render(result):
            click.echo(line)
    return 1 if result.findings else 0
