"""An independent reference sampler: peak summed RSS of a command's whole process tree.

The benchmarks check suitefit's own numbers against this, so it shares nothing
with suitefit (no import of it, and a different way to find the tree): every
poll that follows the creation of a process anywhere on the machine (the last PID in
``/proc/loadavg`` moved) reads ``/proc/*/stat`` for the whole machine, builds the parent
map, and walks it from the root; the others reuse the tree's PIDs (so does a rescan at
least every ``RESCAN_EVERY`` polls, for a process that left the tree without a fork).
RSS comes from ``/proc/PID/statm``. suitefit instead follows
``/proc/PID/task/TID/children`` down from its root.

Scanning the machine at every poll cost this sampler 6.6% of a CPU here (0.66 s over a
10 s ``sleep``, 66 processes on the machine): on 2 CPUs with two busy workers that is CPU
taken from the measured run, which a CI runner does not have.

    python benchmarks/tree_sampler.py [--interval 0.05] [-o OUT.json] -- CMD ARGS...
    python benchmarks/tree_sampler.py --pid PID

prints one JSON object: ``peak_rss_mb`` (peak of the summed RSS, MiB),
``peak_procs``, ``wall_s``, ``cpu_s`` (user+system of the root and the
descendants it waited for), ``exit_code`` (negative: killed by that signal;
null when attached to a process that is not our child), ``samples``.
Without ``-o`` the command's stdout goes to stderr, so stdout holds only the JSON.
The CLI exits with the command's status (128+N for signal N), 2 on bad input.

From Python (the later benchmarks do this)::

    from tree_sampler import measure
    r = measure(["python", "-m", "pytest", "-q"], cwd=suite, env=env)
    r.peak_rss_mb, r.peak_procs, r.wall_s, r.exit_code
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import IO, Any

PAGE_MB = os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)
DEFAULT_INTERVAL = 0.05
RESCAN_EVERY = 10


@dataclass
class Result:
    """What one measured command cost."""

    cmd: list[str]
    pid: int
    peak_rss_mb: float
    peak_procs: int
    wall_s: float
    exit_code: int | None
    cpu_s: float | None
    samples: int
    interval: float
    timed_out: bool = False
    # (seconds since start, summed RSS MiB, processes), only when asked for
    timeline: list[tuple[float, float, int]] = field(default_factory=list)

    def to_json(self, with_timeline: bool = False) -> dict[str, Any]:
        d = asdict(self)
        if not with_timeline:
            d.pop("timeline")
        return d


def parent_map() -> dict[int, list[int]]:
    """ppid -> child pids for every process on the machine, from ``/proc/*/stat``."""
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:  # gone between listdir and open
            continue
        # comm (field 2) may hold spaces and parentheses: split after the last ')'.
        rest = data[data.rfind(b")") + 2 :].split()
        if len(rest) < 2:
            continue
        kids.setdefault(int(rest[1]), []).append(int(name))
    return kids


def tree_pids(root: int, kids: Mapping[int, list[int]] | None = None) -> list[int]:
    """``root`` and all its descendants (root first) per a parent map."""
    kids = parent_map() if kids is None else kids
    out = [root]
    i = 0
    while i < len(out):
        out.extend(kids.get(out[i], ()))
        i += 1
    return out


def rss_mb(pid: int) -> float:
    """Resident set size of one process in MiB (0 once it is gone or a zombie)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * PAGE_MB
    except (OSError, IndexError, ValueError):
        return 0.0


def last_pid() -> int | None:
    """The PID most recently handed out on this machine (its PID namespace), or None where
    ``/proc/loadavg`` does not say: it moves with every process created."""
    try:
        with open("/proc/loadavg", "rb") as f:
            return int(f.read().split()[4])
    except (OSError, IndexError, ValueError):
        return None


def sample(root: int) -> tuple[float, int]:
    """(summed RSS MiB, live process count) of ``root``'s tree right now."""
    sizes = [rss_mb(p) for p in tree_pids(root)]
    return sum(sizes), sum(1 for s in sizes if s > 0)


class _Poller:
    """Keeps the running peaks; one ``poll`` per interval."""

    def __init__(self, root: int, keep_timeline: bool) -> None:
        self.root = root
        self.keep = keep_timeline
        self.t0 = time.perf_counter()
        self.peak_rss = 0.0
        self.peak_procs = 0
        self.n = 0
        self.timeline: list[tuple[float, float, int]] = []
        self.last_pids: list[int] = [root]
        self._seen_pid: int | None = None
        self._since_scan = RESCAN_EVERY
        self.scans = 0

    def _pids(self) -> list[int]:
        """The tree's PIDs: scanned again when a process was created since the last scan (a
        new one may be in the tree, or reuse a PID that was), or the scan is old."""
        seen = last_pid()
        if seen is None or seen != self._seen_pid or self._since_scan >= RESCAN_EVERY:
            self._seen_pid, self._since_scan = seen, 0
            self.scans += 1
            self.last_pids = tree_pids(self.root)
        self._since_scan += 1
        return self.last_pids

    def poll(self) -> None:
        pids = self._pids()
        sizes = [rss_mb(p) for p in pids]
        rss, procs = sum(sizes), sum(1 for s in sizes if s > 0)
        self.n += 1
        self.peak_rss = max(self.peak_rss, rss)
        self.peak_procs = max(self.peak_procs, procs)
        if self.keep:
            self.timeline.append((round(time.perf_counter() - self.t0, 4), round(rss, 2), procs))


def _sleep_until(next_t: float) -> float:
    """Sleep to the next tick; if we fell behind, start a fresh schedule (no bursts)."""
    now = time.perf_counter()
    if next_t > now:
        time.sleep(next_t - now)
        return next_t
    return now


def measure(
    cmd: Sequence[str],
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    interval: float = DEFAULT_INTERVAL,
    stdout: int | IO[Any] | None = None,
    stderr: int | IO[Any] | None = None,
    timeout: float | None = None,
    keep_timeline: bool = False,
    kill_above_mb: float | None = None,
) -> Result:
    """Start ``cmd`` and sample its tree every ``interval`` s until it exits.

    ``stdout``/``stderr`` are passed to ``subprocess.Popen`` (e.g. ``subprocess.DEVNULL``).
    On ``timeout`` the whole tree is killed and ``timed_out`` is set. With
    ``kill_above_mb`` the tree is SIGKILLed the first time its summed RSS exceeds it, as a
    CI runner's memory limit would (the exit code is then -9).
    """
    t0 = time.perf_counter()
    proc = subprocess.Popen(list(cmd), cwd=cwd, env=dict(env) if env is not None else None,
                            stdout=stdout, stderr=stderr)
    poller = _Poller(proc.pid, keep_timeline)
    poller.t0 = t0
    timed_out = False
    status: int | None = None
    rusage = None
    next_t = t0
    try:
        while True:
            poller.poll()
            if kill_above_mb is not None and poller.peak_rss > kill_above_mb:
                _kill(tree_pids(proc.pid))
            # wait4 (not Popen.poll) so the rusage of the root and its reaped descendants comes back.
            pid, st, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid == proc.pid:
                status, rusage = st, ru
                break
            if timeout is not None and time.perf_counter() - t0 > timeout:
                timed_out = True
                _kill(tree_pids(proc.pid))
                _, status, rusage = os.wait4(proc.pid, 0)
                break
            next_t = _sleep_until(next_t + interval)
    except BaseException:  # e.g. KeyboardInterrupt: don't leave the tree running
        _kill(tree_pids(proc.pid))
        proc.wait()
        raise
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code  # we reaped it ourselves; keep Popen from waiting again
    return Result(
        cmd=list(cmd), pid=proc.pid, peak_rss_mb=round(poller.peak_rss, 2),
        peak_procs=poller.peak_procs, wall_s=round(wall, 4), exit_code=code,
        cpu_s=round(rusage.ru_utime + rusage.ru_stime, 4) if rusage else None,
        samples=poller.n, interval=interval, timed_out=timed_out, timeline=poller.timeline,
    )


def attach(pid: int, *, interval: float = DEFAULT_INTERVAL, timeout: float | None = None,
           keep_timeline: bool = False) -> Result:
    """Sample an already running process's tree until it exits (exit code unknown: None)."""
    if not os.path.exists(f"/proc/{pid}/stat"):
        raise ProcessLookupError(f"no process {pid}")
    poller = _Poller(pid, keep_timeline)
    t0 = poller.t0
    next_t = t0
    timed_out = False
    while _alive(pid):
        poller.poll()
        if timeout is not None and time.perf_counter() - t0 > timeout:
            timed_out = True
            break
        next_t = _sleep_until(next_t + interval)
    return Result(
        cmd=_cmdline(pid), pid=pid, peak_rss_mb=round(poller.peak_rss, 2),
        peak_procs=poller.peak_procs, wall_s=round(time.perf_counter() - t0, 4), exit_code=None,
        cpu_s=None, samples=poller.n, interval=interval, timed_out=timed_out,
        timeline=poller.timeline,
    )


def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return False
    return data[data.rfind(b")") + 2 :][:1] != b"Z"


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def _kill(pids: Sequence[int]) -> None:
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            continue


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="tree_sampler.py",
        description="Peak summed RSS, process count, wall and CPU time of a command's process tree.",
        usage="%(prog)s [--interval S] [-o FILE] [--timeline] (--pid PID | -- CMD ARGS...)",
    )
    ap.add_argument("--interval", type=float, default=DEFAULT_INTERVAL, help="seconds between polls")
    ap.add_argument("--pid", type=int, default=None, help="attach to this running process instead")
    ap.add_argument("-o", "--output", default=None, help="write the JSON here (the command keeps stdout)")
    ap.add_argument("--timeline", action="store_true", help="include every sample in the JSON")
    ap.add_argument("--timeout", type=float, default=None, help="kill the tree after this many seconds")
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="the command (after --)")
    a = ap.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if a.interval <= 0:
        ap.exit(2, "tree_sampler.py: error: --interval must be > 0\n")
    if (a.pid is None) == (not cmd):
        ap.exit(2, "tree_sampler.py: error: give either --pid PID or -- CMD ARGS...\n")
    try:
        if a.pid is not None:
            r = attach(a.pid, interval=a.interval, timeout=a.timeout, keep_timeline=a.timeline)
        else:
            out = None if a.output else sys.stderr
            r = measure(cmd, interval=a.interval, stdout=out, timeout=a.timeout,
                        keep_timeline=a.timeline)
    except (OSError, ProcessLookupError) as e:
        ap.exit(2, f"tree_sampler.py: error: {e}\n")
    text = json.dumps(r.to_json(with_timeline=a.timeline), indent=2)
    if a.output:
        with open(a.output, "w") as f:
            f.write(text + "\n")
    else:
        print(text, flush=True)
    if r.exit_code is None:
        return 0
    return 128 - r.exit_code if r.exit_code < 0 else r.exit_code


if __name__ == "__main__":
    sys.exit(main())
