"""Where suitefit writes while pytest captures output."""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO


def original_stderr(config: Any) -> TextIO:
    """stderr as the user sees it, even while pytest captures fd 2 (single-process runs).

    One stream per session, closed with it: every caller writes to the same one (a new
    one each time left files for the garbage collector, which pytest 8.0 reports as
    ResourceWarnings in the user's output)."""
    import pytest

    key = _stash_key(pytest)
    stream = config.stash.get(key, None)
    if stream is not None:
        return stream
    capman = config.pluginmanager.getplugin("capturemanager")
    try:
        fd = capman._global_capturing.err.targetfd_save
        stream = os.fdopen(os.dup(fd), "w", buffering=1)
    except Exception:
        return sys.__stderr__ or sys.stderr
    config.stash[key] = stream
    config.add_cleanup(stream.close)
    return stream


_KEY: Any = None


def _stash_key(pytest: Any) -> Any:
    global _KEY
    if _KEY is None:
        _KEY = pytest.StashKey()
    return _KEY
