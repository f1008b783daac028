"""Which test files a pytest command line selects by path, read without running pytest.

The workflow audit reads it from CI files; `suitefit run` from its own arguments, so that
`suitefit run -- tests/unit` plans the files it runs, not the whole suite.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

# pytest options whose value is the next word (the rest are flags or --opt=value).
VALUE_OPTS = {
    "-k", "-m", "-n", "-p", "-c", "-o", "-r", "-W", "--maxfail", "--ignore", "--ignore-glob",
    "--deselect", "--rootdir", "--junitxml", "--junit-xml", "--dist", "--cov", "--cov-report",
    "--cov-config", "--tb", "--durations", "--basetemp", "--confcutdir", "--log-level",
    "--timeout", "--import-mode", "--numprocesses", "--maxprocesses", "--capture",
    "--override-ini", "--pyargs", "--suitefit-history", "--suitefit-run-id", "--suitefit-kind",
    "--log-file", "--log-cli-level", "--durations-min", "--max-worker-restart", "--tx",
}  # fmt: skip


def pytest_selection(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """(positional paths, --ignore paths) of one pytest call."""
    paths: list[str] = []
    ignores: list[str] = []
    skip = False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a == "--":
            continue
        if a.startswith("-"):
            opt, eq, val = a.partition("=")
            if opt in ("--ignore", "--ignore-glob"):
                if eq:
                    ignores.append(val)
                elif i + 1 < len(args):
                    ignores.append(args[i + 1])
            if opt in VALUE_OPTS and not eq:
                skip = True
            continue
        if a.startswith(">") or a.startswith("2>"):
            break
        paths.append(a.split("::", 1)[0])
    return paths, ignores


def measured_root(files: Sequence[str], args: Sequence[str], cwd: Path, root: Path) -> Path:
    """The folder the measured files' names (pytest's node ids) are relative to: pytest's
    rootdir. Usually the suite's folder, ``root``. pytest looks for its ini file from the path
    arguments up, so it can find one deeper: `pytest pandas/tests/frame` run where pandas is
    installed takes ``pandas`` as its rootdir, and named its files ``tests/frame/...``. Of
    ``root`` and the arguments' folders up to ``cwd``, the one that holds the most of a sample
    of the files (``root`` on a tie)."""
    paths = pytest_selection(args)[0]
    sample = list(files)[:50]
    if not paths or not sample:  # (the usual run names no path: no file is looked at)
        return root

    def held(d: Path) -> int:
        return sum((d / f).exists() for f in sample)

    best, most = root, held(root)
    seen = {root}
    for word in paths:
        p = Path(os.path.normpath(cwd / word))
        while most < len(sample) and p.is_relative_to(cwd) and p not in seen:
            seen.add(p)
            if (n := held(p)) > most:
                best, most = p, n
            p = p.parent
    return best


def missing_paths(args: Sequence[str], cwd: Path) -> list[str]:
    """The words of a pytest command line that read as paths (a folder separator, a node id or a
    ``.py`` name) and name nothing here (pytest stops on such a path, unless it is the value of a
    plugin's option). A bare word that is not there is likelier such a value (``--reruns 3``)."""
    if "--pyargs" in args:
        return []
    return [p for p in pytest_selection(args)[0]
            if ("/" in p or os.sep in p or p.endswith(".py")) and not os.path.exists(os.path.join(cwd, p))]


def files_selected(args: Sequence[str], cwd: Path, root: Path) -> Callable[[str], bool] | None:
    """Whether a test file (``root``-relative, as in node ids) is under the paths ``args`` give
    pytest; None for the whole suite: no path given, or a word that cannot be read as a path
    under ``root`` (``--pyargs`` module names, a plugin option's value), where planning the
    whole suite is the safe reading. ``--ignore`` paths are left out; ``--ignore-glob``
    patterns and ``-k``/``-m`` are not read (their files are planned, and finish at once).
    """
    if "--pyargs" in args:
        return None
    paths, ignores = pytest_selection(args)
    if not paths:
        return None

    def under_root(word: str) -> str | None:
        p = os.path.normpath(os.path.join(cwd, word))  # pytest's own reading: not resolved
        try:
            rel = Path(p).relative_to(root).as_posix()
        except ValueError:
            return None
        return "" if rel == "." else rel

    picked = [under_root(p) if os.path.exists(os.path.join(cwd, p)) else None for p in paths]
    if any(p is None for p in picked):
        return None
    skipped = [r for r in (under_root(i) for i in ignores if not any(c in i for c in "*?[")) if r is not None]

    def under(path: str, prefixes: Sequence[str | None]) -> bool:
        return any(x == "" or path == x or path.startswith(f"{x}/") for x in prefixes if x is not None)

    return lambda path: under(path, picked) and not under(path, skipped)
