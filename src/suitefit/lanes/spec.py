"""What a lane is: parsed and checked from ``[tool.suitefit.lanes.NAME]`` or ``--lane``.

Checked up front so that a typo fails ``lanes start`` with one line, before any
lane is launched, instead of surfacing minutes later as a lane that "failed".
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suitefit.errors import SuitefitError

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
DEFAULT_KILL_AFTER_S = 5.0
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?\s*$")
_UNIT_S = {None: 1.0, "s": 1.0, "ms": 0.001, "m": 60.0, "min": 60.0, "h": 3600.0}


@dataclass(frozen=True)
class LaneSpec:
    """One background lane: its command and the environment it runs in."""

    name: str
    command: tuple[str, ...]  # argv; with shell=True a single shell script string
    shell: bool = False
    requirements: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float | None = None
    kill_after_s: float = DEFAULT_KILL_AFTER_S
    cwd: Path = Path(".")

    def argv(self) -> list[str]:
        return ["/bin/sh", "-c", self.command[0]] if self.shell else list(self.command)

    def display(self) -> str:
        return self.command[0] if self.shell else shlex.join(self.command)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "command": list(self.command),
            "shell": self.shell,
            "requirements": list(self.requirements),
            "env": dict(self.env),
            "timeout_s": self.timeout_s,
            "kill_after_s": self.kill_after_s,
            "cwd": str(self.cwd),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> LaneSpec:
        return cls(
            name=str(d["name"]),
            command=tuple(d["command"]),
            shell=bool(d.get("shell", False)),
            requirements=tuple(d.get("requirements", ())),
            env=dict(d.get("env", {})),
            timeout_s=d.get("timeout_s"),
            kill_after_s=float(d.get("kill_after_s", DEFAULT_KILL_AFTER_S)),
            cwd=Path(d.get("cwd", ".")),
        )


def parse_duration_s(value: object, where: str) -> float:
    """Seconds from a number or a string like ``90``, ``90s``, ``5m``, ``1.5h``."""
    if isinstance(value, bool):
        raise SuitefitError(f"{where} must be a duration like 90, '90s' or '5m', got {value!r}")
    if isinstance(value, (int, float)):
        secs = float(value)
    else:
        m = _DURATION_RE.match(str(value))
        if not m:
            raise SuitefitError(f"{where} must be a duration like 90, '90s' or '5m', got {value!r}")
        secs = float(m.group(1)) * _UNIT_S[m.group(2)]
    if secs <= 0:
        raise SuitefitError(f"{where} must be positive, got {value!r}")
    return secs


def check_name(name: str, where: str) -> str:
    if not NAME_RE.match(name):
        raise SuitefitError(
            f"{where}: lane name {name!r} must be letters, digits, '_', '.', '-' (at most 64)"
        )
    return name


def lane_from_table(name: str, table: object, root: Path) -> LaneSpec:
    """Parse one ``[tool.suitefit.lanes.NAME]`` table."""
    where = f"[tool.suitefit.lanes.{name}]"
    check_name(name, where)
    if not isinstance(table, dict):
        raise SuitefitError(f"{where} must be a table with at least 'command'")
    # its keys were checked by the config schema (suitefit.config, `lanes`); the values here
    shell = table.get("shell", False)
    if not isinstance(shell, bool):
        raise SuitefitError(f"{where} shell must be true or false, got {shell!r}")
    command = _parse_command(table.get("command"), shell, where)
    reqs = table.get("requirements", [])
    if isinstance(reqs, str):
        reqs = [reqs]
    if not isinstance(reqs, list) or not all(isinstance(r, str) and r.strip() for r in reqs):
        raise SuitefitError(f"{where} requirements must be a list of pip requirement strings")
    env = table.get("env", {})
    if not isinstance(env, dict) or not all(
        isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in env.values()
    ):
        raise SuitefitError(f'{where} env must be a table of NAME = "value"')
    timeout = table.get("timeout")
    cwd = table.get("cwd", ".")
    if not isinstance(cwd, str):
        raise SuitefitError(f"{where} cwd must be a path string, got {cwd!r}")
    cwd_path = Path(cwd) if Path(cwd).is_absolute() else root / cwd
    return LaneSpec(
        name=name,
        command=command,
        shell=shell,
        requirements=tuple(r.strip() for r in reqs),
        env={str(k): str(v) for k, v in env.items()},
        timeout_s=None if timeout is None else parse_duration_s(timeout, f"{where} timeout"),
        kill_after_s=parse_duration_s(
            table.get("kill_after", DEFAULT_KILL_AFTER_S), f"{where} kill_after"
        ),
        cwd=cwd_path,
    )


def _parse_command(value: object, shell: bool, where: str) -> tuple[str, ...]:
    if value is None:
        raise SuitefitError(f"{where} needs a 'command' (a string or a list of strings)")
    if isinstance(value, str):
        if not value.strip():
            raise SuitefitError(f"{where} command is empty")
        if shell:
            return (value,)
        try:
            argv = shlex.split(value)
        except ValueError as e:
            raise SuitefitError(f"{where} command cannot be split into words: {e}") from None
        return tuple(argv)
    if isinstance(value, list) and value and all(isinstance(a, str) for a in value):
        if shell:
            raise SuitefitError(f"{where} with shell = true, command must be one string")
        return tuple(value)
    raise SuitefitError(f"{where} command must be a string or a non-empty list of strings")


def lanes_from_config(section: Mapping[str, Any], root: Path) -> dict[str, LaneSpec]:
    """All lanes declared in ``[tool.suitefit.lanes]``, in declaration order."""
    return {name: lane_from_table(name, table, root) for name, table in section.items()}


def lane_from_option(option: str, root: Path) -> LaneSpec:
    """A lane given as ``--lane NAME=COMMAND`` (run through the shell, like a CI step)."""
    name, sep, command = option.partition("=")
    if not sep or not name.strip() or not command.strip():
        raise SuitefitError(f"--lane {option!r}: expected NAME=COMMAND")
    return LaneSpec(
        name=check_name(name.strip(), "--lane"), command=(command,), shell=True, cwd=root
    )
