"""Latency statistics: quantiles with distribution-free intervals, and a two-arm test of the
median that stays valid when neighbouring requests' latencies are correlated.

- A quantile's interval is the order-statistic one (scipy's `quantile_test`: exact, for any
  continuous distribution), as if requests were independent. Latencies under sustained load are
  not (a slow stretch slows every request in it), so the interval is a floor on the
  uncertainty; the test below is what a comparison rests on.
- The comparison splits each arm's time-ordered latencies into `robust.BATCHES` long batches,
  takes each batch's median, and compares the batch medians with Welch's t (what
  `robust.batch_means_test` does for failures): valid when requests forget their past within a
  batch, whatever the distribution inside it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from soakgate.stats.robust import BATCHES

FloatArray = npt.NDArray[np.float64]
QUANTILES = (0.5, 0.9, 0.99)
"""The quantiles every latency summary holds."""
MIN_PER_BATCH = 5
"""Values per batch below which the comparison is not made (a median of fewer is noise)."""


@dataclass(frozen=True, slots=True)
class Quantile:
    """One quantile of a sample and its 95% order-statistic interval."""

    q: float
    value: float
    """The sample quantile (linear interpolation between order statistics, numpy's default)."""
    low: float
    """Lower end of the 95% interval (NaN where the sample is too small for one)."""
    high: float
    """Upper end (NaN where the sample is too small for one)."""


@dataclass(frozen=True, slots=True)
class Distribution:
    """A latency's distribution over requests: count, mean and quantiles (seconds)."""

    n: int
    mean: float
    quantiles: tuple[Quantile, ...]

    def quantile(self, q: float) -> Quantile:
        """The quantile `q` (one of QUANTILES)."""
        return next(x for x in self.quantiles if x.q == q)


def distribution(values: FloatArray) -> Distribution | None:
    """Count, mean and QUANTILES with intervals of the finite values (None when there are none)."""
    from scipy.stats import quantile_test

    finite = np.asarray(values, np.float64)
    finite = finite[np.isfinite(finite)]
    if not len(finite):
        return None
    quantiles = []
    for q in QUANTILES:
        value = float(np.quantile(finite, q))
        try:
            interval = quantile_test(finite, q=value, p=q).confidence_interval(0.95)
            low, high = float(interval.low), float(interval.high)
        except ValueError:  # too few values
            low = high = math.nan
        quantiles.append(Quantile(q, value, low, high))
    return Distribution(len(finite), float(finite.mean()), tuple(quantiles))


@dataclass(frozen=True, slots=True)
class MedianComparison:
    """B's median latency against A's, judged on batch medians."""

    a: float
    """A's median (seconds)."""
    b: float
    """B's median."""
    ratio: float
    """B / A (inf when A's median is 0)."""
    t: float
    """Welch's t of B's batch medians against A's."""
    df: float
    p_value: float
    """Two-sided."""
    batches: tuple[int, int]
    """Batches per arm."""


def batch_medians(values: FloatArray, batches: int = BATCHES) -> FloatArray:
    """The medians of `batches` consecutive, near-equal stretches of the finite values."""
    finite = np.asarray(values, np.float64)
    finite = finite[np.isfinite(finite)]
    return np.array([float(np.median(part)) for part in np.array_split(finite, batches)])


def compare_medians(
    a: Sequence[float] | FloatArray, b: Sequence[float] | FloatArray, batches: int = BATCHES
) -> MedianComparison | None:
    """Welch's t over each arm's batch medians (time order kept); None with fewer than
    MIN_PER_BATCH values per batch in either arm."""
    from scipy.stats import ttest_ind

    arms = [np.asarray(x, np.float64) for x in (a, b)]
    arms = [x[np.isfinite(x)] for x in arms]
    if min(len(x) for x in arms) < MIN_PER_BATCH * batches:
        return None
    ma, mb = (batch_medians(x, batches) for x in arms)
    median_a, median_b = (float(np.median(x)) for x in arms)
    ratio = median_b / median_a if median_a > 0 else math.inf
    if np.ptp(ma) == 0 and np.ptp(mb) == 0:  # both constant: t is undefined
        t, df = (0.0 if ma[0] == mb[0] else math.copysign(math.inf, mb[0] - ma[0])), 0.0
        p = 1.0 if ma[0] == mb[0] else 0.0
    else:
        result = ttest_ind(mb, ma, equal_var=False)
        t, df, p = float(result.statistic), float(result.df), float(result.pvalue)
    return MedianComparison(median_a, median_b, ratio, t, df, p, (len(ma), len(mb)))
