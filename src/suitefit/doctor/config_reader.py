"""The suite's configuration as doctor sees it.

pytest's own options are resolved by the target interpreter (``target_facts.py``), so
ini files, ``PYTEST_ADDOPTS`` and plugin options mean exactly what they mean to that
pytest. This module adds what pytest does not read: coverage.py's config files (where
``fail_under`` lives), where each option came from, and whether the sources mention
``xdist_group``.
"""

from __future__ import annotations

import configparser
import fnmatch
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suitefit.errors import SuitefitError
from suitefit.marks import MARK_USE

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

_SKIP_DIRS = {"node_modules", "site-packages", "__pycache__", "build", "dist", "venv", "env"}
_MAX_FILES = 20000


@dataclass(frozen=True)
class TargetFacts:
    """What the target interpreter's pytest made of the options (see ``target_facts.py``)."""

    raw: dict[str, Any]

    def get(self, key: str, default: Any = None) -> Any:
        return self.raw.get(key, default)

    @property
    def has_xdist(self) -> bool:
        return bool(self.raw.get("xdist"))

    @property
    def workers(self) -> int | None:
        """Workers xdist will start: -n resolved as xdist resolves it, capped by --maxprocesses."""
        n = self.raw.get("numprocesses")
        if n in ("auto", "logical"):
            n = self.raw.get("auto_workers")
        if not isinstance(n, int):
            return None
        cap = self.raw.get("maxprocesses")
        return min(n, int(cap)) if cap else n

    @property
    def dist(self) -> str:
        d = str(self.raw.get("dist") or "no")
        # xdist turns "no" into "load" when -n is given (in pytest_cmdline_main, not run here).
        return "load" if d == "no" and (self.workers or 0) > 0 else d

    @property
    def coverage_on(self) -> bool:
        return bool(self.raw.get("cov_source")) and not self.raw.get("no_cov")

    def ini_name(self) -> str:
        ini = self.raw.get("inipath")
        return Path(ini).name if ini else "no ini file"

    def origin(self, *flags: str) -> str:
        """Where an option was given: "addopts in pytest.ini", "PYTEST_ADDOPTS", "command line"."""
        places = [
            (f"addopts in {self.ini_name()}", self.raw.get("ini_addopts") or []),
            ("PYTEST_ADDOPTS", self.raw.get("env_addopts") or []),
            ("the command line", self.raw.get("args") or []),
        ]
        hits = [name for name, tokens in places if _mentions(tokens, flags)]
        return " and ".join(hits) if hits else "a plugin or conftest default"

    def tokens(self, *flags: str) -> list[str]:
        """The option tokens as the user wrote them (with their values), for evidence."""
        out: list[str] = []
        for tokens in (self.raw.get("ini_addopts") or [], self.raw.get("env_addopts") or [],
                       self.raw.get("args") or []):
            for i, tok in enumerate(tokens):
                name = tok.split("=", 1)[0]
                if any(name == f or (len(f) == 2 and tok.startswith(f) and len(tok) > 2) for f in flags):
                    takes_value = "=" not in tok and len(name) == len(tok) and i + 1 < len(tokens) \
                        and not tokens[i + 1].startswith("-")
                    out.append(f"{tok} {tokens[i + 1]}" if takes_value else tok)
        return out


def _mentions(tokens: Sequence[str], flags: Sequence[str]) -> bool:
    for tok in tokens:
        name = tok.split("=", 1)[0]
        for f in flags:
            if name == f or (len(f) == 2 and tok.startswith(f) and len(tok) > 2):  # -n4
                return True
    return False


@dataclass(frozen=True)
class FailUnder:
    value: float
    source: str  # "pyproject.toml [tool.coverage.report]"


def _ini(path: Path) -> configparser.ConfigParser:
    cp = configparser.ConfigParser(interpolation=None)
    try:
        cp.read(path, encoding="utf-8")
    except configparser.Error as e:
        raise SuitefitError(f"{path}: not a valid ini file: {' '.join(str(e).split())}") from None
    return cp


