"""The ``suitefit`` command: one module per verb, loaded only when that verb runs.

Each verb module defines ``command`` (a click command). This file holds no logic
beyond turning ``SuitefitError`` into one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from suitefit.errors import SuitefitError

# verb -> module under suitefit.cli; a verb's module is imported only when it runs.
VERBS: dict[str, str] = {
    "profile": "profile",
    "history": "history",
    "plan": "plan",
    "run": "run",
    "doctor": "doctor",
    "sweep": "sweep",
    "bisect": "bisect",
    "compare": "compare",
    "lanes": "lanes",
    "audit-workflows": "audit_workflows",
    "merge": "merge",
    "report": "report",
}

HELP = {
    "profile": "Run the suite once, measured; store it in the history.",
    "history": "List the recorded runs.",
    "plan": "Plan workers, groups and order from the history, with reasons.",
    "run": "Run the suite under the plan through pytest-xdist.",
    "doctor": "Find the silent traps in the suite's parallel set-up.",
    "sweep": "Run each file alone and compare with the full run (order dependencies).",
    "bisect": "Find the test that pollutes or provides for TEST.",
    "compare": "A/B timing of two commands or two recorded runs.",
    "lanes": "Run short CI jobs as detached background lanes.",
    "audit-workflows": "Find workflow guards that no unfiltered job runs.",
    "merge": "Merge shard result files into one summary and the history.",
    "report": "Write the HTML report or a Markdown summary of a run.",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return [v for v in VERBS if _available(v)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        mod = VERBS.get(cmd_name)
        if mod is None:
            return None
        try:
            module = importlib.import_module(f"suitefit.cli.{mod}")
        except ModuleNotFoundError as e:
            if e.name == f"suitefit.cli.{mod}":
                return None
            raise
        cmd = module.command
        assert isinstance(cmd, click.Command)
        return cmd

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(v, HELP.get(v, "")) for v in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def _available(verb: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(f"suitefit.cli.{VERBS[verb]}") is not None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="suitefit")
def cli() -> None:
    """Make a pytest suite fit its CI runner: fast, inside its memory, never silent."""


def main(argv: list[str] | None = None) -> Any:
    try:
        rv = cli.main(args=argv, prog_name="suitefit", standalone_mode=False)
    except SuitefitError as e:
        click.echo(f"suitefit: error: {e}", err=True)
        sys.exit(e.exit_code)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.ClickException as e:
        click.echo(f"suitefit: error: {e.format_message()}", err=True)
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        click.echo("suitefit: aborted", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        click.echo("suitefit: interrupted", err=True)
        sys.exit(130)
    if isinstance(rv, int) and not isinstance(rv, bool):
        sys.exit(rv)
    if rv is not None:
        from suitefit.cli._common import Handover

        if isinstance(rv, Handover):  # `suitefit run`: click is done, pytest runs here
            try:
                sys.exit(rv.run())
            except SuitefitError as e:
                click.echo(f"suitefit: error: {e}", err=True)
                sys.exit(e.exit_code)
    return rv
