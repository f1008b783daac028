"""A suitefit option written as two arguments can move pytest's rootdir: say so, and stop.

pytest finds its rootdir and config file before any plugin's options exist (an installed
plugin's ``pytest_addoption`` runs after), so in ``pytest --suitefit-history /x/h.sqlite``
it takes ``/x/h.sqlite`` for a test path; once that file exists, the rootdir is looked for
from the common ancestor of it and the suite. On pytest's own suite, with the history in
/tmp, the second run found rootdir /tmp and no config file, collected 48,702 items instead
of 4,231 (``testing/example_scripts`` and all) and failed at collection. Written
``--suitefit-history=/x/h.sqlite`` (as the suitefit CLI always writes it) nothing moves.
"""

from __future__ import annotations

import itertools
import os
import shlex
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pytest


def _split(args: Sequence[str]) -> list[tuple[str, str]]:
    """``--suitefit-*`` options whose value came as the next argument."""
    return [(opt, val) for opt, val in itertools.pairwise(args)
            if opt.startswith("--suitefit-") and "=" not in opt and not val.startswith("-")]


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def moved_rootdir(config: pytest.Config) -> str | None:
    """Why pytest's rootdir may not be the suite's (the option, and what to write), or None.

    pytest took such a value for a path if it existed; it moved the rootdir if it is outside
    the common ancestor of what the command names (or of the invocation directory). Not
    when ``--rootdir`` or ``-c`` decide the rootdir.
    """
    import pytest as _pytest

    if getattr(config.option, "rootdir", None) or getattr(config.option, "inifilename", None):
        return None
    try:
        env = shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))
    except ValueError:
        env = []
    split = _split([*env, *config.invocation_params.args])
    if not split:
        return None
    here = str(config.invocation_params.dir)
    named: list[str] = []
    if getattr(config, "args_source", None) == _pytest.Config.ArgsSource.ARGS:
        for a in config.args:
            p = os.path.abspath(os.path.join(here, a.split("::", 1)[0]))
            if os.path.exists(p):
                named.append(p if os.path.isdir(p) else os.path.dirname(p))
    anchor = os.path.commonpath(named) if named else here
    for opt, val in split:
        p = os.path.abspath(os.path.join(here, val))
        if not os.path.exists(p):
            continue
        folder = p if os.path.isdir(p) else os.path.dirname(p)
        if not _within(folder, anchor):
            found = f"rootdir {config.rootpath}" + (f", config {config.inipath}" if config.inipath
                                                     else ", no config file")
            return (f"`{opt} {val}` is two arguments: pytest reads its command line before suitefit's "
                    f"options exist, took {val} for a test path, and found {found}: "
                    f"write {opt}={val}")
    return None
