"""The run-time admission rule on its own (pure): which pending unit a worker takes next."""

from __future__ import annotations

from suitefit.model import Unit
from suitefit.plan.admission import Admit, Wait, choose_next

HOG = Unit("tests/test_hog.py", ("tests/test_hog.py",), 1.0, 600.0)
SMALL = Unit("tests/test_small.py", ("tests/test_small.py",), 1.0, 0.0)
MEDIUM = Unit("tests/test_medium.py", ("tests/test_medium.py",), 1.0, 50.0)


def test_a_unit_that_fits_is_taken_in_plan_order() -> None:
    d = choose_next([HOG, SMALL], live_mb=200, reserved_mb=0, budget_mb=1000, others_busy=True)
    assert isinstance(d, Admit) and d.unit is HOG and d.index == 0


def test_a_unit_that_adds_nothing_runs_while_promises_exceed_the_budget() -> None:
    # bench_run hog-heavy under its budget: one worker runs a hog and has the next queued;
    # the promise puts the room below zero though the live tree is inside the budget.
    # Waiting here idled the other worker and held back its last test.
    d = choose_next([HOG, SMALL], live_mb=1100, reserved_mb=600, budget_mb=1216, others_busy=True)
    assert isinstance(d, Admit) and d.unit is SMALL and d.index == 1 and "adds ~nothing" in d.reason
    d = choose_next([HOG, MEDIUM], live_mb=1100, reserved_mb=600, budget_mb=1216, others_busy=True)
    assert isinstance(d, Wait)  # 50 MiB is not nothing: promises still count for it


def test_nothing_runs_beside_a_live_tree_over_the_budget() -> None:
    d = choose_next([HOG, SMALL], live_mb=1300, reserved_mb=0, budget_mb=1216, others_busy=True)
    assert isinstance(d, Wait)


def test_when_nothing_else_runs_the_head_runs_alone_over_the_budget() -> None:
    d = choose_next([HOG], live_mb=700, reserved_mb=0, budget_mb=1000, others_busy=False)
    assert isinstance(d, Admit) and d.over_budget and "runs alone" in d.reason
    assert choose_next([], live_mb=0, reserved_mb=0, budget_mb=1000, others_busy=False) is None
