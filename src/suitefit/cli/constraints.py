"""``suitefit plan --constraints``: the learned order constraints, their evidence, and as TOML.

For teams who want what was learned in review: ``--as-groups`` prints the groups the
next plan will use (declared ones merged with the learned ones) as a
``[tool.suitefit.groups]`` table; ``--write`` adds it to pyproject.toml. The history
keeps its constraints either way: merged into a declared group that already holds
them in order, they change nothing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from suitefit.config import Config, load_config
from suitefit.costs import learned_constraints
from suitefit.errors import SuitefitError
from suitefit.history import History
from suitefit.plan.constraints import merge_constraints

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def groups_toml(groups: dict[str, tuple[str, ...]]) -> str:
    lines = ["[tool.suitefit.groups]"]
    for name, files in groups.items():
        lines.append(f"{json.dumps(name)} = [{', '.join(json.dumps(f) for f in files)}]")
    return "\n".join(lines) + "\n"


def show(cfg: Config, path: Path, *, as_json: bool, as_groups: bool, write: bool) -> None:
    if not path.exists():
        raise SuitefitError(f"no history at {path}: nothing learned yet")
    with History(path, create=False) as h:
        learned, dropped = learned_constraints(h, cfg.root)
    groups, kept, contradicted = merge_constraints(cfg.groups, learned)
    dropped += contradicted
    for line in dropped:
        click.echo(f"suitefit: {line}", err=True)
    if as_groups:
        text = groups_toml(groups) if kept else ""
        if not write:
            click.echo(text or "# no learned order constraints", nl=not text)
            return
        if not kept:
            click.echo("no learned order constraints: pyproject.toml unchanged")
            return
        _write(cfg, text)
        click.echo(f"wrote {len(groups)} group(s) to {cfg.pyproject} [tool.suitefit.groups]")
        return
    if as_json:
        click.echo(json.dumps({"constraints": [
            {"first": c.first, "second": c.second, "kind": c.kind, "test": c.test, "culprit": c.culprit,
             "evidence": c.evidence} for c in kept], "dropped": dropped}, indent=2))
        return
    if not kept:
        click.echo("no learned order constraints")
    for c in kept:
        click.echo(f"{c.explain()}")


def _write(cfg: Config, text: str) -> None:
    pp = cfg.pyproject
    if pp is None:
        raise SuitefitError("no pyproject.toml to write to: paste the output of "
                            "`suitefit plan --constraints --as-groups` into one")
    if "groups" in cfg.raw:
        raise SuitefitError(f"{pp} already declares [tool.suitefit] groups: replace them by hand with "
                            "the output of `suitefit plan --constraints --as-groups` (it includes them)")
    old = pp.read_text(encoding="utf-8")
    new = old + ("" if old.endswith("\n") else "\n") + "\n" + text
    try:
        tomllib.loads(new)
    except tomllib.TOMLDecodeError as e:
        raise SuitefitError(f"{pp}: adding the groups table would not be valid TOML ({e}): "
                            "add it by hand") from None
    pp.write_text(new, encoding="utf-8")
    load_config(pp.parent)  # what was written reads back as valid config
