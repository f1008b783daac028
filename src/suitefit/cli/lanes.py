"""``suitefit lanes start|wait|run|list``: parse, call suitefit.lanes, print."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click

from suitefit.config import Config, load_config
from suitefit.errors import SuitefitError
from suitefit.lanes import collect, launch
from suitefit.lanes.spec import LaneSpec, lane_from_option, lanes_from_config, parse_duration_s

DEFAULT_STATE = ".suitefit/lanes"
DEFAULT_VENVS = ".suitefit/venvs"


def _paths(cfg: Config, state_dir: str | None, venv_dir: str | None) -> tuple[Path, Path]:
    def pick(given: str | None, env: str, default: str) -> Path:
        p = Path(given or os.environ.get(env) or default)
        return p if p.is_absolute() else (Path.cwd() if given else cfg.root) / p

    return (
        pick(state_dir, "SUITEFIT_LANES_DIR", DEFAULT_STATE),
        pick(venv_dir, "SUITEFIT_VENVS_DIR", DEFAULT_VENVS),
    )


def _declared(cfg: Config) -> dict[str, LaneSpec]:
    return lanes_from_config(cfg.section("lanes"), cfg.root)


def _choose(cfg: Config, names: tuple[str, ...], options: tuple[str, ...]) -> list[LaneSpec]:
    declared = _declared(cfg)
    extra = [lane_from_option(o, Path.cwd()) for o in options]
    if not names:
        return extra or list(declared.values())
    extra_by_name = {s.name: s for s in extra}
    chosen = []
    for n in names:
        spec = extra_by_name.get(n) or declared.get(n)
        if spec is None:
            known = ", ".join(sorted({*declared, *extra_by_name})) or "none declared"
            raise SuitefitError(f"unknown lane {n!r} (known: {known})")
        chosen.append(spec)
    return chosen


def _github() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


def _wait_and_report(
    state_dir: Path, names: tuple[str, ...], known: set[str], timeout: str | None
) -> int:
    lanes, never = collect.select(state_dir, names, known)
    timeout_s = None if timeout is None else parse_duration_s(timeout, "--timeout")
    results = collect.wait(lanes, sys.stdout, github=_github(), timeout_s=timeout_s)
    for r in never:
        click.echo(f"lane {r.name}: {r.describe()}")
    results = [*results, *never]
    for line in collect.summary(results):
        click.echo(line)
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        try:
            with open(step_summary, "a", encoding="utf-8") as f:
                f.write(collect.markdown_summary(results))
        except OSError as e:
            click.echo(f"suitefit: cannot append to GITHUB_STEP_SUMMARY: {e.strerror}", err=True)
    return 0 if all(r.ok for r in results) else 1


_common = [
    click.option(
        "--state-dir", metavar="DIR", help=f"Where lane logs and statuses live [{DEFAULT_STATE}]."
    ),
]
_venv_opt = click.option(
    "--venv-dir", metavar="DIR", help=f"Cache of the lanes' virtualenvs [{DEFAULT_VENVS}]."
)
_lane_opt = click.option(
    "--lane", "lane_opts", multiple=True, metavar="NAME=COMMAND",
    help="A lane given here instead of in pyproject.toml (run by /bin/sh). Repeatable.",
)  # fmt: skip
_timeout_opt = click.option(
    "--timeout",
    metavar="DURATION",
    help="Stop waiting after this long (e.g. 10m); kills what is left.",
)


@click.group("lanes", invoke_without_command=True)
@click.pass_context
def command(ctx: click.Context) -> None:
    """Short CI jobs as detached background lanes of one job.

    Declare lanes in [tool.suitefit.lanes.NAME] (command, requirements, env,
    timeout). `start` launches them and returns at once; `wait` collects them and
    fails on any failure, timeout or missing exit status; `run` does both around
    a foreground command.
    """
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


@command.command("start")
@click.argument("names", nargs=-1)
@_common[0]
@_venv_opt
@_lane_opt
def start_cmd(
    names: tuple[str, ...], state_dir: str | None, venv_dir: str | None, lane_opts: tuple[str, ...]
) -> None:
    """Launch lanes NAMES (default: all declared) detached; return at once."""
    cfg = load_config()
    sdir, vdir = _paths(cfg, state_dir, venv_dir)
    t0 = time.perf_counter()
    started = launch.start(sdir, _choose(cfg, names, lane_opts), vdir)
    took = time.perf_counter() - t0
    for lane in started:
        click.echo(
            f"lane {lane.name}: started (supervisor pid {lane.supervisor_pid}, log {lane.log})"
        )
    click.echo(
        f"lanes: {len(started)} started in {took:.3f} s; collect them with `suitefit lanes wait`"
    )


@command.command("wait")
@click.argument("names", nargs=-1)
@_common[0]
@_timeout_opt
def wait_cmd(names: tuple[str, ...], state_dir: str | None, timeout: str | None) -> int:
    """Collect lanes (default: every uncollected one); non-zero if any did not pass."""
    cfg = load_config()
    sdir, _ = _paths(cfg, state_dir, None)
    return _wait_and_report(sdir, names, set(_declared(cfg)), timeout)


class _DashDashCommand(click.Command):
    """Keeps what follows ``--`` apart from NAMES (click would merge them)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            i = args.index("--")
            ctx.meta["foreground"] = args[i + 1 :]
            args = args[:i]
        else:
            ctx.meta["foreground"] = []
        return super().parse_args(ctx, args)


