"""Do failures cluster in time? Descriptive tests on one target's time-ordered 0/1 sequence.

The verdict of a comparison never depends on these tests (`soakgate.stats.verdict` decides by
design); they describe a unit in the report. Up to three tests, combined by Bonferroni so that
"clustered" is called on independent data at most alpha of the time: the index of dispersion
over windows (chi-square), a gap test against the geometric distribution (permutation null),
and, when asked for, a two-state HMM likelihood-ratio test (parametric bootstrap; slow, and
only run with enough replicates that its p-value can fall below its Bonferroni share).
Runs tests and first-order Markov tests are poorly calibrated at these rates and absent.

The design effect shown is the long-range one (`dependence.long_range_design_effect`):
correlation longer than the dispersion test's window is invisible to that window.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from soakgate.errors import UsageError
from soakgate.stats._sampling import IntArray, monte_carlo_p, random_subsets
from soakgate.stats.dependence import LongRangeEstimate, long_range_design_effect
from soakgate.stats.hmm import HmmTest, hmm_test

BoolArray = npt.NDArray[np.bool_]
DEFAULT_WINDOW = 500
MIN_WINDOWS = 20


@dataclass(frozen=True, slots=True)
class TestOutcome:
    """One clustering test: its statistic and p-value (1.0 when it cannot be computed)."""

    __test__ = False  # not a pytest test class, despite the name

    name: str
    """`dispersion`, `gap` or `hmm`."""
    statistic: float
    """Dispersion chi-square, gap KS distance, or HMM likelihood ratio."""
    p_value: float
    """One-sided p-value for 'more clustered than independent'."""
    note: str = ""
    """Why the test could not run, or detail worth showing."""


@dataclass(frozen=True, slots=True)
class ClusteringResult:
    """Combined clustering verdict for one sequence, with the variance inflation it implies."""

    n: int
    """Length of the sequence (requests)."""
    events: int
    """Number of failures in it."""
    clustered: bool
    """True when any test's p-value is below alpha / number of tests (Bonferroni)."""
    alpha: float
    """Family-wise level of the combined verdict."""
    window: int
    """Window length (requests) used for the dispersion test."""
    windows: int
    """Number of complete windows."""
    design_effect: float
    """Long-range design effect: the largest variance of window counts over their binomial
    variance for windows of 500 requests up to an eighth of the run (floored at 1)."""
    effective_n: float
    """n / design_effect: the number of independent requests the data are worth."""
    tests: tuple[TestOutcome, ...]
    """Every test that ran, in order."""
    hmm: HmmTest | None
    """The HMM fit (burst rate, mean burst length) when that test ran."""
    reason: str
    """One line explaining the verdict."""
    long_range: LongRangeEstimate | None = None
    """The variance-time curve the design effect comes from."""


def as_sequence(values: Sequence[int] | Sequence[bool] | npt.ArrayLike) -> BoolArray:
    """Validate a time-ordered 0/1 sequence and return it as a boolean array."""
    array = np.asarray(values)
    if array.ndim != 1 or array.size == 0:
        raise UsageError("a clustering sequence must be a non-empty 1-D array of 0/1")
    if not np.isin(array, (0, 1)).all():
        raise UsageError("a clustering sequence may hold only 0 and 1")
    return array.astype(bool)


