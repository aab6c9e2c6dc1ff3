"""How far failures stay correlated within one run, measured on counts in long stretches.

Three pieces, each over a time-ordered 0/1 sequence:
- `bin_edges`: equal consecutive stretches of the run (the batches of `stats.robust`);
- `long_range_design_effect`: the variance of counts over windows of growing size (up to an
  eighth of the run), relative to independent requests; the largest is the design effect a
  plan or report should use, because correlation longer than a window is invisible to it;
- `long_range_check`: whether the stretches' counts are correlated across neighbours (lags up
  to a tenth of the run), with an exact permutation null. When they are, one run per arm cannot
  resolve its own dependence and a verdict over it would not be honest.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from soakgate.stats._sampling import monte_carlo_p

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

CHECK_BINS = 40  # stretches per arm for the correlation check (each 1/40 of the run)
CHECK_LAGS = 4  # neighbours up to 4 stretches apart: correlation over up to 1/10 of the run
CHECK_PERMUTATIONS = 199  # exact permutation null; p can reach 1/200 < any usual level
CHECK_LEVEL = 0.05  # correlated when the permutation p-value is at or below this ...
SPARSE_CHECK_LEVEL = 0.3  # ... or below this when the pair has few failures (see check_level)
SPARSE_FAILURES = 80  # at or below this many failures in the pair, the sparse level applies;
DENSE_FAILURES = 160  # from this many on, CHECK_LEVEL; linear in between (no cliff)
SMALLEST_WINDOW = 500  # the variance-time curve starts at windows of 500 requests
LARGEST_FRACTION = 8  # ... and ends at an eighth of the run (at least 8 windows)


def bin_edges(n: int, bins: int) -> IntArray:
    """Start of each of `bins` near-equal consecutive stretches of range(n), then n."""
    bins = max(1, min(bins, n))
    edges: IntArray = (np.arange(bins + 1, dtype=np.int64) * n) // bins
    return edges


@dataclass(frozen=True, slots=True)
class VarianceTime:
    """Design effect measured at one window size."""

    window: int
    """Requests per window."""
    windows: int
    """Number of (overlapping) window positions used."""
    design_effect: float
    """Variance of window counts / that of independent requests at the same rate."""


@dataclass(frozen=True, slots=True)
class LongRangeEstimate:
    """The variance-time curve of one or more sequences and the design effect it implies."""

    curve: tuple[VarianceTime, ...]
    """Design effect at each window size, smallest first."""
    design_effect: float
    """The largest design effect on the curve, floored at 1: what a plan should allow for."""
    window: int
    """Window size at which that design effect was reached."""
    still_rising: bool
    """True when the largest window gave the largest design effect: correlation may reach
    beyond an eighth of the run, so the estimate is a lower bound."""


def _windows(n: int) -> list[int]:
    largest = n // LARGEST_FRACTION
    sizes = []
    size = SMALLEST_WINDOW
    while size < largest:
        sizes.append(size)
        size *= 2
    if largest >= 2:
        sizes.append(largest)
    return sizes


def _overlapping_dispersion(totals: Sequence[IntArray], window: int) -> tuple[float, int]:
    """Pooled variance of moving-window counts over the binomial variance (each sequence, given
    by its running totals, about its own rate); overlapping windows have about 2/3 of the noise
    of disjoint ones."""
    squares, expected, positions = 0.0, 0.0, 0
    for running in totals:
        n = len(running) - 1
        if n < 2 * window:
            continue
        sums = (running[window:] - running[:-window]).astype(np.float64)
        rate = running[-1] / n
        squares += float(((sums - rate * window) ** 2).sum())
        expected += len(sums) * window * rate * (1.0 - rate)
        positions += len(sums)
    if expected <= 0.0:
        return 1.0, positions
    return squares / expected, positions


def long_range_design_effect(sequences: Sequence[BoolArray]) -> LongRangeEstimate:
    """Design effect from windows of 500 requests up to an eighth of the shortest run."""
    usable = [s for s in sequences if len(s) >= 2]
    n = min((len(s) for s in usable), default=0)
    totals = [np.concatenate(([0], np.cumsum(s, dtype=np.int64))) for s in usable]
    curve = []
    for window in _windows(n):
        effect, positions = _overlapping_dispersion(totals, window)
        correction = 1.0 / max(1.0 - window / n, 1e-9)  # the sample mean absorbs window/n of it
        curve.append(VarianceTime(window, positions, effect * correction))
    if not curve:
        return LongRangeEstimate((), 1.0, 0, False)
    best = max(curve, key=lambda point: point.design_effect)
    return LongRangeEstimate(
        tuple(curve),
        max(1.0, best.design_effect),
        best.window,
        best is curve[-1] and len(curve) >= 3 and best.design_effect > 1.0,
    )


@dataclass(frozen=True, slots=True)
class LongRangeCheck:
    """Are counts in neighbouring stretches of the run correlated? (both arms pooled)"""

    statistic: float
    """Sum of the pooled autocorrelations of stretch counts at lags 1..CHECK_LAGS."""
    p_value: float
    """Permutation p-value against failures placed independently of time."""
    correlated: bool
    """p_value <= level: the run does not resolve its own dependence."""
    bins: int
    """Stretches per arm (each about 1/bins of the run)."""
    level: float = CHECK_LEVEL
    """The level the check was judged at (`check_level` of the pair's failures)."""


def check_level(failures: int) -> float:
    """The level at which the correlation check withholds a verdict, for a pair with `failures`
    failures in all.

    With few failures, 40 stretch counts are mostly 0 or 1 and their correlation is nearly
    invisible: absence of evidence is weak evidence of absence. Measured (bench_calibration,
    resets every ~5,000 requests at 13,000 per arm, ~45 failures per pair): at level 0.05 the
    check misses often enough that 12% of equal pairs end as DIFFER; at 0.3, 5%. With 160 or
    more failures the check sees the same dependence at 0.05, and the stricter level would
    only cost power. The price is more INDETERMINATE verdicts for sparse pairs, which is the
    honest answer for them: run longer or replicate.
    """
    if failures <= SPARSE_FAILURES:
        return SPARSE_CHECK_LEVEL
    if failures >= DENSE_FAILURES:
        return CHECK_LEVEL
    share = (DENSE_FAILURES - failures) / (DENSE_FAILURES - SPARSE_FAILURES)
    return CHECK_LEVEL + (SPARSE_CHECK_LEVEL - CHECK_LEVEL) * share


def _autocorrelation_sum(
    counts: Sequence[FloatArray], lags: int, expected: Sequence[FloatArray] | None = None
) -> FloatArray:
    """Pooled sum over lags 1..lags of the autocorrelation of each row's residual counts.

    `counts` holds one (replicates x bins) array per sequence; returns one value per replicate.
    The residual is from `expected` (one row of bins per sequence) where given, else from each
    row's mean. A replicate with no residual at all (nothing varies) gives 0.
    """
    numerator: FloatArray | float = 0.0
    denominator: FloatArray | float = 0.0
    for i, rows in enumerate(counts):
        centre = rows.mean(axis=1, keepdims=True) if expected is None else expected[i][None, :]
        residual = rows - centre
        denominator = denominator + (residual * residual).sum(axis=1)
        for lag in range(1, min(lags, rows.shape[1] - 1) + 1):
            numerator = numerator + (residual[:, lag:] * residual[:, :-lag]).sum(axis=1)
    num = np.asarray(numerator, dtype=np.float64)
    den = np.asarray(denominator, dtype=np.float64)
    result: FloatArray = np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)
    return result


