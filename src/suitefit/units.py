"""Parsing and printing of sizes and durations as users write them."""

from __future__ import annotations

import re

from suitefit.errors import SuitefitError

_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)
_FACTORS = {
    "": 1 / (1024 * 1024), "b": 1 / (1024 * 1024),
    "k": 1 / 1024, "kb": 1 / 1024, "kib": 1 / 1024, "ki": 1 / 1024,
    "m": 1.0, "mb": 1.0, "mib": 1.0, "mi": 1.0,
    "g": 1024.0, "gb": 1024.0, "gib": 1024.0, "gi": 1024.0,
    "t": 1024.0 * 1024, "tb": 1024.0 * 1024, "tib": 1024.0 * 1024, "ti": 1024.0 * 1024,
}


def parse_size_mb(text: str | int | float, what: str = "size") -> float:
    """'6GiB' -> 6144.0 (MiB). Bare numbers are bytes when large, else MiB is ambiguous: require a unit."""
    if isinstance(text, (int, float)):
        return float(text)
    m = _SIZE.match(str(text))
    if not m or (m.group(2) is None):
        raise SuitefitError(f"{what} {text!r} is not a size such as 6GiB, 800MB or 512MiB")
    value = float(m.group(1))
    unit = m.group(2).lower()
    return value * _FACTORS[unit]


def fmt_mb(mb: float | None) -> str:
    if mb is None:
        return "-"
    if abs(mb) >= 1024:
        return f"{mb / 1024:.2f} GiB"
    return f"{mb:.0f} MiB"


def fmt_s(s: float | None) -> str:
    if s is None:
        return "-"
    if s >= 100:
        return f"{s:.0f} s"
    if s >= 1:
        return f"{s:.1f} s"
    return f"{s * 1000:.0f} ms"