def coverage_fail_under(project: Path, cov_config: str | None) -> FailUnder | None:
    """``fail_under`` as coverage.py would find it: --cov-config, .coveragerc, setup.cfg,
    tox.ini, pyproject.toml (first file that has a coverage section wins)."""
    candidates: list[tuple[Path, str]] = []
    if cov_config and cov_config not in (".coveragerc", "True"):
        p = Path(cov_config)
        section = "coverage:report" if p.name in ("setup.cfg", "tox.ini") else "report"
        candidates.append((p if p.is_absolute() else project / p, section))
    candidates += [(project / ".coveragerc", "report"), (project / "setup.cfg", "coverage:report"),
                   (project / "tox.ini", "coverage:report")]
    for path, section in candidates:
        if not path.is_file():
            continue
        if path.suffix == ".toml":
            return _toml_fail_under(path)
        cp = _ini(path)
        if cp.has_option(section, "fail_under"):
            return FailUnder(_number(cp.get(section, "fail_under"), path), f"{path.name} [{section}]")
        if path.name == ".coveragerc":
            return None  # coverage.py stops at its own file
    pp = project / "pyproject.toml"
    return _toml_fail_under(pp) if pp.is_file() else None


def _toml_fail_under(path: Path) -> FailUnder | None:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise SuitefitError(f"{path}: not valid TOML: {e}") from None
    report = data.get("tool", {}).get("coverage", {}).get("report", {})
    if isinstance(report, dict) and "fail_under" in report:
        return FailUnder(_number(report["fail_under"], path), f"{path.name} [tool.coverage.report]")
    return None


def _number(v: Any, path: Path) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        raise SuitefitError(f"{path}: fail_under must be a number, got {v!r}") from None


@dataclass(frozen=True)
class SourceScan:
    files_with_group_marks: tuple[str, ...] = ()
    scanned: int = 0
    truncated: bool = False
    notes: list[str] = field(default_factory=list)


_PYTEST_INIS = ("pytest.ini", ".pytest.ini")


def _test_files(root: Path, starts: Sequence[Path], patterns: Sequence[str],
                norecurse: Sequence[str]) -> Iterator[Path]:
    """The files pytest would look at by name (``python_files`` and conftest.py), walking as it
    does (``norecursedirs``, no virtualenvs); folders holding their own pytest.ini are other
    projects (fixtures) and are skipped."""
    for start in starts:
        if start.is_file():
            yield start
            continue
        for dirpath, dirnames, filenames in os.walk(start):
            here = Path(dirpath)
            dirnames[:] = sorted(
                d for d in dirnames
                if not any(fnmatch.fnmatch(d, pat) for pat in norecurse)
                and d not in _SKIP_DIRS
                and not (here / d / "pyvenv.cfg").exists()
                and not any((here / d / ini).is_file() for ini in _PYTEST_INIS)
            )
            for name in sorted(filenames):
                if name == "conftest.py" or (name.endswith(".py") and any(fnmatch.fnmatch(name, pat) for pat in patterns)):
                    yield here / name


def scan_group_marks(root: Path, collect: dict[str, list[str]] | None = None) -> SourceScan:
    """Which test files and conftests under the suite's testpaths put ``xdist_group`` marks on tests."""
    collect = collect or {}
    starts = [root / p for p in collect.get("testpaths") or []] or [root]
    starts = [p for p in starts if p.exists()] or [root]
    patterns = collect.get("python_files") or ["test_*.py", "*_test.py"]
    norecurse = collect.get("norecursedirs") or [".*", "*.egg", "_darcs", "build", "CVS", "dist",
                                                 "node_modules", "venv", "{arch}"]
    hits: list[str] = []
    n = 0
    for n, path in enumerate(_test_files(root, starts, patterns, norecurse), 1):
        if n > _MAX_FILES:
            return SourceScan(tuple(hits), n - 1, truncated=True)
        try:
            if MARK_USE.search(path.read_bytes()):
                hits.append(str(path.relative_to(root)) if path.is_relative_to(root) else str(path))
        except OSError:
            continue
    return SourceScan(tuple(hits), n)
