"""Whether a checkout's test files have pytest's rewritten bytecode cached.

A run that finds none compiles every test module, and what they import, while it
collects: networkx's suite collected in 13.0 s on a fresh copy against 1.9 s after. The
first plan after a profile has that profile's start-up alone to go by, so `suitefit
profile` compiles first, unmeasured, when the cache is cold (``cli/profile.py``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path


def cached_share(root: Path, files: Sequence[str]) -> float | None:
    """The share of ``files`` (relative to ``root``) whose assertion-rewritten bytecode is
    cached and not older than the file; None where that cannot tell: no files, bytecode
    never written here (PYTHONDONTWRITEBYTECODE: every run compiles), or a pytest that
    names its cache otherwise."""
    if not files or sys.dont_write_bytecode:
        return None
    try:  # pytest's own names for it (8.0 to 9.2 alike), not a copy of them
        from _pytest.assertion.rewrite import PYC_TAIL, get_cache_dir
    except ImportError:
        return None
    cached = 0
    for rel in files:
        src = root / rel
        try:
            fresh = (get_cache_dir(src) / (src.name[:-3] + PYC_TAIL)).stat().st_mtime >= src.stat().st_mtime
        except OSError:
            fresh = False
        cached += fresh
    return cached / len(files)
