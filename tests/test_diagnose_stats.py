"""The A/B statistics: known quantiles, properties of the interval and verdict, calibration."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from suitefit.diagnose.stats import (
    MIN_PAIRS,
    analyse,
    bootstrap_mean_ci,
    median,
    runs_needed,
    sign_ci,
    t_cdf,
    t_ppf,
)


@pytest.mark.parametrize(("p", "df", "want"), [
    (0.975, 1, 12.7062), (0.975, 2, 4.3027), (0.975, 9, 2.2622), (0.975, 30, 2.0423),
    (0.8, 5, 0.9195), (0.995, 4, 4.6041), (0.975, 10_000, 1.9602),
])
def test_t_quantiles_match_tables(p: float, df: int, want: float) -> None:
    assert t_ppf(p, df) == pytest.approx(want, abs=1e-3)
    assert t_cdf(t_ppf(p, df), df) == pytest.approx(p, abs=1e-9)


def noisy(rng: random.Random, n: int, base: float, sd: float) -> list[float]:
    return [base * rng.lognormvariate(0.0, sd) for _ in range(n)]


def bursty(rng: random.Random, n: int, base: float) -> list[float]:
    """Wall time on a shared runner: 5% jitter, and 30% of runs lose their core for a while."""
    out = []
    for _ in range(n):
        x = base * rng.lognormvariate(0.0, 0.05)
        if rng.random() < 0.3:
            x *= 1 + rng.expovariate(1 / 0.4)
        out.append(x)
    return out


@given(st.lists(st.floats(min_value=-5, max_value=5), min_size=1, max_size=40))
def test_sign_interval_brackets_the_median(xs: list[float]) -> None:
    lo, hi = sign_ci(xs, 0.95)
    if len(xs) < 6:
        assert (lo, hi) == (-math.inf, math.inf)
    else:
        assert lo <= median(xs) <= hi and lo in xs and hi in xs


def test_sign_interval_covers_at_the_stated_level() -> None:
    rng = random.Random(9)
    for n in (6, 10, 25):
        misses = sum(not (lo <= 0.0 <= hi) for lo, hi in
                     (sign_ci([rng.expovariate(1) - math.log(2) for _ in range(n)], 0.95) for _ in range(3000)))
        assert misses / 3000 <= 0.05 + 0.015


times = st.lists(st.floats(min_value=0.01, max_value=100.0), min_size=2, max_size=30)


@given(data=st.data(), scale=st.floats(min_value=0.2, max_value=100.0))
@settings(max_examples=150, deadline=None)
def test_interval_brackets_the_estimate_and_is_scale_free(data: st.DataObject, scale: float) -> None:
    a = data.draw(times)
    b = data.draw(st.lists(st.floats(min_value=0.01, max_value=100.0), min_size=len(a), max_size=len(a)))
    c = analyse(a, b)
    assert c.ci_low <= c.ratio * (1 + 1e-9) and c.ratio <= c.ci_high * (1 + 1e-9)
    scaled = analyse([x * scale for x in a], [y * scale for y in b])
    assert scaled.ratio == pytest.approx(c.ratio, rel=1e-6)
    assert scaled.verdict == c.verdict


@given(a=times, data=st.data())
@settings(max_examples=150, deadline=None)
def test_swapping_sides_inverts_ratio_and_verdict(a: list[float], data: st.DataObject) -> None:
    b = data.draw(st.lists(st.floats(min_value=0.01, max_value=100.0), min_size=len(a), max_size=len(a)))
    ab, ba = analyse(a, b), analyse(b, a)
    assert ab.ratio * ba.ratio == pytest.approx(1.0, rel=1e-6)
    assert ab.ci_low * ba.ci_high == pytest.approx(1.0, rel=1e-6)
    flip = {"b-faster": "b-slower", "b-slower": "b-faster"}
    assert ba.verdict == flip.get(ab.verdict, ab.verdict)


@given(a=st.lists(st.floats(min_value=0.01, max_value=100.0), min_size=1, max_size=MIN_PAIRS - 1),
       factor=st.floats(min_value=0.2, max_value=5.0))
def test_fewer_than_min_pairs_never_claims(a: list[float], factor: float) -> None:
    c = analyse(a, [x * factor for x in a])
    assert c.verdict == "too-few"
    assert "cannot tell" in c.sentence()


@given(a=st.lists(st.floats(min_value=0.01, max_value=100.0), min_size=MIN_PAIRS, max_size=30))
def test_identical_runs_are_the_same(a: list[float]) -> None:
    c = analyse(a, list(a))
    assert c.verdict == "same" and c.ratio == pytest.approx(1.0)


@given(sd=st.floats(min_value=0.001, max_value=0.5), effect=st.floats(min_value=0.04, max_value=1.0))
def test_runs_needed_is_enough_and_minimal(sd: float, effect: float) -> None:
    n = runs_needed(sd, effect)
    if n is None:
        return
    assert n >= MIN_PAIRS
    from suitefit.diagnose.stats import _detectable_log

    assert _detectable_log(sd, n, 0.95, math.log1p(0.03)) <= math.log1p(effect)
    if n > MIN_PAIRS:
        assert _detectable_log(sd, n - 1, 0.95, math.log1p(0.03)) > math.log1p(effect)


def test_runs_needed_grows_with_noise() -> None:
    got = [runs_needed(sd, 0.10) for sd in (0.01, 0.05, 0.10, 0.20)]
    assert all(isinstance(n, int) for n in got)
    assert got == sorted(got) and got[0] < got[-1]
    assert runs_needed(0.05, 0.02) is None  # inside the 3% margin: never a claim


def test_bootstrap_is_seedable_and_brackets_the_mean() -> None:
    rng = random.Random(3)
    xs = [rng.gauss(0.1, 0.05) for _ in range(20)]
    assert bootstrap_mean_ci(xs, 0.95, seed=7) == bootstrap_mean_ci(xs, 0.95, seed=7)
    lo, hi = bootstrap_mean_ci(xs, 0.95, seed=7)
    assert lo < sum(xs) / len(xs) < hi


@pytest.mark.parametrize("method", ["t", "bootstrap"])
def test_identical_commands_never_claim_in_20_trials(method: str) -> None:
    """20 simulated A/A comparisons at default settings (10 runs, 5% per-run noise): no claim."""
    claims = []
    for trial in range(20):
        rng = random.Random(1000 + trial)
        a, b = noisy(rng, 10, 1.0, 0.05), noisy(rng, 10, 1.0, 0.05)
        c = analyse(a, b, method=method, seed=trial)
        if c.verdict in ("b-faster", "b-slower"):
            claims.append((trial, c.sentence()))
    assert claims == []


def test_bursty_identical_commands_never_claim_in_20_trials() -> None:
    for trial in range(20):
        rng = random.Random(2000 + trial)
        c = analyse(bursty(rng, 10, 1.0), bursty(rng, 10, 1.0))
        assert c.verdict not in ("b-faster", "b-slower"), (trial, c.sentence())


def test_bursty_false_claim_rate_is_far_below_five_percent() -> None:
    rng = random.Random(7)
    trials = 2000
    claims = sum(analyse(bursty(rng, 10, 1.0), bursty(rng, 10, 1.0)).verdict in ("b-faster", "b-slower")
                 for _ in range(trials))
    assert claims / trials < 0.01


def test_false_claim_rate_is_well_under_the_nominal_level() -> None:
    """Calibration over 2000 A/A trials: the margin keeps false claims far below 5%."""
    rng = random.Random(42)
    trials, claims = 2000, 0
    for _ in range(trials):
        a, b = noisy(rng, 10, 1.0, 0.05), noisy(rng, 10, 1.0, 0.05)
        claims += analyse(a, b).verdict in ("b-faster", "b-slower")
    assert claims / trials < 0.02


def test_a_ten_percent_effect_is_found_with_enough_runs_and_not_claimed_with_two() -> None:
    rng = random.Random(5)
    found = 0
    for _ in range(50):
        a, b = noisy(rng, 12, 1.10, 0.03), noisy(rng, 12, 1.0, 0.03)
        c = analyse(a, b)
        found += c.verdict == "b-faster"
        assert c.verdict != "b-slower"
        assert analyse(a[:2], b[:2]).verdict == "too-few"
    assert found >= 45
    c = analyse(noisy(rng, 12, 1.10, 0.03), noisy(rng, 12, 1.0, 0.03))
    assert c.ci_low < 1.10 * 1.05 and c.ci_high > 1.10 / 1.05


def test_sentences() -> None:
    rng = random.Random(1)
    c = analyse(noisy(rng, 20, 1.18, 0.02), noisy(rng, 20, 1.0, 0.02))
    assert c.sentence().startswith("B is 1.1") and "x faster (95% CI " in c.sentence()
    c = analyse(noisy(rng, 6, 1.0, 0.3), noisy(rng, 6, 1.0, 0.3))
    assert c.verdict == "unclear"
    assert "no difference detectable; a 10% effect would need about" in c.sentence()
    assert analyse([0.0001] * 6, [0.0001] * 6).verdict == "unmeasurable"
    assert median([3.0, 1.0, 2.0, 10.0]) == 2.5
