"""Paired statistics for loop A/B: McNemar's exact (sign) test, Tango's score interval of a
paired difference, paired bootstrap, Wilson intervals.

Written out rather than imported from scipy: each is a few lines of arithmetic, and the CLI
must not pay scipy's import. The tests check every function against scipy/statsmodels.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

ALPHA = 0.05
"""Significance level of every decision."""


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant pair counts.

    ``b``: pairs where only A resolved; ``c``: only B resolved. Under H0 each discordant pair
    is a fair coin, so this is the two-sided binomial test of ``min(b, c)`` in ``b + c``.
    """
    if b < 0 or c < 0:
        raise ValueError("counts are never negative")
    n = b + c
    if n == 0:
        return 1.0
    tail: float = sum(math.comb(n, k) for k in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2 * tail)


def min_discordant_pairs(alpha: float = ALPHA) -> int:
    """The fewest discordant pairs with which McNemar's test can reach ``alpha`` at all."""
    n = 1
    while 2 * 0.5**n >= alpha:
        n += 1
    return n


Z_95 = 1.959963984540054
"""The standard normal quantile of a two-sided 95% interval."""


def wilson_interval(successes: float, trials: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval of a proportion (95% by default); (0, 1) with no trials.

    ``successes`` may be fractional: the sum of per-task resolve rates over repeats."""
    if trials == 0:
        return 0.0, 1.0
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Interval:
    """A point estimate with its confidence interval."""

    estimate: float
    low: float
    high: float

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


def paired_bootstrap(
    differences: Sequence[float],
    *,
    confidence: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
) -> Interval:
    """Percentile bootstrap CI of the mean of paired differences (seeded: reproducible)."""
    n = len(differences)
    if n == 0:
        raise ValueError("no pairs to bootstrap")
    mean = sum(differences) / n
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(differences, k=n)) / n for _ in range(resamples))
    tail = (1 - confidence) / 2
    low = means[max(0, math.floor(tail * resamples))]
    high = means[min(resamples - 1, math.ceil((1 - tail) * resamples) - 1)]
    return Interval(mean, low, high)


def tango_interval(only_a: float, only_b: float, n: int, z: float = Z_95) -> Interval:
    """Tango's (1998) score interval of p_B - p_A for paired binary outcomes over ``n`` units.

    ``only_a``/``only_b``: the discordant counts. Unlike a percentile bootstrap or a Wald
    interval it is not degenerate with no discordant pair: (0, 0) of n gives
    -z^2/(n+z^2) .. +z^2/(n+z^2), the difference the data cannot rule out. Fractional counts
    (per-task means over repeats, each unit's difference in [-1, 1]) keep it conservative: the
    variance it assumes, p_a + p_b - delta^2, bounds that of any difference in [-1, 1].
    """
    if n <= 0:
        raise ValueError("no units to compare")
    estimate = (only_b - only_a) / n

    def score(delta: float) -> float:
        # The constrained MLE of p_a given p_b - p_a = delta (a quadratic's root).
        w = -(only_a + only_b) + delta * (2 * n + only_a - only_b)
        p_a = (-w + math.sqrt(max(0.0, w * w + 8 * n * only_a * delta * (1 - delta)))) / (4 * n)
        numerator = only_b - only_a - n * delta
        variance = n * (2 * p_a + delta - delta * delta)
        if variance <= 1e-300:
            return math.copysign(math.inf, numerator) if numerator else 0.0
        return numerator / math.sqrt(variance)

    def root(inside: float, outside: float, target: float) -> float:
        # score() decreases in delta: bisect for score(delta) == target.
        for _ in range(100):
            middle = (inside + outside) / 2
            if (score(middle) - target) * (score(inside) - target) > 0:
                inside = middle
            else:
                outside = middle
        return (inside + outside) / 2

    low = -1.0 if score(-1.0) <= z else root(estimate, -1.0, z)
    high = 1.0 if score(1.0) >= -z else root(estimate, 1.0, -z)
    return Interval(estimate, low, high)


def min_tasks_for_non_inferiority(margin: float, z: float = Z_95) -> int:
    """The fewest tasks with which Tango's lower bound can clear ``-margin`` at all (with no
    discordant task): below it rule 2 can never hold, whatever the data."""
    if not 0 < margin < 1:
        raise ValueError("the margin is a difference of rates in (0, 1)")
    return math.floor(z * z * (1 - margin) / margin) + 1
