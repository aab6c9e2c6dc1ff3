"""Unit-level reference scoring: are a unit's generations, taken together, less likely under the
reference than the reference's own samples?

A per-generation threshold set at a false-flag rate of 0.1% sees only generations far out in the
tail. Corruption that shifts every token a little (a scaled or lost sublayer, a wrong norm)
moves the whole distribution of scores and crosses that threshold rarely; in aggregate it is
plain. The calibration already holds the reference's own score distribution at the soak's
settings: a reference-like unit has a share p0 of its scores above the calibration's 90th
percentile, p0 = (n - k) / (n + 1) for the order statistic k + 1 of n samples (exactly, over
calibrations: the share is Beta(n - k, k + 1) distributed). The test: the unit's share above it,
against p0, one-sided (a shifted unit scores higher), with a batch-means variance over 12
consecutive batches of the unit's scored rows (valid when dependence between rows is shorter
than a batch, as for the one-run collapse verdict) plus the calibration's own Beta variance;
t with 11 degrees of freedom. Written here: a few lines over scipy's t distribution.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from soakgate.stats.robust import BATCHES, _batch_variance

SHIFT_QUANTILE = 0.9
MIN_ROWS = 10 * BATCHES  # fewer scored rows: too few per batch for the batch-means variance
SHIFTED, LIKE_REFERENCE, TOO_FEW = "shifted", "like the reference", "too few scored rows"


@dataclass(frozen=True, slots=True)
class ShiftResult:
    """A unit's scores against the reference's own, as a whole."""

    above: int
    """Scored rows above the calibration's 90th percentile."""
    scored: int
    """Scored rows."""
    expected: float
    """The share a reference-like unit has above it."""
    statistic: float
    """t of the share's excess over `expected`."""
    p_value: float
    """One-sided p-value (the unit scores higher than the reference)."""
    verdict: str
    """`shifted`, `like the reference` or `too few scored rows`."""
    score: str = "mean surprisal"
    """The per-generation score judged (`typicality` or `mean surprisal`)."""

    @property
    def share(self) -> float:
        """above / scored."""
        return self.above / self.scored if self.scored else math.nan


def expected_share(calibration_n: int, quantile: float = SHIFT_QUANTILE) -> tuple[float, float]:
    """Mean and variance of the share of reference-like scores above the calibration's
    quantile as the report takes it (`ordered[int(q * n)]`, 0-based)."""
    k = min(int(quantile * calibration_n), calibration_n - 1)
    a, b = calibration_n - k, k + 1
    return a / (a + b), a * b / ((a + b) ** 2 * (a + b + 1))


def score_shift(
    scores: npt.NDArray[np.float64], cutoff: float, calibration_n: int, alpha: float = 0.05,
    score: str = "mean surprisal",
) -> ShiftResult:  # fmt: skip
    """The unit-level verdict on a unit's scores in time order, given the calibration's 90th
    percentile `cutoff` and its sample count."""
    from scipy.special import stdtr

    above = scores > cutoff
    scored, count = len(scores), int(above.sum())
    expected, calibration_variance = expected_share(calibration_n)
    if scored < MIN_ROWS:
        return ShiftResult(count, scored, expected, math.nan, math.nan, TOO_FEW, score)
    share, variance, _ = _batch_variance(above, BATCHES)
    if variance == 0.0:
        variance = expected * (1 - expected) / scored
    statistic = (share - expected) / math.sqrt(variance + calibration_variance)
    p_value = float(stdtr(BATCHES - 1, -statistic))
    return ShiftResult(count, scored, expected, statistic, p_value,
                       SHIFTED if p_value < alpha else LIKE_REFERENCE, score)  # fmt: skip
