"""Where suitefit writes while pytest captures output."""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO


def original_stderr(config: Any) -> TextIO:
    """stderr as the user sees it, even while pytest captures fd 2 (single-process runs)."""
    capman = config.pluginmanager.getplugin("capturemanager")
    try:
        fd = capman._global_capturing.err.targetfd_save
        return os.fdopen(os.dup(fd), "w", buffering=1)
    except Exception:
        return sys.__stderr__ or sys.stderr
