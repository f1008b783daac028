"""Leftover processes: find what tests and fixtures started and left running, name it, end it.

An orphaned helper (a distributed rank, a server a fixture forgot) can keep a CI
job from exiting for minutes. The session's first process becomes a child
subreaper, so orphans re-parent to it instead of to init and stay findable.

Some helpers end with the process that started them and are not leftovers:
multiprocessing's resource tracker and forkserver (started by any spawn or
forkserver pool) read a pipe only their parent (and its pool workers) hold, exit at
its end, and the tracker ignores SIGTERM by design; a pool's daemonic workers, which
multiprocessing terminates at its parent's exit (``pool_workers``). They are neither
named nor waited for: waiting for them cost every pool-using run the whole grace period.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from suitefit import timing
from suitefit.measure import proctree

if TYPE_CHECKING:
    import psutil

    from suitefit.history import History

# psutil is imported where a leftover is found: every measured run ends by looking, few find one.

PR_SET_CHILD_SUBREAPER = 36

# `python -c "from multiprocessing.resource_tracker import main;main(FD)"`, the forkserver's
# `from multiprocessing.forkserver import main; main(...)`, Python < 3.8's semaphore tracker,
# and loky's (joblib's) copy of the resource tracker: each exits when its pipe closes.
_ENDS_WITH_PARENT = re.compile(
    r"from (?:multiprocessing|joblib\.externals\.loky\.backend|loky\.backend)\."
    r"(?:resource_tracker|semaphore_tracker|forkserver) import main")


def ends_with_parent(cmdline: str) -> bool:
    """Is this a helper that exits by itself once the process that started it exits?"""
    return bool(_ENDS_WITH_PARENT.search(cmdline))


def pool_workers() -> set[int]:
    """This process's pool workers: its daemonic multiprocessing children (a ``Pool`` a test
    keeps in a module global), which multiprocessing terminates at this process's exit, and
    loky's (joblib's ``n_jobs``, scikit-learn's), which loky shuts down then. They end with
    this process, so they are no leftovers. Ending a ``Pool``'s worker first could leave its
    queue lock taken, and that exit then waited forever (a suite that passed under pytest hung
    under suitefit); waiting for loky's cost every run the whole grace period. Any other
    non-daemonic child is one Python joins at exit: a leftover."""
    mp = sys.modules.get("multiprocessing")  # not imported: none started
    if mp is None:
        return set()
    try:
        return {p.pid for p in mp.active_children()
                if p.pid is not None and (p.daemon or type(p).__name__ == "LokyProcess")}
    except Exception:  # a broken third-party context must not stop the run's end
        return set()


def become_subreaper() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


@dataclass(frozen=True)
class Leftover:
    """A process a run left behind, as found when the run ended."""

    pid: int
    cmdline: str
    created: float  # epoch
    started_by: str  # a test id, "fixture NAME", or "unknown"


def describe(pids: Iterable[int], started_by: dict[int, str] | None = None) -> list[Leftover]:
    """The leftovers among ``pids``: zombies and helpers that end with their parent are not."""
    import psutil

    out = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            parts = p.cmdline()
            if not parts:
                # exiting: its memory is already gone (and its command line with it) and it is
                # not a zombie yet. A resource tracker ending with its worker was named here,
                # by its bare name, as "started by unknown"
                continue
            cmd = " ".join(parts)
            if ends_with_parent(cmd):
                continue
            out.append(Leftover(pid, cmd, p.create_time(), (started_by or {}).get(pid, "unknown")))
        except psutil.Error:
            continue
    return out


def leftovers_under(root: int, exclude: Iterable[int] = ()) -> list[int]:
    skip = {root, *exclude}
    return [p for p in proctree.tree(root) if p not in skip]


def reap(pids: list[int], grace_s: float, term_wait_s: float = 2.0) -> dict[int, str]:
    """Wait up to ``grace_s`` for ``pids`` to exit, then SIGTERM, then SIGKILL. Returns pid -> fate."""
    import psutil

    fate: dict[int, str] = {}
    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.Error:
            fate[pid] = "exited"
    gone, alive = psutil.wait_procs(procs, timeout=max(0.0, grace_s))
    for p in gone:
        fate[p.pid] = "exited by itself"
    for p in alive:
        _signal_group_or_proc(p, signal.SIGTERM)
    gone, alive = psutil.wait_procs(alive, timeout=term_wait_s)
    for p in gone:
        fate[p.pid] = f"terminated after the {grace_s:g} s grace period"
    for p in alive:
        _signal_group_or_proc(p, signal.SIGKILL)
        fate[p.pid] = f"killed after the {grace_s:g} s grace period (ignored SIGTERM)"
    psutil.wait_procs(alive, timeout=2)
    return fate


def _signal_group_or_proc(p: psutil.Process, sig: int) -> None:
    import psutil

    with contextlib.suppress(psutil.Error):
        p.send_signal(sig)


def attribute_by_time(created: float, windows: Iterable[tuple[str, float, float]]) -> str:
    """The test whose run window [start, end] holds ``created`` (latest start wins)."""
    best = ("unknown", -1.0)
    for nodeid, start, end in windows:
        if start - 0.05 <= created <= end + 0.05 and start > best[1]:
            best = (nodeid, start)
    return best[0]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


class SessionReaper:
    """The controller's guard on the exit, for every measured session (``run``, ``profile``,
    ``pytest --suitefit``): it becomes the subreaper, and at the end names each process left
    in its tree (with the test that started it) and ends it after the grace period, so that
    nothing a test left behind holds the command's exit.
    """

    def __init__(self, history: History, run_id: int, say: Callable[[str], None], grace_s: float) -> None:
        self.history = history
        self.run_id = run_id
        self.say = say
        self.grace_s = grace_s
        self.subreaper = become_subreaper()

    def finish(self, workers: Iterable[int] = ()) -> None:
        """Reap what is left under this process, except live ``workers`` and their trees
        (each worker reaps its own descendants when it finishes)."""
        keep: set[int] = pool_workers()
        for pid in workers:
            keep.add(pid)
            if pid_alive(pid):
                keep.update(proctree.tree(pid))
        self.reap(leftovers_under(os.getpid(), exclude=keep), origin="session")

    def reap(self, pids: list[int], origin: str) -> None:
        """Name ``pids`` (attributed by the test running when each started), end them, record it."""
        if not pids:
            return
        found = describe(pids)
        if not found:
            return
        windows = [(nodeid, start, start + wall) for nodeid, start, wall in self.history.execute(
            "SELECT nodeid, started, wall_s FROM tests WHERE run_id = ?", [self.run_id])]
        found = [Leftover(x.pid, x.cmdline, x.created, attribute_by_time(x.created, windows)) for x in found]
        for x in found:
            self.say(f"suitefit: leftover process {x.pid} ({x.cmdline[:120]}) started by {x.started_by}: "
                     f"ending it after a {self.grace_s:g} s grace period")
        fate = reap([x.pid for x in found], self.grace_s)
        for x in found:
            self.history.add_event(self.run_id, timing.wall(), "leftover", worker=origin, nodeid=x.started_by,
                                   pid=x.pid, cmdline=x.cmdline[:300], fate=fate.get(x.pid, "?"))
