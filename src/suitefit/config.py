"""``[tool.suitefit]`` in pyproject.toml: the user's readable, overridable settings.

One declarative schema (``SCHEMA``) says, for every key: its type, its default, the
verbs that read it and what it is for. ``load_config`` checks the whole table against
it once (unknown keys, types, sub-tables), so no verb re-checks its own keys, a typo is
never silently ignored, and the README's table is generated from the same lines
(``python -m suitefit.config`` prints it). Adding a key is one ``Key(...)`` line in
``SCHEMA``; read it with ``Config.get("name")`` (``"section.name"`` inside a table).
Keys that once were accepted and did nothing are in ``RETIRED``: each names what to use.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suitefit.errors import SuitefitError
from suitefit.pyproject import find_pyproject
from suitefit.units import parse_size_mb

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULT_HISTORY = ".suitefit/history.sqlite"
DEFAULT_EXPLAIN_FAILURES = 5  # new failures `suitefit run` diagnoses when asked without a number


# -- value types: each checks one value and returns it as the verbs use it ------------------------


@dataclass(frozen=True)
class Kind:
    """A value type: ``parse(value, where)`` returns the checked value or raises one line."""

    name: str  # as the README says it: "size", "fraction in [0, 1)", ...
    parse: Callable[[Any, str], Any]


def _bad(where: str, want: str, v: Any) -> SuitefitError:
    return SuitefitError(f"{where} must be {want}, got {v!r}")


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _size(v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (str, int, float)):
        raise _bad(where, 'a size such as "6GiB" (or a number of MiB)', v)
    mb = parse_size_mb(v, where)
    if not mb > 0:
        raise _bad(where, "a positive size", v)
    return mb


def _fraction(v: Any, where: str) -> float:
    if not _is_num(v) or not 0 <= v < 1:
        raise _bad(where, "a fraction in [0, 1)", v)
    return float(v)


def _pos_int(v: Any, where: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise _bad(where, "a positive integer", v)
    return v


def _count(v: Any, where: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise _bad(where, "an integer >= 0", v)
    return v


def _seconds(v: Any, where: str) -> float:
    if not _is_num(v) or v < 0:
        raise _bad(where, "seconds >= 0", v)
    return float(v)


def _level(v: Any, where: str) -> float:
    if not _is_num(v) or not 0.5 <= v < 1:
        raise _bad(where, "a confidence level in [0.5, 1)", v)
    return float(v)


def _text(v: Any, where: str) -> str:
    if not isinstance(v, str) or not v.strip():
        raise _bad(where, "a non-empty string", v)
    return v


def _bool(v: Any, where: str) -> bool:
    if not isinstance(v, bool):
        raise _bad(where, "true or false", v)
    return v


def _groups(v: Any, where: str) -> dict[str, tuple[str, ...]]:
    if not isinstance(v, dict) or not all(
        isinstance(files, list) and all(isinstance(f, str) for f in files) for files in v.values()
    ):
        raise SuitefitError(f"{where} must map a group name to a list of test file paths")
    return {str(k): tuple(files) for k, files in v.items()}


def _bool_or_names(v: Any, where: str) -> bool | tuple[str, ...]:
    if isinstance(v, bool):
        return v
    if isinstance(v, list) and all(isinstance(x, str) and x for x in v):
        return tuple(v)
    raise _bad(where, "true, false or a list of fixture names", v)


def _bool_or_count(v: Any, where: str) -> bool | int:
    if isinstance(v, bool) or (isinstance(v, int) and v >= 0):
        return v
    raise _bad(where, "true, false or a number of failures >= 0", v)


def _anything(v: Any, where: str) -> Any:
    return v  # checked by the verb that reads it (it needs more than the value to check it)


SIZE = Kind("size", _size)
FRACTION = Kind("fraction in [0, 1)", _fraction)
POS_INT = Kind("integer >= 1", _pos_int)
COUNT = Kind("integer >= 0", _count)
SECONDS = Kind("seconds", _seconds)
LEVEL = Kind("number in [0.5, 1)", _level)
PATH = Kind("path", _text)
BOOL = Kind("bool", _bool)
GROUPS = Kind("table: name = [files]", _groups)
BOOL_OR_NAMES = Kind("bool or [names]", _bool_or_names)
BOOL_OR_COUNT = Kind("bool or N", _bool_or_count)


# -- the schema --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Key:
    """One key: its type, its default (None: see ``default_doc``), who reads it, what for.

    ``keys`` makes the key a table with those keys; ``each`` a table of named tables
    (``[tool.suitefit.lanes.NAME]``), each with those keys.
    """

    name: str
    kind: Kind | None
    default: Any
    verbs: str
    doc: str
    default_doc: str = ""  # the default in words, when it is not a constant
    keys: tuple[Key, ...] = ()
    each: tuple[Key, ...] = ()

    @property
    def is_table(self) -> bool:
        return bool(self.keys or self.each)


SCHEMA: tuple[Key, ...] = (
    Key("history", PATH, DEFAULT_HISTORY, "all",
        "where the measurements live (relative to pyproject.toml)"),
    Key("memory_budget", SIZE, None, "run, plan, sweep, doctor, pytest --suitefit",
        "memory the run may use; also the heartbeat threshold of `pytest --suitefit`",
        default_doc="cgroup memory.max (v2) / memory.limit_in_bytes (v1) / RAM, minus memory_margin"),
    Key("memory_margin", FRACTION, 0.10, "run, plan, sweep, doctor",
        "share kept free when the budget comes from the machine"),
    Key("memory_headroom", FRACTION, None, "run, plan",
        "share of the budget the plan keeps free for its own error in predicting the peak",
        default_doc="the largest under-prediction of the peak measured in the last 10 planned runs, "
                    "at least 5%"),
    Key("workers", POS_INT, None, "run, plan, sweep, doctor",
        "pin the worker count instead of choosing it", default_doc="chosen by the plan"),
    Key("groups", GROUPS, {}, "run, plan",
        "files that must share one worker, in this order"),
    Key("default_file_s", SECONDS, None, "run, plan",
        "predicted wall of a file never measured",
        default_doc="the median measured file, else 1 s"),
    Key("default_file_mb", SIZE, None, "run, plan, sweep",
        "predicted peak above the worker's baseline of a file never measured "
        "(sweep adds a worker's baseline: each file runs in its own pytest)",
        default_doc="the median measured file, else 50 MiB"),
    Key("release_fixtures", BOOL_OR_NAMES, True, "run, plan",
        "tear expensive session/package fixtures down after their last user on a worker "
        "(true: the expensive ones, never autouse; false: never; or only these names)"),
    Key("calibrate", BOOL, True, "profile",
        "after a serial profile, run a slice of its files side by side to measure how much "
        "workers slow each other (about 5% of the profile's time, 1.5-15 s a worker, after its workers' start)"),
    Key("explain_failures", BOOL_OR_COUNT, False, "run",
        "diagnose new failures after the suite, in fresh processes (true: the first 5; N: the first N)"),
    Key("sweep", None, {}, "sweep", "the order-dependency sweep", keys=(
        Key("repeat", POS_INT, 1, "sweep", "runs of each file alone (2+ finds flaky tests)"),
    )),
    Key("compare", None, {}, "compare", "A/B timing", keys=(
        Key("runs", POS_INT, 10, "compare", "measured runs of each side"),
        Key("warmup", COUNT, 1, "compare", "unmeasured warm-up runs of each side"),
        Key("confidence", LEVEL, 0.95, "compare", "confidence level of the interval"),
        Key("margin", FRACTION, 0.03, "compare", "effects smaller than this fraction are not claimed"),
    )),
    Key("report", None, {}, "report", "the HTML report", keys=(
        Key("output", PATH, None, "report", "where the HTML report is written",
            default_doc="suitefit-report-RUN.html"),
    )),
    Key("doctor", None, {}, "doctor", "the parallel set-up check", keys=(
        Key("silence", Kind("table: finding = reason", _anything), {}, "doctor",
            "findings not to report, each with the reason"),
    )),
    Key("lanes", None, {}, "lanes", "background CI lanes, one table per lane", each=(
        Key("command", Kind("string or [argv]", _anything), None, "lanes", "what the lane runs"),
        Key("requirements", Kind("[requirements]", _anything), [], "lanes", "pip requirements of its own venv"),
        Key("env", Kind("table", _anything), {}, "lanes", "environment variables"),
        Key("timeout", Kind("duration", _anything), None, "lanes", "end the lane after this long"),
        Key("cwd", Kind("path", _anything), ".", "lanes", "where it runs"),
        Key("shell", Kind("bool", _anything), False, "lanes", "run command through /bin/sh"),
        Key("kill_after", Kind("duration", _anything), "5s", "lanes", "SIGKILL this long after SIGTERM"),
    )),
)

# Keys once accepted and never read: refused, with what to use instead.
RETIRED: Mapping[str, str] = {
    "threshold": "the heartbeat threshold is the memory budget: set memory_budget "
                 "(or give pytest --suitefit-threshold=SIZE)",
    "shards": "shards are chosen per CI job: `suitefit run --shard K/N` (or the CI's own variables), "
              "`suitefit plan --shards N`",
}

_BY_NAME: Mapping[str, Key] = {k.name: k for k in SCHEMA}


def schema_key(dotted: str) -> Key:
    """The declaration of ``"name"`` or ``"table.name"``."""
    head, _, rest = dotted.partition(".")
    key = _BY_NAME[head]
    if rest:
        key = {k.name: k for k in key.keys}[rest]
    return key


def _check_keys(table: Mapping[str, Any], keys: tuple[Key, ...], where: str,
                retired: Mapping[str, str] | None = None) -> None:
    """The one unknown-key check: a retired key says what to use, an unknown one lists the known."""
    names = [k.name for k in keys]
    for name in table:
        if retired and name in retired:
            raise SuitefitError(f"{where}: {name} is not a setting any more: {retired[name]}")
    unknown = sorted(set(table) - set(names))
    if unknown:
        raise SuitefitError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(names))})")


def check(raw: Mapping[str, Any], where: str = "[tool.suitefit]") -> dict[str, Any]:
    """Check ``raw`` against ``SCHEMA``; the parsed values of the keys present (tables as dicts)."""
    _check_keys(raw, SCHEMA, where, RETIRED)
    out: dict[str, Any] = {}
    for name, value in raw.items():
        key = _BY_NAME[name]
        out[name] = _parse(key, value, f"{where[:-1]}.{name}]" if key.is_table else f"{where} {name}")
    return out


def _parse(key: Key, value: Any, where: str) -> Any:
    if key.keys:
        if not isinstance(value, dict):
            raise SuitefitError(f"{where} must be a table")
        _check_keys(value, key.keys, where)
        subs = {k.name: k for k in key.keys}
        return {n: _parse(subs[n], v, f"{where} {n}") for n, v in value.items()}
    if key.each:
        if not isinstance(value, dict):
            raise SuitefitError(f"{where} must be a table")
        for name, table in value.items():
            if isinstance(table, dict):  # a lane that is not a table is the lane parser's to explain
                _check_keys(table, key.each, f"{where[:-1]}.{name}]")
        return dict(value)
    assert key.kind is not None
    return key.kind.parse(value, where)


@dataclass(frozen=True)
class Config:
    """``[tool.suitefit]`` as read, every key checked and defaulted."""

    root: Path  # folder holding pyproject.toml (or cwd when there is none)
    pyproject: Path | None
    raw: Mapping[str, Any] = field(default_factory=dict)  # as written, already checked
    values: Mapping[str, Any] = field(default_factory=dict)  # as parsed by the schema

    def __post_init__(self) -> None:
        if self.raw and not self.values:  # built from a table directly (tests, callers): check it too
            object.__setattr__(self, "values", check(self.raw))

    def get(self, dotted: str) -> Any:
        """A setting as the schema parsed it, or its declared default: ``"workers"``, ``"sweep.repeat"``."""
        key = schema_key(dotted)  # a KeyError here is a typo in suitefit itself
        head, _, rest = dotted.partition(".")
        if not rest:
            return self.values.get(head, key.default)
        return self.values.get(head, {}).get(rest, key.default)

    @property
    def history_path(self) -> Path:
        p = Path(str(self.get("history")))
        return p if p.is_absolute() else self.root / p

    @property
    def memory_budget_mb(self) -> float | None:
        v: float | None = self.get("memory_budget")
        return v

    @property
    def memory_margin(self) -> float:
        return float(self.get("memory_margin"))

    @property
    def memory_headroom(self) -> float | None:
        """The configured headroom (None: measured from the history; see ``plan.headroom``)."""
        v: float | None = self.get("memory_headroom")
        return v

    @property
    def workers(self) -> int | None:
        v: int | None = self.get("workers")
        return v

    @property
    def groups(self) -> dict[str, tuple[str, ...]]:
        return dict(self.get("groups"))

    @property
    def explain_failures(self) -> int:
        """How many new failures `suitefit run` diagnoses after the suite (0: none)."""
        v = self.get("explain_failures")
        if isinstance(v, bool):
            return DEFAULT_EXPLAIN_FAILURES if v else 0
        return int(v)

    @property
    def release_fixtures(self) -> bool | tuple[str, ...]:
        """Early release of expensive fixtures: true (default), false, or only the named ones."""
        v = self.get("release_fixtures")
        return v if isinstance(v, bool) else tuple(v)

    def section(self, name: str) -> dict[str, Any]:
        """A sub-table as written (checked against the schema when it was loaded)."""
        v = self.raw.get(name, {})
        if not isinstance(v, dict):
            raise SuitefitError(f"[tool.suitefit.{name}] must be a table")
        return dict(v)


def make_config(root: Path, pyproject: Path | None, raw: Mapping[str, Any]) -> Config:
    """A checked Config from a ``[tool.suitefit]`` table (one line naming the file on error)."""
    try:
        values = check(raw)
    except SuitefitError as e:
        raise SuitefitError(f"{pyproject}: {e}" if pyproject else str(e), e.exit_code) from None
    return Config(root=root, pyproject=pyproject, raw=raw, values=values)


def load_config(start: Path | None = None) -> Config:
    """Read and check ``[tool.suitefit]`` from the nearest pyproject.toml at or above ``start``."""
    start = (start or Path.cwd()).resolve()
    pp = find_pyproject(start)
    if pp is None:
        return Config(root=start, pyproject=None, raw={})
    try:
        data = tomllib.loads(pp.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise SuitefitError(f"{pp}: not valid TOML: {e}") from None
    except OSError as e:
        raise SuitefitError(f"{pp}: cannot read: {e.strerror}") from None
    raw = data.get("tool", {}).get("suitefit", {})
    if not isinstance(raw, dict):
        raise SuitefitError(f"{pp}: [tool.suitefit] must be a table")
    return make_config(pp.parent, pp, raw)


# -- the README's table --------------------------------------------------------------------------


def _default_text(k: Key) -> str:
    if k.default_doc:
        return k.default_doc
    if k.default is None or k.default == {} or k.default == []:
        return "-"
    if isinstance(k.default, bool):
        return "true" if k.default else "false"
    return f'`"{k.default}"`' if isinstance(k.default, str) else f"`{k.default}`"


def markdown_table() -> str:
    """The configuration table of the README, one row per key (tables' keys as ``table.key``)."""
    rows = ["| key | type | default | read by | what for |", "|---|---|---|---|---|"]

    def row(name: str, k: Key) -> None:
        kind = k.kind.name if k.kind is not None else "table"
        rows.append(f"| `{name}` | {kind} | {_default_text(k)} | {k.verbs} | {k.doc} |")

    for k in SCHEMA:
        if k.is_table:
            rows.append(f"| `[tool.suitefit.{k.name}{'.NAME' if k.each else ''}]` | table | - | "
                        f"{k.verbs} | {k.doc} |")
            for sub in k.keys:
                row(f"{k.name}.{sub.name}", sub)
            for sub in k.each:
                row(f"{k.name}.NAME.{sub.name}", sub)
        else:
            row(k.name, k)
    for name, instead in RETIRED.items():
        rows.append(f"| ~~`{name}`~~ | refused | - | - | {instead} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # pragma: no cover - `python -m suitefit.config` prints the README table
    sys.stdout.write(markdown_table())
