"""The session's handle on its sampler process, and one-off samples of a process tree.

Sampling runs in a separate process (``watcher.py``), never as a thread in a process
that runs tests: a thread there takes the GIL between a test's bytecodes and changes
``sys.getrefcount`` of shared small objects. ``SamplerProcess`` starts it, hands it the
FIFO the workers write to, and stops it at the session's end, getting back the run's
peaks. Only under xdist, whose controller runs no tests, does it also stream every
sample back to callbacks (``subscribe``) on a reader thread there: the scheduler's
live memory, the journal, the heartbeat and the progress line. Without xdist,
``last`` reads the newest sample from a shared page the sampler process rewrites.
"""

from __future__ import annotations

import contextlib
import marshal
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from suitefit import timing
from suitefit.measure import page, proctree, wire
from suitefit.measure.page import PAGE

READER_THREAD = "suitefit-sampler-reader"  # the one suitefit thread, in an xdist controller only
# How the sampler process starts, on every measured run: ``-S``, without ``site`` (its
# .pth files, setuptools' shim among them, are ~4 ms of CPU), finding suitefit and what else
# this process can import through this process's path, after its own standard library;
# ``-c``, not ``-m suitefit.measure.watcher``, which would import runpy and importlib's
# utilities first (~4 ms). It exits at once once its summary is out: everything is written
# and closed by then, and the session waits for its exit (an interpreter's own teardown is
# ~5 ms of that wait).
WATCHER_PATH = ("import marshal, os, sys; "
                "sys.path += [p for p in marshal.loads(bytes.fromhex(sys.argv[1])) if p not in sys.path]; ")
WATCHER_MAIN = ("from suitefit.measure.watcher import main; rc = main(sys.argv[2:]); "
                "sys.stderr.flush(); os._exit(rc)")


# what the session writes to the sampler process's stdin to end it: an EOF without it says
# the session's process died (``watcher.Watcher.ended_line``)
END = b"q"

_NOT_OURS: list[Any] = []  # pipe ends whose descriptor was closed under us: never closed again


def _identity(fd: int) -> tuple[int, int] | None:
    """What ``fd`` is (device, inode), or None if it is open no longer."""
    try:
        st = os.fstat(fd)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


# Linux takes no argument longer than 128 KiB (MAX_ARG_STRLEN): a longer path is cut to
# what the sampler process imports from outside its standard library
MAX_PATH_ARG = 64 * 1024


def watcher_argv(cfg: Mapping[str, Any], main: str = WATCHER_MAIN) -> list[str]:
    """The sampler process's command line for ``cfg`` (``main``: what it runs, for tests)."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # suitefit's parent
    path = [here, *(p for p in dict.fromkeys(sys.path) if p and p != here)]
    arg = marshal.dumps(path).hex()
    if len(arg) > MAX_PATH_ARG:
        import importlib.util

        spec = importlib.util.find_spec("psutil")  # the tree reader's fallback where /proc lacks children
        outside = os.path.dirname(os.path.dirname(spec.origin)) if spec is not None and spec.origin else None
        arg = marshal.dumps([here, outside] if outside and outside != here else [here]).hex()
    return [sys.executable, "-S", "-c", WATCHER_PATH + main, arg, wire.encode(dict(cfg))]


@dataclass(frozen=True)
class Sample:
    """One reading of the run's tree, as the sampler process streamed it."""

    t: float  # monotonic
    wall: float  # epoch
    rss_mb: float  # summed RSS of the tree
    root_mb: float  # RSS of the root process alone
    pss_mb: float | None  # summed PSS, only on some samples
    procs: int
    pids: tuple[int, ...]
    workers: dict[str, float] = field(default_factory=dict, compare=False)  # worker -> its tree's RSS
    # worker -> the processes under it (a dead worker's children are reaped by the controller)
    kids: dict[str, tuple[int, ...]] = field(default_factory=dict, compare=False)


Callback = Callable[[Sample], None]


def take(root: int, *, with_pss: bool = False, skip: tuple[int, ...] = (),
         workers: Mapping[str, int] | None = None) -> Sample:
    """One sample read here and now; with ``workers`` (name -> pid), each one's tree too."""
    parents = proctree.tree_parents(root, skip=skip)
    pids = list(parents)
    sizes = [proctree.rss_mb(p) for p in pids]
    trees = proctree.worker_trees(parents, dict(zip(pids, sizes, strict=True)), workers.items()) if workers else {}
    pss: float | None = None
    if with_pss:
        vals = [proctree.pss_mb(p) for p in pids]
        known = [v for v in vals if v is not None]
        pss = sum(known) if known else None
    return Sample(
        t=timing.monotonic(),
        wall=timing.wall(),
        rss_mb=sum(sizes),
        root_mb=sizes[0] if sizes else 0.0,
        pss_mb=pss,
        procs=sum(1 for s in sizes if s > 0),
        pids=tuple(pids),
        workers={name: tree[0] for name, tree in trees.items()},
        kids={name: tuple(tree[2]) for name, tree in trees.items()},
    )


