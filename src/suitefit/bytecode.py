"""Whether a checkout's test files have pytest's rewritten bytecode cached.

A run that finds none compiles every test module, and what they import, while it
collects: networkx's suite collected in 13.0 s on a fresh copy against 1.9 s after. The
first plan after a profile has that profile's start-up alone to go by, so `suitefit
profile` compiles first, unmeasured, when the cache is cold (``cli/profile.py``).
"""

from __future__ import annotations

import sys

from suitefit.config import Config


def uncached_test_files(cfg: Config) -> tuple[int, int] | None:
    """(test files without fresh assertion-rewritten bytecode, test files) of the suite;
    None where that cannot tell: bytecode never written here (PYTHONDONTWRITEBYTECODE:
    every run compiles), a pytest that names its cache otherwise, or no test files. The
    cheap refusals come before the walk of the tree."""
    if sys.dont_write_bytecode:
        return None
    try:  # pytest's own names for it (8.0 to 9.2 alike), not a copy of them
        from _pytest.assertion.rewrite import PYC_TAIL, get_cache_dir
    except ImportError:
        return None
    from suitefit.costs import discover_test_files

    files = discover_test_files(cfg)
    if not files:
        return None
    missing = 0
    for rel in files:
        src = cfg.root / rel
        try:
            fresh = (get_cache_dir(src) / (src.name[:-3] + PYC_TAIL)).stat().st_mtime >= src.stat().st_mtime
        except OSError:
            fresh = False
        missing += not fresh
    return missing, len(files)
