"""How the test processes tell the sampler process which file each of them runs.

A named pipe (FIFO) per run: every process that runs tests writes one short line
when it starts, when a file starts, when the file ends and when it is done. One
``write`` of under ``PIPE_BUF`` bytes is atomic, so lines from several workers
never interleave, and a test process pays one system call per file: no thread,
no lock, no SQLite. The sampler process (``watcher.py``) reads the lines between
samples and attributes its samples of each worker's tree to the file in flight.

Lines are tab-separated; the first field says what happened:

    H  worker pid                        a test process is ready (its tree is watched)
    B  worker mono wall self_mb children_mb path
                                         a file begins; self_mb: the process's RSS just
                                         after its VmHWM was reset (-1: not readable);
                                         children_mb: its descendants' RSS then
    E  worker mono wall hwm_mb cpu_s tests
                                         the file ends; hwm_mb: the process's own exact
                                         peak since B (-1: clear_refs refused)
    T  worker wall nodeid                a test begins (only when the sampler keeps the journal)
    D  worker                            the process is done (its worker row is written)
"""

from __future__ import annotations

import errno
import fcntl
import os

PIPE_BUF = 4096  # POSIX minimum atomic pipe write; Linux's is this size too
MAX_PATH = 3000  # a path longer than this is cut so that the line stays atomic
F_SETPIPE_SZ = 1031


class Message:
    """One line: what happened (``kind``), which test process says so, and the rest.

    A plain class, not a dataclass: the sampler process imports this module, and its
    start-up is paid by every measured run.
    """

    __slots__ = ("fields", "kind", "worker")

    def __init__(self, kind: str, worker: str, fields: tuple[str, ...]) -> None:
        self.kind = kind
        self.worker = worker
        self.fields = fields

    def __repr__(self) -> str:
        return f"Message({self.kind!r}, {self.worker!r}, {self.fields!r})"


def encode(kind: str, worker: str, *fields: object) -> bytes:
    parts = [kind, worker, *(_field(f) for f in fields)]
    line = "\t".join(parts).encode("utf-8", "replace")
    if len(line) >= PIPE_BUF:
        line = line[: PIPE_BUF - 1]
    return line + b"\n"


def _field(v: object) -> str:
    if isinstance(v, float):
        return repr(v)
    s = str(v)
    if len(s) > MAX_PATH:
        s = s[:MAX_PATH]
    return s.replace("\t", " ").replace("\n", " ")


def decode(line: bytes) -> Message | None:
    parts = line.decode("utf-8", "replace").rstrip("\n").split("\t")
    if len(parts) < 2 or not parts[0]:
        return None
    return Message(parts[0], parts[1], tuple(parts[2:]))


class Sender:
    """The writing end, held by a test process; silent and inert once the reader is gone."""

    def __init__(self, path: str | None) -> None:
        self.fd: int | None = None
        if not path:
            return
        try:
            # Non-blocking open fails at once (ENXIO) instead of hanging when no reader
            # exists; the writes themselves block, so a busy sampler delays, never loses.
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
        self.fd = fd

    @property
    def connected(self) -> bool:
        return self.fd is not None

    def send(self, kind: str, worker: str, *fields: object) -> None:
        if self.fd is None:
            return
        try:
            os.write(self.fd, encode(kind, worker, *fields))
        except OSError as e:  # EPIPE: the sampler is gone; measurement stops, the run goes on
            if e.errno in (errno.EPIPE, errno.EBADF, errno.EINVAL):
                self.close()

    def close(self) -> None:
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None


class Receiver:
    """The reading end, held by the sampler process: non-blocking, whole lines only."""

    def __init__(self, read_fd: int, path: str) -> None:
        self.fd = read_fd
        os.set_blocking(read_fd, False)
        # Hold a writer of our own: with no writer left, a FIFO reads as EOF forever and
        # select() would spin between workers.
        self._keep = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            fcntl.fcntl(read_fd, F_SETPIPE_SZ, 1 << 20)  # room for bursts; 1 MiB is the default cap
        except OSError:
            pass
        self._partial = b""

    def read(self) -> list[Message]:
        chunks = []
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        if not chunks:
            return []
        buf = self._partial + b"".join(chunks)
        *lines, self._partial = buf.split(b"\n")
        out = []
        for ln in lines:
            m = decode(ln)
            if m is not None:
                out.append(m)
        return out

    def close(self) -> None:
        for fd in (self._keep, self.fd):
            try:
                os.close(fd)
            except OSError:
                pass
