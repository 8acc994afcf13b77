"""Paired statistics for loop A/B: McNemar's exact test, paired bootstrap, Wilson intervals.

Written out rather than imported from scipy: each is a few lines of exact arithmetic, and
the CLI must not pay scipy's import. The tests check every function against scipy.
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


def wilson_interval(successes: int, trials: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval of a proportion (95% by default); (0, 1) with no trials."""
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
