"""The median, as ``statistics.median`` computes it.

Here rather than from ``statistics``: that module imports ``fractions`` and ``decimal``
(~4 ms a process), and the pytest process of every measured run needs only this one
function (the end-of-run summary, the scheduling core's defaults).
"""

from __future__ import annotations

from collections.abc import Iterable


def median(values: Iterable[float]) -> float:
    """The middle value, or the mean of the two middle ones; ValueError when there are none."""
    xs = sorted(values)
    n = len(xs)
    if not n:
        raise ValueError("median of no values")
    mid = n // 2
    return xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) / 2
