"""The statistics of the evidence, pure (standard library only: `statistics.NormalDist`).

Fixed-sample figures (GET .../evidence/ and .../evidence/compare/): a 95 % interval for each
figure, read once.

- a share (an outcome's share of ended sessions, the tool-error rate): Wilson score interval;
- a mean (a score, cost per turn): mean +- 1.96 standard errors (the sample standard deviation
  over sqrt(n)), from the rollups' n, sum and sum of squares;
- a difference (compare, b - a): the difference of the two estimates +- 1.96 times the root of
  the sum of their squared standard errors (Wald for shares, Welch for means);
- a verdict: `not enough data` below MIN_N observations in either arm; `better` or `worse`
  when the interval excludes 0 on that side (the metric's direction says which side is
  better); else `no difference detected`.

Sequential figures (the rollout guard, evidence.guard): looked at every ROLLOUT_GUARD_INTERVAL
seconds for as long as the rollout runs, so a fixed 95 % interval would be crossed by chance
sooner or later. The guard uses the asymptotic confidence sequence of Waudby-Smith, Arbour,
Sinha, Kennedy and Ramdas ("Time-uniform central limit theory and asymptotic confidence
sequences", Annals of Statistics 2024, eq. 2.6): with probability about 1 - alpha the interval
holds the true difference at every look at once, so the guard's false-halt rate over a
rollout's whole life stays about alpha however often it looks. bench/guard_sim.py measures it."""

import math
from dataclasses import dataclass
from statistics import NormalDist

Z95 = NormalDist().inv_cdf(0.975)
MIN_N = 30  # below this many observations in an arm a verdict is `not enough data`

BETTER, WORSE, NO_DIFFERENCE, NOT_ENOUGH = "better", "worse", "no difference detected", "not enough data"


@dataclass(frozen=True)
class Estimate:
    n: int
    value: float | None
    low: float | None
    high: float | None
    se: float | None = None

    def out(self, digits: int = 6) -> dict[str, object]:
        def r(x: float | None) -> float | None:
            return None if x is None else round(x, digits)

        return {
            "n": self.n,
            "value": r(self.value),
            "interval": [r(self.low), r(self.high)] if self.low is not None else None,
        }


def share(k: int, n: int) -> Estimate:
    """k of n, with its Wilson 95 % interval."""
    if n <= 0:
        return Estimate(n=0, value=None, low=None, high=None)
    p = k / n
    z2 = Z95 * Z95
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return Estimate(
        n=n, value=p, low=max(0.0, centre - half), high=min(1.0, centre + half), se=math.sqrt(p * (1 - p) / n)
    )


def mean(n: int, total: float, total_sq: float) -> Estimate:
    """The mean of n values from their sum and sum of squares, +- 1.96 standard errors."""
    if n <= 0:
        return Estimate(n=0, value=None, low=None, high=None)
    m = total / n
    if n == 1:
        return Estimate(n=1, value=m, low=None, high=None)
    var = max(0.0, (total_sq - n * m * m) / (n - 1))
    se = math.sqrt(var / n)
    return Estimate(n=n, value=m, low=m - Z95 * se, high=m + Z95 * se, se=se)


@dataclass(frozen=True)
class Difference:
    n_a: int
    n_b: int
    value: float | None
    low: float | None
    high: float | None
    verdict: str

    def out(self, digits: int = 6) -> dict[str, object]:
        def r(x: float | None) -> float | None:
            return None if x is None else round(x, digits)

        return {
            "n": {"a": self.n_a, "b": self.n_b},
            "difference": r(self.value),
            "interval": [r(self.low), r(self.high)] if self.low is not None else None,
            "verdict": self.verdict,
        }


def verdict(low: float, high: float, *, higher_is_better: bool) -> str:
    if low > 0:
        return BETTER if higher_is_better else WORSE
    if high < 0:
        return WORSE if higher_is_better else BETTER
    return NO_DIFFERENCE


def difference(a: Estimate, b: Estimate, *, higher_is_better: bool, min_n: int = MIN_N) -> Difference:
    """b - a with its 95 % interval and verdict."""
    if a.n < min_n or b.n < min_n or a.value is None or b.value is None or a.se is None or b.se is None:
        value = None if a.value is None or b.value is None else b.value - a.value
        return Difference(a.n, b.n, value, None, None, NOT_ENOUGH)
    d = b.value - a.value
    se = math.sqrt(a.se**2 + b.se**2)
    low, high = d - Z95 * se, d + Z95 * se
    return Difference(a.n, b.n, d, low, high, verdict(low, high, higher_is_better=higher_is_better))


def sequence_radius(se: float, n: int, *, alpha: float = 0.05, tuned_for: int = 500) -> float:
    """Half-width of the asymptotic confidence sequence (Waudby-Smith et al., eq. 2.6) for an
    estimate whose standard error is `se` after `n` observations (n: the smaller arm's, the one
    the standard error mostly comes from). `tuned_for`: the n at which the sequence is
    tightest (rho chosen as in their Appendix B.2); wider than a fixed interval at every n, the
    price of looking as often as one likes."""
    if n <= 0:
        return math.inf
    rho2 = (-2 * math.log(alpha) + math.log(-2 * math.log(alpha) + 1)) / tuned_for
    t = n * rho2
    return se * math.sqrt(n) * math.sqrt(2 * (t + 1) / (n * n * rho2) * math.log(math.sqrt(t + 1) / alpha))
