"""``suitefit doctor [--python PATH] [--json] [-- PYTEST ARGS]``: parse, diagnose, print."""

from __future__ import annotations

import json
from pathlib import Path

import click

from suitefit.cli._common import history_option
from suitefit.doctor import Report, diagnose
from suitefit.units import fmt_s


def render(report: Report) -> str:
    f = report.facts
    head = (f"suitefit doctor: {report.project} (python {f.get('python')}, pytest {f.get('pytest')}, "
            f"pytest-xdist {f.get('xdist') or 'not installed'})")
    lines = [head]
    opts = " ".join(f.get("ini_addopts") or []) or "-"
    lines.append(f"  config: {f.get('inipath') or 'no ini file'}; addopts: {opts}")
    if report.probe is not None:
        p = report.probe
        how = "cached result of an earlier probe" if p.cached else f"ran now in {fmt_s(p.wall_s)}"
        state = {True: "groups honoured", False: "groups IGNORED", None: "inconclusive"}[p.honoured]
        lines.append(f"  loadgroup probe ({how}): {state}")
    for x in report.findings:
        lines.append("")
        tag = f"[{x.id}]" + (" (silenced)" if x.silenced else "")
        lines.append(f"{tag} {x.title}")
        lines += [f"  evidence: {e}" for e in x.evidence]
        lines.append(f"  fix: {x.fix}")
        if x.silenced:
            lines.append(f"  silenced: {x.silenced}")
    if report.notes:
        lines.append("")
        lines += [f"note: {n}" for n in report.notes]
    active, silenced = len(report.active), len(report.findings) - len(report.active)
    lines.append("")
    summary = f"{active} finding{'s' if active != 1 else ''}" if active else "no findings"
    if silenced:
        summary += f" ({silenced} silenced)"
    lines.append(f"{summary} in {fmt_s(report.wall_s)}")
    return "\n".join(lines)


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--python", "python", metavar="PATH", default=None,
              help="Interpreter that runs your tests (default: the one suitefit runs in).")
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
@click.option("--refresh-probe", is_flag=True, help="Run the loadgroup probe even if a cached answer exists.")
@history_option
@click.argument("pytest_args", nargs=-1, type=click.UNPROCESSED)
def command(python: str | None, as_json: bool, refresh_probe: bool, history_path: Path | None,
            pytest_args: tuple[str, ...]) -> int:
    """Find the silent traps in the suite's parallel set-up.

    Reads the pytest configuration (ini file, addopts, PYTEST_ADDOPTS and PYTEST ARGS
    after --) as the target interpreter's pytest sees it, the machine's CPUs and memory
    limit and the history; runs a tiny probe suite when loadgroup is in use. Exit 0:
    clean, 1: findings, 2: bad input.
    """
    report = diagnose(Path.cwd(), python, pytest_args, refresh_probe=refresh_probe,
                      history_path=history_path)
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        click.echo(render(report))
    return report.exit_code
