"""Cluster-robust two-arm tests: batch-means (window) standard errors and quasi-Poisson GLM.

With bursty failures requests are not independent; the honest unit of replication is a
window of requests or a whole run. These tests estimate the variance from those units.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from soakgate.stats.clustering import DEFAULT_WINDOW, window_length

BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class TestResult:
    """One two-arm test: statistic, two-sided p-value and, for t tests, degrees of freedom."""

    __test__ = False  # not a pytest test class, despite the name

    name: str
    """`pooled_z`, `fisher`, `poisson_exact`, `batch_means` or `quasi_poisson`."""
    statistic: float
    """z, t, or the odds ratio (Fisher) / events in B (exact conditional test)."""
    p_value: float
    """Two-sided p-value."""
    df: float | None = None
    """Degrees of freedom of a t reference distribution, None for z and exact tests."""
    note: str = ""
    """Detail worth showing (e.g. windows used, dispersion estimate)."""
    overdispersion_p: float | None = None
    """Quasi-Poisson only: p-value of Pearson's X2 against the Poisson variance (between runs)."""


def _batch_variance(seq: BoolArray, window: int) -> tuple[float, float, int]:
    """Rate, its batch-means variance (ratio estimator over windows) and the window count."""
    n = len(seq)
    starts = np.arange(0, n, window)
    events = np.add.reduceat(seq.astype(np.int64), starts).astype(np.float64)
    sizes = np.diff(np.append(starts, n)).astype(np.float64)
    rate = float(events.sum()) / n
    windows = len(starts)
    if windows < 2:
        return rate, math.nan, windows
    residual = events - rate * sizes
    variance = windows / (windows - 1) * float((residual**2).sum()) / n**2
    return rate, variance, windows


def batch_means_test(
    seq_a: BoolArray, seq_b: BoolArray, window: int = DEFAULT_WINDOW
) -> TestResult | None:
    """Welch t on the rate difference with variances from each arm's windows (B minus A)."""
    from scipy.stats import t as student_t

    parts = [_batch_variance(s, window_length(len(s), window)) for s in (seq_a, seq_b)]
    (rate_a, var_a, win_a), (rate_b, var_b, win_b) = parts
    if math.isnan(var_a) or math.isnan(var_b):
        return None
    note = f"{win_a} + {win_b} windows"
    if var_a + var_b == 0.0:
        return TestResult("batch_means", 0.0, 1.0, float(win_a + win_b - 2), note + ", no variance")
    statistic = (rate_b - rate_a) / math.sqrt(var_a + var_b)
    denominator = var_a**2 / (win_a - 1) + var_b**2 / (win_b - 1)
    dof = (var_a + var_b) ** 2 / denominator
    p_value = float(2.0 * student_t.sf(abs(statistic), dof))
    return TestResult("batch_means", statistic, p_value, dof, note)


def quasi_poisson_test(
    replicates_a: Sequence[tuple[int, int]], replicates_b: Sequence[tuple[int, int]]
) -> TestResult | None:
    """Quasi-Poisson GLM over replicate runs (events, n): log rate ratio B/A, t on residual df."""
    import statsmodels.api as sm
    from scipy.stats import chi2
    from scipy.stats import t as student_t
    from statsmodels.tools.sm_exceptions import ConvergenceWarning, PerfectSeparationWarning

    rows = [(k, n, 0.0) for k, n in replicates_a] + [(k, n, 1.0) for k, n in replicates_b]
    totals_a = sum(k for k, _ in replicates_a)
    totals_b = sum(k for k, _ in replicates_b)
    if min(len(replicates_a), len(replicates_b)) < 2 or len(rows) < 5 or 0 in (totals_a, totals_b):
        return None  # too few runs for a residual df, or a zero arm makes the MLE diverge
    data = np.array(rows, dtype=np.float64)
    design = sm.add_constant(data[:, 2])
    model = sm.GLM(data[:, 0], design, family=sm.families.Poisson(), offset=np.log(data[:, 1]))
    with warnings.catch_warnings():
        # A degenerate fit is reported as "not applicable", not raised as an error.
        warnings.simplefilter("error", ConvergenceWarning)
        warnings.simplefilter("error", PerfectSeparationWarning)
        try:
            fit = model.fit(scale="X2")
        except (ConvergenceWarning, PerfectSeparationWarning):
            return None
    dof = float(fit.df_resid)
    scale = float(fit.scale)
    if not scale > 0.0:
        return None
    statistic = float(fit.params[1] / fit.bse[1])
    p_value = float(2.0 * student_t.sf(abs(statistic), dof))
    overdispersion = float(chi2.sf(float(fit.pearson_chi2), dof))
    note = f"{len(rows)} runs, dispersion {scale:.3g}, log ratio {float(fit.params[1]):.3g}"
    return TestResult("quasi_poisson", statistic, p_value, dof, note, overdispersion)
