"""Statistics for A/B timing: paired log-ratios, confidence intervals, detectable effects.

PURE: numbers in, numbers out; no processes, files or clocks, so it is property-tested.

Why paired log-ratios: runs are interleaved (A B, B A, ...), so each pair shares the
machine's state at that moment; the ratio within a pair cancels slow drift, and the
log makes "1.2x faster" and "1.2x slower" symmetric. The interval is Student's t on
the mean log-ratio (exact for normal log-ratios, honest at small n where a bootstrap
undercovers); a seeded percentile bootstrap is offered for heavy-tailed data.

A claim needs three things: at least ``MIN_PAIRS`` pairs (two runs cannot estimate
their own noise); the interval lying wholly beyond the practical margin (default
3%), so that a real but negligible drift of the machine is not announced as a
speed-up; and the distribution-free interval of the median log-ratio (from the
sign test's order statistics) agreeing. Wall time on a shared runner is bursty and
heavy-tailed (a run that loses its core is 1.5x slower); the t-interval alone then
claims about 1 A/A comparison in 40 on this project's loaded 2-core machine, the
pair of intervals about 1 in 500 (benchmarks/bench_compare.py).
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "MIN_PAIRS",
    "Comparison",
    "Spread",
    "analyse",
    "bootstrap_mean_ci",
    "median",
    "runs_needed",
    "sign_ci",
    "t_cdf",
    "t_ppf",
]

MIN_PAIRS = 6  # the fewest pairs whose sign-test interval can exclude anything at 95%
POWER = 0.80  # for the detectable effect and the runs-needed estimate


def median(xs: Sequence[float]) -> float:
    if not xs:
        raise ValueError("median of nothing")
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbt) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbt) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    if df <= 0:
        raise ValueError("df must be positive")
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


@functools.lru_cache(maxsize=4096)
def t_ppf(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t (bisection on the CDF, cached: df repeats)."""
    if not 0.0 < p < 1.0:
        raise ValueError("p must be in (0, 1)")
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


def _mean_sd(xs: Sequence[float]) -> tuple[float, float]:
    n = len(xs)
    m = math.fsum(xs) / n
    if n < 2:
        return m, float("nan")
    var = math.fsum((x - m) ** 2 for x in xs) / (n - 1)
    return m, math.sqrt(max(var, 0.0))


def bootstrap_mean_ci(xs: Sequence[float], confidence: float, *, resamples: int = 4000,
                      seed: int | None = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean; ``seed`` makes it reproducible."""
    n = len(xs)
    if n == 0:
        raise ValueError("bootstrap of nothing")
    rng = random.Random(seed)
    means = sorted(math.fsum(rng.choices(xs, k=n)) / n for _ in range(resamples))
    alpha = (1.0 - confidence) / 2.0
    lo = means[max(0, math.floor(alpha * resamples))]
    hi = means[min(resamples - 1, math.ceil((1.0 - alpha) * resamples) - 1)]
    return lo, hi


def sign_ci(xs: Sequence[float], confidence: float) -> tuple[float, float]:
    """Distribution-free interval of the median: order statistics from the sign test.

    Coverage is at least ``confidence`` for any continuous distribution of iid values;
    with too few values to reach it the interval is unbounded.
    """
    n = len(xs)
    s = sorted(xs)
    k_best = 0
    tail = 0.0
    for k in range(1, n // 2 + 1):
        tail += math.comb(n, k - 1) / 2.0**n  # P(Bin(n, 1/2) <= k - 1)
        if 2 * tail <= 1.0 - confidence:
            k_best = k
        else:
            break
    if k_best == 0:
        return -math.inf, math.inf
    return s[k_best - 1], s[n - k_best]


def _detectable_log(sd: float, n: int, confidence: float, margin_log: float) -> float:
    """Smallest true log-effect found with ``POWER`` at n pairs: margin + (t_a + t_b) * sd/sqrt(n)."""
    if n < 2 or not math.isfinite(sd):
        return math.inf
    df = n - 1
    crit = t_ppf(1.0 - (1.0 - confidence) / 2.0, df) + t_ppf(POWER, df)
    return margin_log + crit * sd / math.sqrt(n)


def runs_needed(sd_log: float, effect: float, *, confidence: float = 0.95, margin: float = 0.03,
                cap: int = 100_000) -> int | None:
    """Pairs needed to detect a true ``effect`` (0.10 = 10%) at per-pair log-ratio noise ``sd_log``.

    None when the effect is within the margin (no number of runs would make it a claim)
    or the cap is exceeded.
    """
    target = math.log1p(effect)
    margin_log = math.log1p(margin)
    if target <= margin_log or not math.isfinite(sd_log):
        return None
    if sd_log == 0:
        return MIN_PAIRS
    n = MIN_PAIRS
    # Grow fast, then bisect: the detectable effect falls monotonically with n.
    while _detectable_log(sd_log, n, confidence, margin_log) > target:
        if n >= cap:
            return None
        n = min(cap, n * 2)
    lo = max(MIN_PAIRS, n // 2)
    hi = n
    while lo < hi:
        mid = (lo + hi) // 2
        if _detectable_log(sd_log, mid, confidence, margin_log) <= target:
            hi = mid
        else:
            lo = mid + 1
    return lo


@dataclass(frozen=True)
class Spread:
    """One side's times: median and range (seconds)."""

    median: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, xs: Sequence[float]) -> Spread:
        return cls(median(xs), min(xs), max(xs), len(xs))