@dataclass(frozen=True)
class RunPeaks:
    """What the sampler process saw over the whole run."""

    peak_rss_mb: float = 0.0
    peak_pss_mb: float | None = None
    peak_procs: int = 0
    secs_above: float = 0.0
    samples: int = 0
    cpu_s: float | None = None  # the sampler process's own CPU time
    rss_mb: float | None = None  # the sampler process's own peak RSS (it leaves itself out of the tree)
    pss_reads: int = 0
    # (RSS, PSS) of the read at (within 5% of) the highest RSS the samples saw, if one was
    pss_at_peak: tuple[float, float] | None = None


# The share of the sampler's time that PSS reads may take. smaps_rollup walks a process's
# page tables: ~10 ms for a 550 MiB tree, which at one read a second (1%) was two thirds of
# the sampler's CPU in a 50,000-test run (benchmarks/README.md, "fifth round"). PSS is the
# secondary figure (RSS is what a runner's limit counts): on a big tree it is read every few
# seconds, on a small one still every pss_every samples; and at the tree's highs, with a read
# of the same budget kept in reserve for them (``pssgate.PssGate``).
PSS_BUDGET = 0.002


def _pair(v: Any) -> tuple[float, float] | None:
    return (float(v[0]), float(v[1])) if isinstance(v, (list, tuple)) and len(v) == 2 else None