def long_range_check(
    sequences: Sequence[BoolArray], seed: int = 0, permutations: int = CHECK_PERMUTATIONS
) -> LongRangeCheck:
    """Correlation of stretch counts over lags up to a tenth of each run, against the exact
    null of failures placed at random positions (each sequence keeps its number of failures)."""
    rng = np.random.default_rng(seed)
    observed, null, expected = [], [], []
    for seq in sequences:
        bins = min(CHECK_BINS, max(1, len(seq) // 2))
        edges = bin_edges(len(seq), bins)
        counts = np.add.reduceat(seq.astype(np.int64), edges[:-1]).astype(np.float64)
        observed.append(counts[None, :])
        shares = np.diff(edges) / len(seq)
        failures = int(seq.sum())
        # residuals from what random placement expects of each stretch (its share of the
        # failures), not from the mean stretch: stretches differ by a request when the run is
        # not a multiple of 40, and a run failing on (nearly) every request then had counts that
        # followed the stretches' lengths, a pattern the check read as correlation (100% vs 0%
        # was INDETERMINATE on 70 twin pairs). A function of counts and shares only, so a
        # plan's compact runs keep the full runs' verdicts (stats.segments).
        expected.append(failures * shares)
        null.append(rng.multinomial(failures, shares, size=permutations).astype(np.float64))
    statistic = float(_autocorrelation_sum(observed, CHECK_LAGS, expected)[0])
    level = check_level(sum(int(seq.sum()) for seq in sequences))
    if permutations < 1:
        return LongRangeCheck(statistic, 1.0, False, CHECK_BINS, level)
    spread = sum(float(((o[0] - e) ** 2).sum()) for o, e in zip(observed, expected, strict=True))
    if spread == 0.0:  # every stretch holds exactly its share: nothing here can be correlated
        return LongRangeCheck(statistic, 1.0, False, CHECK_BINS, level)
    replicated = _autocorrelation_sum(null, CHECK_LAGS, expected)
    p_value = monte_carlo_p(replicated, statistic)
    return LongRangeCheck(statistic, p_value, p_value <= level, CHECK_BINS, level)


def design_effect_of_variance(variance: float, rate: float, n: int) -> float:
    """Design effect implied by the variance of a rate estimated from n requests."""
    binomial = rate * (1.0 - rate) / n
    if not binomial > 0.0 or not math.isfinite(variance):
        return 1.0
    return max(1.0, variance / binomial)
