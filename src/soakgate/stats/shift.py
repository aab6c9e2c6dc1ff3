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

Where every row and the calibration hold the soak z (`reference.soak.soak_z`, the score the
per-generation flag judges: mean 0 and variance 1 for the reference's own samples) the verdict
is two tests of it, each at half the level (Bonferroni): the share above the calibration's
90th percentile as above (one-sided), which sees a large shift on a few rows, and the mean
against the calibration's mean (batch-means variance of the unit plus the calibration's
variance of its mean, t with 11 degrees of freedom, two-sided), which sees a small shift on
many (for a share e of rows moved by d, the mean moves by e * d whatever d is; the share above
the 90th percentile gains little while d is under about one standard deviation). A mean
*below* the calibration's is a unit more predictable than the reference's own samples: a model
sharper than the reference (a logit or softmax scale too large), or sampling settings not
honoured. The mean test was one-sided in its first run (BENCHMARKS.md section 17: blind to a
sharper model); two-sided since. A unit whose soak z or calibration lacks either keeps the one
test on the typicality (else the mean surprisal).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from soakgate.stats.robust import BATCHES, batch_variance

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
    """The per-generation score judged (`soak z`, `typicality` or `mean surprisal`)."""
    mean: float | None = None
    """The unit's mean score, where its mean was tested too (the soak z)."""
    expected_mean: float | None = None
    """The calibration's mean score, where the mean was tested."""
    mean_statistic: float | None = None
    """t of the mean's excess over `expected_mean`."""
    share_p: float | None = None
    """One-sided p of the share test alone, where the mean was tested too (`p_value` is then
    the two tests' Bonferroni p: twice the smaller)."""
    mean_p: float | None = None
    """Two-sided p of the mean test alone (its statistic's sign says which way)."""

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
    share, variance, _ = batch_variance(above, BATCHES)
    if variance == 0.0:
        variance = expected * (1 - expected) / scored
    statistic = (share - expected) / math.sqrt(variance + calibration_variance)
    p_value = float(stdtr(BATCHES - 1, -statistic))
    return ShiftResult(count, scored, expected, statistic, p_value,
                       SHIFTED if p_value < alpha else LIKE_REFERENCE, score)  # fmt: skip


def score_shift_z(
    scores: npt.NDArray[np.float64], cutoff: float, calibration_n: int, calibration_mean: float,
    calibration_variance: float, alpha: float = 0.05,
) -> ShiftResult:  # fmt: skip
    """The unit-level verdict on a unit's soak z in time order: the share above the
    calibration's 90th percentile `cutoff` (one-sided) and the mean against `calibration_mean`
    (two-sided; the calibration's `calibration_n` samples have variance
    `calibration_variance`), each at `alpha` / 2."""
    from scipy.special import stdtr

    share = score_shift(scores, cutoff, calibration_n, alpha / 2, "soak z")
    if share.verdict == TOO_FEW:
        return share
    mean, variance, _ = batch_variance(scores, BATCHES)
    variance += calibration_variance / calibration_n
    statistic = (mean - calibration_mean) / math.sqrt(variance) if variance > 0 else 0.0
    mean_p = min(1.0, 2 * float(stdtr(BATCHES - 1, -abs(statistic))))
    p_value = min(1.0, 2 * min(share.p_value, mean_p))
    return dataclasses.replace(
        share, p_value=p_value, verdict=SHIFTED if p_value < alpha else LIKE_REFERENCE, mean=mean,
        expected_mean=calibration_mean, mean_statistic=statistic, share_p=share.p_value,
        mean_p=mean_p,
    )  # fmt: skip
