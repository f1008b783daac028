"""Worker count: the fewest workers that reach the best predicted wall inside the budget.

Each worker costs its startup time (interpreter, conftest import, collection) and
its baseline memory; a worker that does not cut the predicted wall time by more
than ``PAYS_FRACTION`` (below run-to-run noise) does not pay for itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from suitefit.errors import SuitefitError
from suitefit.model import Budget, Unit, WorkerCost
from suitefit.plan.simulate import Simulation
from suitefit.units import fmt_mb, fmt_s

PAYS_FRACTION = 0.02  # an extra worker must save more than 2% of the predicted wall
# How far a count that only a profile's calibration has measured may be predicted slower than
# the best and still be tried: the calibration's slice of short files, in fresh workers, read
# x1.77 on scipy.sparse where whole runs measured x1.55, x1.23 on scikit-learn's linear_model
# against x1.03, and x1.81-1.90 on networkx, where a plan then kept one worker for good (15 s
# a run against `pytest -n 2`'s 10 s): the count a calibration rules out is never measured.
CALIBRATION_DOUBT = 0.25
EXHAUSTIVE_UP_TO = 32  # above this many candidate counts, search coarse then refine
CAP = 2.0  # the first search gives up at this many times the best guess of a count's wall


@dataclass(frozen=True)
class Candidate:
    workers: int
    units: tuple[Unit, ...]
    sim: Simulation
    group_reasons: tuple[str, ...] = ()
    spread_mb: float | None = None  # the soft ceiling it was simulated with


def max_workers(budget: Budget, worker: WorkerCost, n_units: int) -> tuple[int, list[str]]:
    """The largest count worth trying, and why it stops there."""
    reasons: list[str] = []
    if budget.memory_mb < worker.baseline_mb:
        raise SuitefitError(
            f"memory budget {fmt_mb(budget.memory_mb)} is below one worker's baseline "
            f"{fmt_mb(worker.baseline_mb)}: nothing can run; raise --memory-budget"
        )
    # relative tolerance: a budget of exactly k baselines must admit k workers despite rounding
    by_mem = int(budget.memory_mb / worker.baseline_mb * (1 + 1e-9)) if worker.baseline_mb > 0 else 10**6
    if budget.workers is not None:
        if budget.workers > by_mem:
            raise SuitefitError(
                f"{budget.workers} workers need {fmt_mb(budget.workers * worker.baseline_mb)} for "
                f"their baselines alone ({fmt_mb(worker.baseline_mb)} each), over the "
                f"{fmt_mb(budget.memory_mb)} budget; use --workers {max(1, by_mem)} or less"
            )
        return budget.workers, reasons
    top = budget.cpus
    if by_mem < top:
        reasons.append(f"at most {by_mem} workers fit the budget: each holds a "
                       f"{fmt_mb(worker.baseline_mb)} baseline")
        top = by_mem
    if n_units < top:
        reasons.append(f"at most {max(1, n_units)} workers: there are only {n_units} units")
        top = max(1, n_units)
    return max(1, top), reasons


def _counts(top: int) -> list[int]:
    if top <= EXHAUSTIVE_UP_TO:
        return list(range(1, top + 1))
    out, k = [1, 2, 3, 4, 6], 6
    while k < top:
        k = int(k * 1.5)
        out.append(min(k, top))
    return sorted(set(out))


def choose_workers(evaluate: Callable[[int, float | None], Candidate], budget: Budget,
                   worker: WorkerCost, n_units: int,
                   lower_bound: Callable[[int], float] = lambda w: 0.0, *, doubt: float = 0.0,
                   doubt_why: str = "", estimate: Callable[[int], float] | None = None,
                   ) -> tuple[Candidate, list[str], list[Candidate]]:
    """Evaluate worker counts; return the chosen one, the reasons, and all evaluated.

    ``evaluate(w, give_up_s)`` simulates ``w`` workers, stopping early once its wall passes
    ``give_up_s`` (None: the first, run to its end): the best wall so far plus what a count
    may lose and still be chosen (``PAYS_FRACTION``, or ``doubt``), so that a count stopped
    there could never have been chosen; ``lower_bound(w)`` is a wall no schedule on ``w`` workers can
    beat, so counts whose bound already loses are never simulated. ``doubt``: how much the
    contention figure may overstate a larger count's wall (``CALIBRATION_DOUBT`` while only a
    calibration measured it); the best-predicted larger count within it is chosen, so that
    a run measures it, and ``doubt_why`` says why the figure is in doubt. ``estimate(w)``: a
    guess of ``w``'s wall (default: its lower bound) that orders the counts, the likeliest
    best first, so that the best so far stops the hopeless ones early. Only the work done
    depends on it, not the choice: a count within reach of the best completes in any order.
    """
    top, reasons = max_workers(budget, worker, n_units)
    if budget.workers is not None:
        c = evaluate(budget.workers, None)
        slow = ""
        if budget.workers > budget.cpus:
            slow = f"; more than the {budget.cpus} CPUs, so workers share them (predicted slower)"
        reasons.append(f"workers: {budget.workers}, pinned (--workers or [tool.suitefit] workers)"
                       f"{slow}; predicted wall {fmt_s(c.sim.wall_s)}, peak {fmt_mb(c.sim.peak_mb)}")
        return c, reasons, [c]
    seen: dict[int, Candidate] = {}
    skipped: dict[int, float] = {}  # counts never simulated: their lower bound already loses
    lose = 1 + max(PAYS_FRACTION, doubt)  # a count this much slower than the best is not chosen

    def _best() -> float | None:
        walls = [c.sim.wall_s for c in seen.values() if c.sim.fits and c.sim.complete]
        return min(walls) if walls else None

    def ev(w: int, cap: float | None) -> None:
        # a count whose lower bound loses to the best so far is not simulated; others stop
        # early once they cannot win (over budget, or slower than any count chosen can be),
        # or past ``cap``
        if w in seen:
            return
        best = _best()
        give_up = None if best is None else best * lose
        if give_up is not None and lower_bound(w) > give_up:
            skipped[w] = lower_bound(w)
            return
        skipped.pop(w, None)
        limits = [x for x in (give_up, cap) if x is not None]
        seen[w] = evaluate(w, min(limits) if limits else None)

    guess = estimate or lower_bound

    def search(cap: float | None) -> None:
        seen.clear()
        skipped.clear()
        # (one worker, the lowest memory floor, in turn like any count: simulated first, its
        # long wall stopped no other count, and where a count fits, its bound rules it out)
        for w in sorted(_counts(top), key=lambda w: (guess(w), lower_bound(w), -w)):
            ev(w, cap)
        if top > EXHAUSTIVE_UP_TO:  # refine between the coarse best's neighbours (bisection)
            for _ in range(12):
                best_c = min(seen.values(), key=lambda c: (not (c.sim.fits and c.sim.complete),
                                                           c.sim.wall_s, c.workers))
                below = [w for w in (*seen, *skipped) if w < best_c.workers]
                above = [w for w in (*seen, *skipped) if w > best_c.workers]
                lo = max(below) if below else best_c.workers
                hi = min(above) if above else best_c.workers
                todo = [w for w in ((lo + best_c.workers) // 2, (best_c.workers + hi + 1) // 2)
                        if w not in seen and w not in skipped]
                if not todo:
                    break
                for w in todo:
                    ev(w, cap)

    # The first count simulated has no best to give up against: where the guess misjudges it
    # (a count starved by the fixtures its workers keep resident, which the guess does not
    # see), it ran to its end, and the next ones to its long wall. So every count first gives
    # up at ``CAP`` times the best guess. If the best found then is within that cap (with
    # what a count may lose), a count stopped at the cap could not have been chosen, and the
    # choice is the one without it; else (or when none fits) the search runs again without.
    cap = CAP * min(guess(w) for w in _counts(top))
    if not (math.isfinite(cap) and cap > 0):  # no guess to cap at
        search(None)
    else:
        search(cap)
        best = _best()
        if best is None or best * lose > cap:
            search(None)
    cands = sorted(seen.values(), key=lambda c: c.workers)
    fitting = [c for c in cands if c.sim.fits and c.sim.complete]
    if not fitting:
        chosen = min(cands, key=lambda c: (c.sim.peak_mb, c.sim.wall_s))
        reasons.append(
            f"workers: {chosen.workers} - no worker count keeps every unit inside "
            f"{fmt_mb(budget.memory_mb)}: the lowest predicted peak is {fmt_mb(chosen.sim.peak_mb)}; "
            f"units over the budget run alone"
        )
        return chosen, reasons, cands
    best_wall = min(c.sim.wall_s for c in fitting)
    chosen = next(c for c in fitting if c.sim.wall_s <= best_wall * (1 + PAYS_FRACTION))
    larger = [c for c in fitting if c.workers > chosen.workers and c.sim.wall_s <= best_wall * (1 + doubt)]
    if doubt and larger:
        was, chosen = chosen, min(larger, key=lambda c: (c.sim.wall_s, c.workers))
        reasons.append(
            f"workers: {chosen.workers} rather than {was.workers} ({fmt_s(was.sim.wall_s)} predicted): "
            f"{doubt_why}; {chosen.workers} are predicted within {doubt:.0%} ({fmt_s(chosen.sim.wall_s)}): "
            f"this run measures them, and the plans after it use what it measured")
    line = (f"workers: {chosen.workers} of {budget.cpus} CPUs - predicted wall "
            f"{fmt_s(chosen.sim.wall_s)}, peak {fmt_mb(chosen.sim.peak_mb)} of {fmt_mb(budget.memory_mb)}")
    more = next((c for c in cands if c.workers == chosen.workers + 1), None)
    if more is None and chosen.workers + 1 in skipped:
        line += (f"; {chosen.workers + 1} would take at least "
                 f"{fmt_s(skipped[chosen.workers + 1])}")
    if more is not None:
        if not more.sim.complete:
            line += (f"; {more.workers} would " + (
                f"put a unit over the budget ({more.sim.warnings[0]}; the tree includes xdist's "
                f"controller, which holds a baseline of {fmt_mb(worker.baseline_mb)} too)"
                if more.sim.warnings else f"take at least {fmt_s(more.sim.wall_s)}"))
        elif more.sim.fits:
            gain = (chosen.sim.wall_s - more.sim.wall_s) / chosen.sim.wall_s if chosen.sim.wall_s else 0
            line += (f"; {more.workers} would give {fmt_s(more.sim.wall_s)} ({gain:+.1%} saved, "
                     f"not more than {PAYS_FRACTION:.0%}: another worker costs {fmt_s(worker.startup_s)} "
                     f"startup and {fmt_mb(worker.baseline_mb)})")
        else:
            line += (f"; {more.workers} would reach {fmt_mb(more.sim.peak_mb)}, over the budget "
                     f"(a unit would run alone)")
    elif chosen.workers == top and top == budget.cpus:
        line += "; one per CPU, the most that can run at once"
    fewer = next((c for c in cands if c.workers == chosen.workers - 1), None)
    if fewer is not None and fewer.sim.complete:
        line += f"; {fewer.workers} would take {fmt_s(fewer.sim.wall_s)}"
    elif fewer is not None:
        line += f"; {fewer.workers} would take at least {fmt_s(fewer.sim.wall_s)}"
    elif chosen.workers - 1 in skipped:
        line += (f"; {chosen.workers - 1} would take at least "
                 f"{fmt_s(skipped[chosen.workers - 1])}")
    reasons.append(line)
    return chosen, reasons, cands
