"""The ``suitefit`` command's click application: one module per verb, loaded only when
that verb runs.

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
    "calibrate": "calibrate",
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
    "calibrate": "Run timed files side by side: how much workers slow each other.",
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


def say_error(e: BaseException) -> int | None:
    """The one line a command's error gets on stderr, and its exit status; None for anything
    else (a bug: its traceback is worth more than a line)."""
    if isinstance(e, SuitefitError):
        click.echo(f"suitefit: error: {e}", err=True)
        return e.exit_code
    if isinstance(e, click.exceptions.Exit):
        return e.exit_code
    if isinstance(e, click.ClickException):
        click.echo(f"suitefit: error: {e.format_message()}", err=True)
        return e.exit_code
    if isinstance(e, click.exceptions.Abort):
        click.echo("suitefit: aborted", err=True)
        return 130
    if isinstance(e, KeyboardInterrupt):
        click.echo("suitefit: interrupted", err=True)
        return 130
    return None


def parse_and_run(argv: list[str] | None) -> Any:
    """The verb's own return value: an exit status, or for `suitefit run` the ``Handover``."""
    return cli.main(args=argv, prog_name="suitefit", standalone_mode=False)


def main(argv: list[str] | None = None) -> Any:
    try:
        rv = parse_and_run(argv)
        if rv is not None:
            from suitefit.cli.handover import Handover

            if isinstance(rv, Handover):  # `suitefit run` where it could not fork: pytest runs here
                rv = rv.run()
    except BaseException as e:
        code = say_error(e)
        if code is None:
            raise
        sys.exit(code)
    if isinstance(rv, int) and not isinstance(rv, bool):
        sys.exit(rv)
    return rv
