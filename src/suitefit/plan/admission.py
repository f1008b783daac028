"""Memory admission at run time: which unit a worker that is about to go idle takes next.

Pure policy, applied by the xdist scheduler (``xdist_sched``): the executor
measures, this decides. It is the dispatcher's rule (``dispatch.py``, which the
plan's simulation runs) made conservative for xdist's pipeline: a worker is given
its next unit while its current one is still finishing, so other workers' units
count at their full predicted peak until their memory shows in the live
measurement, and fixtures are never assumed resident. A unit is admitted when the tree's live memory, plus
what other workers have been promised but not yet shown, plus the unit's own
predicted peak, fits the budget. When nothing else is running, the first unit
runs regardless (alone), so a run always progresses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from suitefit.model import Unit

NEGLIGIBLE_SHARE = 0.01  # a unit predicted to need at most this share of the budget adds ~nothing


@dataclass(frozen=True)
class Admit:
    unit: Unit
    index: int  # position in the pending list it was taken from
    over_budget: bool  # admitted alone although it does not fit
    reason: str


@dataclass(frozen=True)
class Wait:
    reason: str


def choose_next(pending: Sequence[Unit], *, live_mb: float, reserved_mb: float, budget_mb: float | None,
                others_busy: bool, lookahead: int = 64) -> Admit | Wait | None:
    """The first pending unit (in plan order, within ``lookahead``) that fits, else wait.

    ``reserved_mb`` is memory promised to units other workers hold but whose peak is
    not yet visible in ``live_mb``. Returns None when nothing is pending.
    """
    if not pending:
        return None
    if budget_mb is None:
        return Admit(pending[0], 0, False, "no memory budget")
    room = budget_mb - live_mb - reserved_mb
    negligible = max(1.0, NEGLIGIBLE_SHARE * budget_mb)
    for i, u in enumerate(pending[:lookahead]):
        skipped = f" ahead of {i} larger unit(s) that do not fit now" if i else ""
        if u.peak_mb <= room:
            return Admit(u, i, False, f"fits: {u.peak_mb:.0f} MiB predicted, {room:.0f} MiB free{skipped}")
        if u.peak_mb <= negligible and live_mb + u.peak_mb <= budget_mb:
            # Promises can push the room below zero while the live tree is inside the budget;
            # a unit that adds nothing still runs then, or its worker idles (and, since an
            # xdist worker needs a next test to run its last one, holds that test back too).
            return Admit(u, i, False, f"adds ~nothing: {u.peak_mb:.0f} MiB predicted, live tree "
                                      f"{live_mb:.0f} of {budget_mb:.0f} MiB{skipped}")
    if not others_busy:
        u = pending[0]
        return Admit(u, 0, True,
                     f"runs alone: {u.peak_mb:.0f} MiB predicted, only {room:.0f} MiB free and nothing else running")
    return Wait(f"waiting: smallest next unit needs more than the {room:.0f} MiB free")
