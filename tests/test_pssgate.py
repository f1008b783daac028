"""When the sampler reads PSS (``measure/pssgate.py``): on its cadence, at the tree's highs,
within its budget. Pure: sample times, RSS totals and read costs in, decisions out."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from suitefit.measure.pssgate import BURST_READS, PssGate, at_peak


def drive(gate: PssGate, totals: list[float], *, cost: float = 0.002, dt: float = 0.1) -> list[bool]:
    """Feed one sample per ``dt`` seconds; a read takes ``cost`` and gives PSS = 0.9 RSS."""
    out = []
    for i, total in enumerate(totals):
        due = gate.due(i * dt, total)
        if due:
            gate.read(cost, total, 0.9 * total)
        out.append(due)
    return out


def test_without_a_budget_the_cadence_reads_every_nth_sample() -> None:
    gate = PssGate(4, 0.0, 0.0)
    assert drive(gate, [100.0] * 9) == [True, False, False, False, True, False, False, False, True]
    assert gate.reads == 3


def test_never_with_no_cadence() -> None:
    assert not any(drive(PssGate(0, 0.0, 0.0), [100.0, 500.0, 900.0, 900.0]))


def test_a_ramp_is_read_at_its_top_even_when_the_cadence_has_spent_the_spare_credit() -> None:
    # a 2 ms read at 0.2%: the cadence reads once a second at most; the example suite's hog:
    # 100 MiB, then 500 MiB more over three samples, held for three, then gone
    gate = PssGate(10, 0.002, 0.0)
    flat = [100.0] * 45
    ramp = [250.0, 420.0, 600.0, 600.0, 600.0, 600.0]
    got = drive(gate, flat + ramp + [100.0] * 5)
    assert got[0] and 3 <= sum(got[:45]) <= 6  # the first sample; the cadence, once a second at most
    assert not any(got[45:48])  # nothing on the way up: the credit is kept for the top
    top = len(flat) + 3  # the first sample no longer rising, still at the high
    assert got[top], got
    assert gate.pss_at_peak(600.0) == (600.0, 0.9 * 600.0)


def test_a_spike_gone_before_it_is_read_waits_for_the_next_time_the_tree_is_near_it() -> None:
    gate = PssGate(1000, 0.002, 0.0)
    totals = [100.0] * 5 + [600.0] + [100.0] * 30 + [590.0, 590.0]
    got = drive(gate, totals)
    assert got[0]  # the first sample reads
    assert not any(got[1:36])  # the spike's one sample was still rising; below it, nothing is due
    assert got[36] or got[37]  # near it again, no longer rising: the reserve reads
    assert gate.pss_at_peak(600.0) is not None


def test_no_read_near_the_peak_says_so() -> None:
    gate = PssGate(1000, 0.002, 0.0)
    drive(gate, [100.0])
    assert gate.pss_at_peak(600.0) is None
    assert gate.pss_at_peak(100.0) == (100.0, 90.0)


def test_a_read_at_the_samples_high_is_not_at_a_peak_only_a_workers_exact_peak_saw() -> None:
    # a hog shorter than a sample's interval: a worker's VmHWM has it, the samples do not
    assert at_peak((120.0, 110.0), 576.0) is None
    assert at_peak((560.0, 500.0), 576.0) == 500.0
    assert at_peak(None, 576.0) is None


def test_a_plateau_that_creeps_up_is_read_at_its_start() -> None:
    # under xdist the controller grows ~7 KiB a test: a hog's plateau edges up every sample
    gate = PssGate(1000, 0.002, 0.0)
    got = drive(gate, [100.0] * 20 + [350.0, 600.0] + [600.0 + 0.1 * i for i in range(1, 10)])
    assert got[22], got


def test_a_climb_that_never_stops_still_reads_on_a_slower_cadence() -> None:
    gate = PssGate(5, 0.0, 0.0)
    got = drive(gate, [100.0 * 1.1**i for i in range(40)])
    assert 2 <= sum(got) <= 40 // 15 + 2  # the first sample, then every third cadence at most


def test_small_rises_are_no_high_worth_a_read() -> None:
    gate = PssGate(1000, 0.002, 0.0)
    totals = [100.0 + 0.5 * i for i in range(30)] + [114.5] * 5  # 14.5 MiB, then flat
    assert sum(drive(gate, totals)) == 1  # the first sample only
    gate = PssGate(1000, 0.002, 0.0)
    assert sum(drive(gate, [100.0 + 0.5 * i for i in range(40)] + [119.5] * 5)) == 2  # 19.5 MiB: read once it is 16 MiB past the first


@settings(max_examples=200, deadline=None)
@given(
    totals=st.lists(st.floats(min_value=50.0, max_value=5000.0), min_size=1, max_size=400),
    costs=st.lists(st.floats(min_value=1e-4, max_value=0.05), min_size=1, max_size=20),
    every=st.integers(min_value=1, max_value=20),
    budget=st.sampled_from([0.001, 0.002, 0.01]),
)
def test_reads_stay_within_the_budget(totals: list[float], costs: list[float], every: int, budget: float) -> None:
    """Whatever the tree does, reads take at most the budget's share of the time, give or take
    the first read and a burst of BURST_READS reads of the largest cost."""
    gate = PssGate(every, budget, 0.0)
    spent = 0.0
    for i, total in enumerate(totals):
        if gate.due(i * 0.1, total):
            took = costs[gate.reads % len(costs)]
            spent += took
            gate.read(took, total, total)
    elapsed = 0.1 * (len(totals) - 1)
    assert spent <= budget * elapsed + (BURST_READS + 2) * max(costs) + 1e-9


def test_the_summary_says_where_pss_was_read() -> None:
    from suitefit.summary import pss_words

    assert pss_words(None, {}) is None  # never read
    assert pss_words(560.0, {"pss_reads": 4, "pss_at_peak_mb": 550.0}) == "550 MiB at that peak"
    assert pss_words(159.0, {"pss_reads": 5, "pss_at_peak_mb": None}) == \
        "159 MiB, the largest of 5 read(s), none at the RSS peak"
    assert pss_words(159.0, {}) == "159 MiB"  # a run recorded before the sampler said where it read