class SamplerProcess:
    """Starts, feeds and stops the run's sampler process; ``root`` is this process."""

    def __init__(self, root: int, *, history: str, run_id: int, started_wall: float,
                 threshold_mb: float | None, interval: float = 0.1, stream: bool = False,
                 pss_every: int = 10, pss_budget: float = PSS_BUDGET) -> None:
        self.root = root
        self.interval = interval
        self.stream = stream
        self._dir = tempfile.mkdtemp(prefix="suitefit-")
        self.channel_path = os.path.join(self._dir, "files.fifo")
        self._page_path = os.path.join(self._dir, "last.page")
        self._cfg: dict[str, Any] = {
            "root": root, "parent": os.getpid(), "run_id": run_id, "history": history, "started_wall": started_wall,
            "threshold_mb": threshold_mb, "interval": interval, "stream": stream,
            "pss_every": pss_every, "pss_budget": pss_budget, "fifo": self.channel_path,
            "page": self._page_path,
        }
        self._callbacks: list[Callback] = []
        self._proc: subprocess.Popen[bytes] | None = None
        self._stdin_id: tuple[int, int] | None = None  # its stdin pipe's (device, inode)
        self._reader: threading.Thread | None = None
        self._page: mmap.mmap | None = None
        self._last: Sample | None = None
        self.peaks = RunPeaks()
        self.count = 0
        self.measure_memory = True  # False: /proc is not readable; the sampler only keeps files
        self.failed: str | None = None  # why the sampler process could not start
        # how it ended without its summary (a crash, a signal): None while it runs or said it
        self.ended_early: str | None = None
        self._summarized = False

    # -- what the session configures before start ----------------------------------------------

    def subscribe(self, cb: Callback) -> None:
        """Called with every sample, on the reader thread (xdist's controller only)."""
        self._callbacks.append(cb)

    def keep_journal(self, path: str, budget_mb: float | None) -> None:
        """One process runs the tests: the sampler process keeps the journal and the heartbeat."""
        self._cfg["journal"] = path
        self._cfg["budget_mb"] = budget_mb

    # -- running ---------------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self, log: IO[str] | None = None) -> SamplerProcess:
        with open(self._page_path, "wb") as f:
            f.write(b"\0" * PAGE.size)
        # Mapped before the sampler process exists: it removes its files when it ends (this
        # process may be killed and never get to), so nothing here opens them after it starts.
        fd = os.open(self._page_path, os.O_RDONLY)
        try:
            self._page = mmap.mmap(fd, PAGE.size, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        os.mkfifo(self.channel_path, 0o600)
        # Open the read end here, before any worker can try to write: a FIFO without a
        # reader refuses writers, so there is no start-up race with the sampler process.
        rfd = os.open(self.channel_path, os.O_RDONLY | os.O_NONBLOCK)
        self._cfg["fifo_fd"] = rfd
        self._cfg["proc"] = self.measure_memory
        err: Any = log if log is not None else None
        try:
            self._proc = subprocess.Popen(
                watcher_argv(self._cfg),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, pass_fds=(rfd,),
                close_fds=True,
            )
        except OSError as e:  # no process to spare, an interpreter gone: the run goes on unmeasured
            self.failed = f"{e.strerror or e}" + (f": {e.filename}" if e.filename else "")
        finally:
            os.close(rfd)  # without the sampler process, the workers' FIFO has no reader: they stay silent
        if self._proc is not None and self._proc.stdin is not None:
            self._stdin_id = _identity(self._proc.stdin.fileno())
        if self.stream and self._proc is not None:
            self._reader = threading.Thread(target=self._read_stream, name=READER_THREAD, daemon=True)
            self._reader.start()
        return self

    def _read_stream(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for raw in self._proc.stdout:
            try:
                d = wire.decode(raw)
            except ValueError:
                continue
            if d.get("summary"):
                self._set_peaks(d)
                continue
            s = Sample(d["t"], d["wall"], d["rss"], d["root"], d["pss"], d["procs"], (), d.get("workers", {}),
                       {name: tuple(pids) for name, pids in d.get("kids", {}).items()})
            self._last = s
            self.count += 1
            for cb in self._callbacks:
                try:
                    cb(s)
                except Exception:  # a broken consumer must not stop the others
                    continue

    def _set_peaks(self, d: dict[str, Any]) -> None:
        self._summarized = True
        self.peaks = RunPeaks(d.get("peak_rss") or 0.0, d.get("peak_pss"), int(d.get("peak_procs") or 0),
                              float(d.get("secs_above") or 0.0), int(d.get("samples") or 0), d.get("cpu_s"),
                              d.get("rss_mb"), int(d.get("pss_reads") or 0),
                              _pair(d.get("pss_at_peak")))

    @property
    def last(self) -> Sample | None:
        if self.stream or self._page is None:
            return self._last
        newest = page.read(self._page)
        if newest is not None:
            self._last = Sample(*newest, ())
        return self._last

    @last.setter
    def last(self, s: Sample | None) -> None:
        self._last = s

    def sample_now(self, workers: Mapping[str, int] | None = None) -> Sample:
        """One sample read here and now (the scheduler's admission needs it fresh); with
        ``workers`` (name -> pid), each one's tree as the sampler process streams it."""
        skip = (self.pid,) if self.pid is not None else ()
        s = take(self.root, skip=skip, workers=workers)
        self._last = s
        return s

    def stop(self) -> RunPeaks:
        """End the sampler process (it writes what it holds first) and return the run's peaks.
        Only from the process that started it: a child forked from that one (a test's) that
        unwinds through the session's end must not end the parent's sampler."""
        if os.getpid() != self._cfg.get("parent", os.getpid()):
            return self.peaks
        p, self._proc = self._proc, None
        if p is not None:
            stdin, p.stdin = p.stdin, None
            if stdin is not None and _identity(stdin.fileno()) != self._stdin_id:
                # closed under us (a test closing inherited descriptors), its number perhaps
                # another file's now: neither written nor closed, ever (kept from the collector)
                _NOT_OURS.append(stdin)
            elif stdin is not None:  # the sampler's signal to finish, then EOF
                with contextlib.suppress(OSError, ValueError):
                    stdin.write(END)
                    stdin.flush()
                with contextlib.suppress(OSError, ValueError):
                    stdin.close()
            if self._reader is not None:
                self._reader.join(timeout=30)
                if self._reader.is_alive():
                    p.kill()
            else:
                try:
                    out, _ = p.communicate(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    out, _ = p.communicate()
                for raw in out.splitlines():
                    with contextlib.suppress(ValueError):
                        d = wire.decode(raw)
                        if d.get("summary"):
                            self._set_peaks(d)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=30)
            if not self._summarized:
                from suitefit.exits import describe_exit

                rc = p.returncode
                self.ended_early = ("ended early, killed by " if rc is not None and rc < 0
                                    else "ended early, ") + describe_exit(rc)
            for pipe in (p.stdout,):  # the streaming reader's pipe is ours to close
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
        if self._page is not None:
            self._page.close()
            self._page = None
        shutil.rmtree(self._dir, ignore_errors=True)
        return self.peaks
