"""What the session and its sampler process say to each other: its config on the command
line, its samples and summary on its stdout, one hex-encoded ``marshal`` record a line.

Not JSON: both ends are the same interpreter (``sys.executable``), so its own format,
built in, is enough, and json's import (``re``, ``enum``: ~4 ms of CPU) would be paid by
the sampler process of every measured run. Values are plain: numbers, strings, None,
lists and dicts of those.
"""

from __future__ import annotations

import marshal

TYPE_CHECKING = False  # typing's, without importing typing (the sampler process starts lean)
if TYPE_CHECKING:
    from typing import Any


def encode(record: dict[str, Any]) -> str:
    """One record as a line's worth of text (no newline in it)."""
    return marshal.dumps(record).hex()


def decode(line: str | bytes) -> dict[str, Any]:
    """The record ``encode`` made; ValueError if the line is not one."""
    try:
        text = line.decode() if isinstance(line, bytes) else line
        record = marshal.loads(bytes.fromhex(text.strip()))
    except (EOFError, TypeError, UnicodeDecodeError) as e:
        raise ValueError(f"not a sampler record: {e}") from None
    if not isinstance(record, dict):
        raise ValueError("not a sampler record")
    return record