@dataclass(frozen=True)
class Comparison:
    """The answer to "is B faster than A?" for one metric (wall or CPU time)."""

    metric: str
    a: Spread
    b: Spread
    pairs: int
    ratio: float  # A time / B time (geometric mean of the per-pair ratios); > 1: B is faster
    ci_low: float
    ci_high: float
    confidence: float
    margin: float
    sd_log: float  # sd of the per-pair log-ratios: the measured noise
    detectable: float  # smallest effect (0.08 = 8%) these runs find with 80% power; inf if unknown
    effect: float  # the effect the runs-needed line speaks of (0.10)
    runs_needed: int | None  # pairs to detect ``effect``; None if not estimable
    verdict: str  # "b-faster", "b-slower", "same", "unclear", "too-few", "unmeasurable"
    method: str = "t"
    robust_low: float = float("nan")  # distribution-free interval of the median ratio
    robust_high: float = float("nan")

    def sentence(self) -> str:
        """The verdict in one plain line."""
        pct = f"{self.effect * 100:.0f}%"
        need = (
            f"a {pct} effect would need about {self.runs_needed} runs of each"
            if self.runs_needed is not None
            else f"the noise is too high to estimate the runs a {pct} effect would need"
        )
        conf = f"{self.confidence * 100:.0f}% CI"
        if self.verdict == "b-faster":
            return f"B is {self.ratio:.2f}x faster ({conf} {self.ci_low:.2f}-{self.ci_high:.2f})"
        if self.verdict == "b-slower":
            return (f"B is {1 / self.ratio:.2f}x slower "
                    f"({conf} {1 / self.ci_high:.2f}-{1 / self.ci_low:.2f})")
        if self.verdict == "same":
            return (f"no difference larger than {self.margin * 100:.0f}% "
                    f"(A/B ratio {self.ratio:.3f}, {conf} {self.ci_low:.3f}-{self.ci_high:.3f})")
        if self.verdict == "unmeasurable":
            return "too small to measure (a median under the clock's resolution)"
        if self.verdict == "too-few":
            return f"cannot tell from {self.pairs} runs of each; {need}"
        if self.runs_needed is not None and self.runs_needed <= self.pairs and math.isfinite(self.detectable):
            return (f"no difference detectable; these runs would have found an effect of "
                    f"{self.detectable * 100:.0f}% or more (80% power)")
        return f"no difference detectable; {need}"

    def to_json(self) -> dict[str, object]:
        def num(x: float) -> float | None:
            return x if math.isfinite(x) else None

        return {
            "metric": self.metric,
            "a": {"median": self.a.median, "low": self.a.low, "high": self.a.high, "n": self.a.n},
            "b": {"median": self.b.median, "low": self.b.low, "high": self.b.high, "n": self.b.n},
            "pairs": self.pairs, "ratio": num(self.ratio), "ci_low": num(self.ci_low),
            "ci_high": num(self.ci_high), "confidence": self.confidence, "margin": self.margin,
            "sd_log": num(self.sd_log), "detectable": num(self.detectable), "effect": self.effect,
            "runs_needed": self.runs_needed, "verdict": self.verdict, "method": self.method,
            "robust_low": num(self.robust_low), "robust_high": num(self.robust_high),
            "sentence": self.sentence(),
        }


def analyse(a: Sequence[float], b: Sequence[float], *, metric: str = "wall",
            confidence: float = 0.95, margin: float = 0.03, effect: float = 0.10,
            method: str = "t", seed: int | None = 0, resolution: float = 1e-3) -> Comparison:
    """Compare paired times ``a[i]`` / ``b[i]`` (seconds). Pairs must be interleaved runs.

    ``resolution``: times below it are at the clock's granularity; a side whose median
    is below it cannot be compared (its ratios would be noise or a division by zero).
    """
    if len(a) != len(b):
        raise ValueError("a and b must be paired (same length)")
    if len(a) == 0:
        raise ValueError("no runs to compare")
    if not 0.5 <= confidence < 1.0:
        raise ValueError("confidence must be in [0.5, 1)")
    if method not in ("t", "bootstrap"):
        raise ValueError("method is 't' or 'bootstrap'")
    n = len(a)
    sa, sb = Spread.of(a), Spread.of(b)
    nan = float("nan")
    if sa.median < resolution or sb.median < resolution:
        return Comparison(metric, sa, sb, n, nan, nan, nan, confidence, margin, nan, math.inf,
                          effect, None, "unmeasurable", method)
    floor = resolution / 10
    logs = [math.log(max(x, floor)) - math.log(max(y, floor)) for x, y in zip(a, b, strict=True)]
    mean, sd = _mean_sd(logs)
    margin_log = math.log1p(margin)
    if n < 2:
        return Comparison(metric, sa, sb, n, math.exp(mean), nan, nan, confidence, margin, nan,
                          math.inf, effect, None, "too-few", method)
    if method == "bootstrap":
        lo, hi = bootstrap_mean_ci(logs, confidence, seed=seed)
    else:
        half = t_ppf(1.0 - (1.0 - confidence) / 2.0, n - 1) * sd / math.sqrt(n)
        lo, hi = mean - half, mean + half
    rlo, rhi = sign_ci(logs, confidence)
    detect = math.expm1(_detectable_log(sd, n, confidence, margin_log))
    need = runs_needed(sd, effect, confidence=confidence, margin=margin)
    if n < MIN_PAIRS:
        verdict = "too-few"
    elif lo > margin_log and rlo > margin_log:
        verdict = "b-faster"
    elif hi < -margin_log and rhi < -margin_log:
        verdict = "b-slower"
    elif -margin_log < lo and hi < margin_log:
        verdict = "same"
    else:
        verdict = "unclear"
    return Comparison(metric, sa, sb, n, math.exp(mean), math.exp(lo), math.exp(hi), confidence,
                      margin, sd, detect, effect, need, verdict, method, math.exp(rlo), math.exp(rhi))
