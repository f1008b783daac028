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

from suitefit.config import Config


def uncached_test_files(cfg: Config, args: Sequence[str] = ()) -> tuple[int, int] | None:
    """(test files without fresh assertion-rewritten bytecode, test files) of those the
    pytest arguments ``args`` select by path (all of the suite's where they name none);
    None where that cannot tell: bytecode never written here (PYTHONDONTWRITEBYTECODE:
    every run compiles), a pytest that names its cache otherwise, or no test files. The
    cheap refusals come before the walk of the tree. The selection matters where the suite
    is a part of a larger tree: scipy's installed package holds 541 test files, and a
    profile of four of its subpackages (92 files) decided from all of them."""
    if sys.dont_write_bytecode:
        return None
    try:  # pytest's own names for it (8.0 to 9.2 alike), not a copy of them
        from _pytest.assertion.rewrite import PYC_TAIL, get_cache_dir
    except ImportError:
        return None
    from suitefit.costs import discover_test_files
    from suitefit.selection import files_selected

    files = discover_test_files(cfg)
    keep = files_selected(list(args), Path.cwd(), cfg.root)
    if keep is not None:
        files = [f for f in files if keep(f)]
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
