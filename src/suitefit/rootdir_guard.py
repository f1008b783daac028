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

import inspect
import itertools
import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pytest


def _split(args: Sequence[str]) -> list[tuple[str, str]]:
    """``--suitefit-*`` options whose value came as the next argument."""
    return [(opt, val) for opt, val in itertools.pairwise(args)
            if opt.startswith("--suitefit-") and "=" not in opt and not val.startswith("-")]


def _found(config: pytest.Config, args: Sequence[str]) -> tuple[Path, Path | None] | None:
    """The rootdir and config file pytest finds for these free arguments, by its own rule
    (``determine_setup``: private, its signature moved between pytest 8.0 and 9); None if
    it cannot be asked."""
    try:
        from _pytest.config.findpaths import determine_setup

        params = inspect.signature(determine_setup).parameters
        kw: dict[str, Any] = {"inifile": None, "args": list(args), "rootdir_cmd_arg": None,
                              "invocation_dir": Path(config.invocation_params.dir),
                              "override_ini": getattr(config.option, "override_ini", None)}
        got = determine_setup(**{k: v for k, v in kw.items() if k in params})
        return Path(got[0]), Path(got[1]) if got[1] else None
    except Exception:
        return None


def moved_rootdir(config: pytest.Config) -> str | None:
    """Why pytest's rootdir is not the suite's (the option, and what to write), or None.

    Only where a ``--suitefit-*`` value came as the next argument and exists (pytest took it
    for a path): then pytest's rule is asked for the rootdir and config file of the command's
    own free arguments with those values and without. Not when ``--rootdir`` or ``-c``
    decide them.
    """
    import pytest as _pytest

    if getattr(config.option, "rootdir", None) or getattr(config.option, "inifilename", None):
        return None
    try:
        env = shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))
    except ValueError:
        env = []
    here = str(config.invocation_params.dir)
    taken = [(opt, val) for opt, val in _split([*env, *config.invocation_params.args])
             if os.path.exists(os.path.join(here, val))]
    if not taken:
        return None
    named = list(config.args) if getattr(config, "args_source", None) == _pytest.Config.ArgsSource.ARGS else []
    # with and without suitefit's values (not against what pytest found: another plugin's
    # value written as two arguments may have moved it too, and that is not ours to stop)
    found = _found(config, named)
    if found is None or found == _found(config, [*named, *(val for _, val in taken)]):
        return None
    opt, val = taken[0]
    rootdir, inipath = found
    return (f"`{opt} {val}` is two arguments: pytest reads its command line before suitefit's options "
            f"exist and took {val} for a test path, so it found rootdir {config.rootpath} "
            + (f"(config {config.inipath})" if config.inipath else "(no config file)")
            + f" instead of {rootdir} " + (f"(config {inipath})" if inipath else "(no config file)")
            + f": write {opt}={val}")