def window_length(n: int, window: int = DEFAULT_WINDOW, min_windows: int = MIN_WINDOWS) -> int:
    """The requested window, shrunk so that at least `min_windows` complete windows fit."""
    if window < 1:
        raise UsageError(f"window must be >= 1, got {window}")
    return max(1, min(window, n // min_windows))


def window_counts(seq: BoolArray, window: int) -> IntArray:
    """Failures per complete window (the trailing partial window is dropped)."""
    windows = len(seq) // window
    counts: IntArray = seq[: windows * window].reshape(windows, window).sum(axis=1)
    return counts.astype(np.int64)


def dispersion_test(seq: BoolArray, window: int = DEFAULT_WINDOW) -> tuple[TestOutcome, float]:
    """Index-of-dispersion chi-square over windows; also returns the design effect."""
    from scipy.stats import chi2

    width = window_length(len(seq), window)
    counts = window_counts(seq, width)
    windows, total = len(counts), int(counts.sum())
    rate = total / (windows * width) if windows else 0.0
    if windows < 2 or rate in (0.0, 1.0):
        return TestOutcome("dispersion", 0.0, 1.0, "no variation to test"), 1.0
    statistic = float(((counts - counts.mean()) ** 2).sum() / (width * rate * (1.0 - rate)))
    dof = windows - 1
    return TestOutcome("dispersion", statistic, float(chi2.sf(statistic, dof))), statistic / dof


def _gap_distance(positions: IntArray, n: int) -> npt.NDArray[np.float64]:
    """KS distance between each row's gap distribution and the geometric fitted to it."""
    gaps = np.sort(np.diff(positions, axis=1), axis=1).astype(np.float64)
    count = gaps.shape[1]
    success = 1.0 / gaps.mean(axis=1, keepdims=True)
    cdf_at = 1.0 - (1.0 - success) ** gaps
    cdf_before = 1.0 - (1.0 - success) ** (gaps - 1.0)
    ranks = np.arange(1, count + 1) / count
    above = (ranks - cdf_at).max(axis=1)
    below = (cdf_before - (ranks - 1.0 / count)).max(axis=1)
    result: npt.NDArray[np.float64] = np.maximum(above, below)
    return result


def gap_test(seq: BoolArray, permutations: int = 199, seed: int = 0) -> TestOutcome:
    """Inter-arrival gaps vs the geometric distribution; null from random permutations."""
    positions = np.flatnonzero(seq).astype(np.int64)
    k, n = len(positions), len(seq)
    if k < 3 or k == n:
        return TestOutcome("gap", 0.0, 1.0, "fewer than 3 events")
    observed = float(_gap_distance(positions[None, :], n)[0])
    null = _gap_distance(random_subsets(np.random.default_rng(seed), n, k, permutations), n)
    p_value = monte_carlo_p(null, observed)
    return TestOutcome("gap", observed, p_value)


def smallest_hmm_replicates(alpha: float, tests: int = 3) -> int:
    """Fewest bootstrap replicates whose smallest p-value, 1/(R+1), is below alpha/tests."""
    return math.floor(tests / alpha + 1e-9)


def check_hmm_replicates(replicates: int, alpha: float = 0.05, tests: int = 3) -> None:
    """Refuse an HMM bootstrap too small ever to count (e.g. 59 at alpha 0.05: 1/60 = 0.05/3)."""
    needed = smallest_hmm_replicates(alpha, tests)
    if 0 < replicates < needed:
        raise UsageError(
            f"with {replicates} HMM replicates the smallest p-value, 1/{replicates + 1}, cannot "
            f"fall below alpha/{tests} = {alpha / tests:.4g}; use 0 (skip) or at least {needed}"
        )


def clustering_verdict(
    values: Sequence[int] | Sequence[bool] | npt.ArrayLike,
    alpha: float = 0.05,
    window: int = DEFAULT_WINDOW,
    gap_permutations: int = 199,
    hmm_replicates: int = 0,
    seed: int = 0,
) -> ClusteringResult:
    """Combine the dispersion, gap and (when asked for) HMM tests; 0 skips the gap or HMM."""
    seq = as_sequence(values)
    width = window_length(len(seq), window)
    tests_run = 1 + (gap_permutations > 0) + (hmm_replicates > 0)
    check_hmm_replicates(hmm_replicates, alpha, tests_run)
    dispersion, _ = dispersion_test(seq, width)
    tests = [dispersion]
    if gap_permutations > 0:
        tests.append(gap_test(seq, gap_permutations, seed))
    hmm = hmm_test(seq, hmm_replicates, seed) if hmm_replicates > 0 else None
    if hmm is not None:
        tests.append(TestOutcome("hmm", hmm.fit.lr_statistic, hmm.p_value))
    level = alpha / len(tests)
    hits = [t for t in tests if t.p_value < level]
    if hits:
        found = ", ".join(f"{t.name} p={t.p_value:.3g}" for t in hits)
        reason = f"clustered: {found} < {level:.3g} (alpha {alpha} / {len(tests)} tests)"
    else:
        best = min(tests, key=lambda t: t.p_value)
        reason = f"no clustering detected (smallest p: {best.name} p={best.p_value:.3g})"
    long_range = long_range_design_effect([seq])
    inflation = long_range.design_effect
    return ClusteringResult(
        n=len(seq),
        events=int(seq.sum()),
        clustered=bool(hits),
        alpha=alpha,
        window=width,
        windows=len(seq) // width,
        design_effect=inflation,
        effective_n=len(seq) / inflation,
        tests=tuple(tests),
        hmm=hmm,
        reason=reason,
        long_range=long_range,
    )
