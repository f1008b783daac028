"""The pytest plugin's entry point: options only, until ``--suitefit`` asks for more.

Inert unless ``--suitefit`` is given: installing suitefit never changes a plain
``pytest`` run, and this module imports nothing heavy. With it, ``session.py``
takes over: the process that starts the session records the run and its
whole-tree timeline, and every process that runs tests (each xdist worker, or the
only process) records tests, files, fixtures and itself.
"""

from __future__ import annotations

import sys
from importlib.machinery import PathFinder
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("suitefit", "suitefit: measure and fit the suite to its runner")
    g.addoption("--suitefit", action="store_true", default=False,
                help="measure this run (time, CPU, memory of the process tree) into the suitefit history")
    g.addoption("--suitefit-history", default=None, metavar="PATH",
                help="history file (default: [tool.suitefit] history or .suitefit/history.sqlite)")
    g.addoption("--suitefit-run-id", type=int, default=None, metavar="N",
                help="attach to run N already created in the history (used by the suitefit CLI)")
    g.addoption("--suitefit-kind", default="pytest", metavar="KIND", help="what kind of run to record")
    g.addoption("--suitefit-interval", type=float, default=0.1, metavar="S",
                help="seconds between samples of the process tree (default 0.1)")
    g.addoption("--suitefit-threshold", default=None, metavar="SIZE",
                help="memory line for 'seconds above' (e.g. 6GiB; default: the memory budget)")
    g.addoption("--suitefit-plan", default=None, metavar="PATH",
                help="run under this plan (written by `suitefit run`): its scheduler, journal, reaping")
    g.addoption("--suitefit-shard-spec", default=None, metavar="PATH",
                help="keep only this shard's tests (a spec written by `suitefit run --shard K/N`)")
    g.addoption("--suitefit-shard-result", default=None, metavar="PATH",
                help="with --suitefit-shard-spec: write this shard's portable result here at the end")
    g.addoption("--suitefit-only", default=None, metavar="PATH",
                help="run only the tests of the files listed in PATH, one a line, in that order "
                     "(written by `suitefit calibrate`)")
    g.addoption("--suitefit-progress", default="auto", choices=("auto", "live", "plain", "off"),
                help="progress on stderr: a live line on a terminal, plain lines every 10 s otherwise (auto)")
    g.addoption("--suitefit-grace", type=float, default=3.0, metavar="S",
                help="seconds a process left behind by a test may live on before it is ended (default 3)")
    g.addoption("--suitefit-explain", type=int, default=0, metavar="N",
                help="with --suitefit-plan: after the run, diagnose up to N new failures in fresh processes")
    g.addoption("--suitefit-explain-s", type=float, default=300.0, metavar="S",
                help="the time box of that diagnosis, in seconds (default 300)")
    _watch_for_an_early_end()


_configured = False
_watching = False  # the exit handler is registered (once a process, not once a pytest session)


def _watch_for_an_early_end() -> None:
    """`suitefit run` hands its process to pytest with its run already open. If pytest stops before
    configuring plugins (a usage error, a conftest that fails to import, --version),
    nothing here would ever close that run: close it at exit and say so in one line.
    Only for that process (the CLI always writes ``--suitefit-run-id=N``); costs nothing
    otherwise. Once: a suite that runs pytest sessions in its own process (pytester's inline
    runs: pytest's own suite runs thousands) calls this again for each.
    """
    global _watching
    if _watching:
        return
    import sys

    vals = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--suitefit-") and "=" in a}
    if "--suitefit-run-id" not in vals or "--suitefit-history" not in vals:
        return
    import atexit

    _watching = True
    atexit.register(_close_unstarted_run, vals["--suitefit-history"], vals["--suitefit-run-id"])


def _close_unstarted_run(history_path: str, run_id: str) -> None:
    if _configured:
        return
    import sys

    try:
        from suitefit.history import History

        with History(history_path, create=False) as h:
            if h.run(int(run_id)).status != "running":
                return
            h.update_run(int(run_id), status="error")
            h.merge_run_meta(int(run_id), ended_unrecorded="pytest stopped before its session started")
        sys.stderr.write(f"suitefit: error: run {run_id}: pytest stopped before its session started "
                         "(see its output above): nothing was measured\n")
    except Exception as e:  # at exit: one line, never a traceback
        sys.stderr.write(f"suitefit: error: run {run_id} could not be closed: {e}\n")


def _enabled(config: pytest.Config) -> bool:
    return bool(config.getoption("suitefit", False))


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    global _configured
    _configured = True
    if not _enabled(config):
        return
    if not any(isinstance(f, _OwnModules) for f in sys.meta_path):
        sys.meta_path.insert(0, _OwnModules())
    from suitefit.session import configure

    configure(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    if not _enabled(config):
        return
    from suitefit.session import unconfigure

    try:
        unconfigure(config)
    finally:
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _OwnModules)]


class _OwnModules:
    """Imports suitefit's own modules as Python does without pytest: from their bytecode.

    pytest rewrites the asserts of every module in a plugin's distribution, so all of
    ``suitefit.*``, and keeps the rewritten code in a cache of its own, which installing the
    package does not write. In a fresh CI container, or wherever bytecode is not written
    (PYTHONDONTWRITEBYTECODE, a read-only site-packages), every measured process then parsed,
    rewrote and compiled each suitefit module it imported: ~90 ms of a serial run here, ~250
    ms of a two-worker `suitefit run` (benchmarks/README.md, bench_overhead's twentieth
    round). suitefit's asserts are its own invariants, not tests; their messages need no
    rewriting. Placed first in ``sys.meta_path`` while a measured session is configured and
    run, for ``suitefit.*`` names only.
    """

    def find_spec(self, name: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if path is None or not name.startswith("suitefit."):
            return None
        return PathFinder.find_spec(name, path)
