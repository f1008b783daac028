"""The shared page: the newest sample, where a one-process run's side can read it.

Without xdist the session's process runs the tests, so it gets no thread to receive
samples on; the sampler process (``watcher.py``) rewrites this page after every sample
instead, and the session reads it for its progress line (``sampler.SamplerProcess.last``).

A seqlock: the sequence number is odd while a write is under way; a reader that
sees it odd, or changed by the time it has read the rest, reads again.
Layout: seq, t (monotonic), wall (epoch), rss, root, pss (NaN: not read), procs.
Its own module, so that neither side imports the other's.
"""

from __future__ import annotations

import math
import struct

TYPE_CHECKING = False  # typing's, without importing typing: the sampler process starts lean
if TYPE_CHECKING:
    from mmap import mmap

PAGE = struct.Struct("<Qdddddq")
_SEQ = struct.Struct("<Q")


def write(buf: mmap, t: float, wall: float, rss: float, root: float, pss: float | None, procs: int) -> None:
    """Publish one sample (the sampler process, its only writer)."""
    seq = _SEQ.unpack_from(buf, 0)[0]
    _SEQ.pack_into(buf, 0, seq + 1)  # odd: a reader retries
    PAGE.pack_into(buf, 0, seq + 1, t, wall, rss, root, math.nan if pss is None else pss, procs)
    _SEQ.pack_into(buf, 0, seq + 2)


def read(buf: mmap, tries: int = 5) -> tuple[float, float, float, float, float | None, int] | None:
    """The newest sample: (t, wall, rss, root, pss or None, procs); None before the first
    (or without a consistent read in ``tries``)."""
    for _ in range(tries):
        seq, t, wall, rss, root, pss, procs = PAGE.unpack_from(buf, 0)
        if seq == 0:
            return None
        if seq % 2:
            continue
        if _SEQ.unpack_from(buf, 0)[0] == seq:
            return t, wall, rss, root, None if math.isnan(pss) else pss, int(procs)
    return None