@command.command("run", cls=_DashDashCommand)
@click.argument("names", nargs=-1)
@_common[0]
@_venv_opt
@_lane_opt
@_timeout_opt
@click.pass_context
def run_cmd(
    ctx: click.Context,
    names: tuple[str, ...],
    state_dir: str | None,
    venv_dir: str | None,
    lane_opts: tuple[str, ...],
    timeout: str | None,
) -> int:
    """Start lanes NAMES, run `-- FOREGROUND CMD`, then wait for the lanes.

    Exits with the foreground's exit code if it failed, else 1 if a lane failed.
    """
    foreground: list[str] = ctx.meta["foreground"]
    if not foreground:
        raise SuitefitError("lanes run needs a foreground command after `--`")
    if shutil.which(foreground[0]) is None and not Path(foreground[0]).is_file():
        raise SuitefitError(f"foreground command {foreground[0]!r} not found on PATH")
    cfg = load_config()
    sdir, vdir = _paths(cfg, state_dir, venv_dir)
    specs = _choose(cfg, names, lane_opts)
    started = launch.start(sdir, specs, vdir)
    click.echo(f"lanes: {len(started)} started: {', '.join(s.name for s in started)}")
    t0 = time.perf_counter()
    try:
        fg_rc = subprocess.call(foreground)
    except OSError as e:
        fg_rc = 127
        click.echo(f"suitefit: foreground {foreground[0]!r} cannot run: {e.strerror}", err=True)
    except KeyboardInterrupt:
        fg_rc = 130
    click.echo(f"foreground: exit {fg_rc} in {time.perf_counter() - t0:.2f} s")
    if fg_rc == 130:
        _stop(started)  # interrupted: stop the lanes too, and still collect their statuses
    try:
        lanes_rc = _wait_and_report(
            sdir, tuple(s.name for s in specs), {s.name for s in specs}, timeout
        )
    except KeyboardInterrupt:
        _stop(started)
        raise
    for lane in started:
        lane.process.poll()  # reap our direct children
    return fg_rc if fg_rc != 0 else lanes_rc


def _stop(started: list[launch.Launched]) -> None:
    """SIGTERM each lane's supervisor: it stops its lane's group and writes the status.

    Safe by pid: the supervisors are our unreaped children, so no pid was recycled.
    """
    for lane in started:
        if lane.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(lane.supervisor_pid, signal.SIGTERM)


@command.command("list")
def list_cmd() -> None:
    """Show the lanes declared in pyproject.toml."""
    cfg = load_config()
    declared = _declared(cfg)
    if not declared:
        click.echo("no lanes declared in [tool.suitefit.lanes]")
    for spec in declared.values():
        bits: list[Any] = [spec.display()]
        if spec.requirements:
            bits.append(f"venv: {' '.join(spec.requirements)}")
        if spec.timeout_s:
            bits.append(f"timeout {spec.timeout_s:g} s")
        click.echo(f"{spec.name}: " + "; ".join(str(b) for b in bits))
