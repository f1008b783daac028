"""Split a long file into chunks of its tests, so that one file is not the long pole.

``--dist load`` never has this problem (it hands out single tests) and pays for it
with every module fixture set up on every worker. A chunk is a contiguous slice of the
file's collected tests (``Unit.chunk``); each chunk pays the file's module- and
class-scoped fixture setup again, as the history measured it. A file is split only
when its time exceeds the ideal lane and the split saves more than run-to-run noise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from suitefit.model import FileCost, FixtureCost, Unit
from suitefit.units import fmt_s

PAYS_FRACTION = 0.02  # as for an extra worker: a saving below this is noise
REPEATED_SCOPES = ("module", "class")


def repeated_setup_s(path: str, fixtures: Sequence[FixtureCost]) -> float:
    """What a chunk of ``path`` pays again: its module/class fixtures' setup."""
    return sum(f.setup_s for f in fixtures if f.scope in REPEATED_SCOPES and path in f.files)


def split_long_files(units: Sequence[Unit], file_costs: Mapping[str, FileCost],
                     fixtures: Sequence[FixtureCost], *, workers: int,
                     lane_s: float) -> tuple[list[Unit], list[str]]:
    """Units with each too-long single-file unit replaced by its chunks; and the reasons."""
    if workers <= 1:
        return list(units), []
    out: list[Unit] = []
    reasons: list[str] = []
    for u in units:
        # a plain file only: a group's part (a pool's users, a declared group) stays whole, or
        # its fixture would start again on every worker a chunk went to
        plain = len(u.files) == 1 and u.chunk is None and u.name == u.files[0]
        fc = file_costs.get(u.files[0]) if plain else None
        if fc is None or fc.tests < 2 or u.wall_s <= lane_s:
            out.append(u)
            continue
        setup = repeated_setup_s(fc.path, fixtures)
        m = min(fc.tests, workers, math.ceil(u.wall_s / max(lane_s, 1e-9)))
        part = u.wall_s / m + setup
        if m < 2 or part >= u.wall_s * (1 - PAYS_FRACTION):
            out.append(u)
            continue
        per_test = u.wall_s / fc.tests
        for k in range(1, m + 1):
            out.append(Unit(
                name=f"{u.name}[{k}/{m}]", files=u.files, wall_s=u.wall_s / m + (setup if k > 1 else 0.0),
                peak_mb=u.peak_mb, fixtures=u.fixtures, chunk=(k, m), kept_mb=u.kept_mb / m,
                last_s=u.last_s if k == m else min(per_test, u.wall_s / m),
                reason=(f"chunk {k}/{m} of {fc.path} ({fc.tests} tests, {fmt_s(u.wall_s)}): longer "
                        f"than the ideal lane {fmt_s(lane_s)}; each chunk pays {fmt_s(setup)} of "
                        f"module/class fixture setup again"),
            ))
        reasons.append(f"{fc.path}: split into {m} chunks of its {fc.tests} tests "
                       f"({fmt_s(u.wall_s)} > ideal lane {fmt_s(lane_s)}; {fmt_s(setup)} setup per extra chunk)")
    return out, reasons
