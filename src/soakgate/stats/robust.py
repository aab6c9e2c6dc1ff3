"""Cluster-robust two-arm tests: few-batch means within one run, quasi-Poisson over blocks.

With bursty failures requests are not independent; the honest unit of replication is a long
stretch of a run or, better, a whole block (a run of a freshly started server). These tests
take their variance from those units and their critical values from a t distribution with
the degrees of freedom the units give, not from the normal.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from soakgate.stats.dependence import bin_edges

BoolArray = npt.NDArray[np.bool_]
BATCHES = 12  # few long batches per arm: each a twelfth of the run (Welch df about 22)


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
    """Detail worth showing (e.g. batches used, dispersion estimate)."""
    overdispersion_p: float | None = None
    """Quasi-Poisson only: p-value of Pearson's X2 against the Poisson variance (between runs)."""
    standard_error: float | None = None
    """Standard error of the rate difference B - A the test used (t tests only)."""


def batch_variance(values: npt.NDArray[Any], batches: int) -> tuple[float, float, int]:
    """Mean of `values` (a failure sequence: its rate), the batch-means variance of that mean
    (ratio estimator over `batches` consecutive stretches) and the batch count (variance NaN
    under 2 batches)."""
    n = len(values)
    edges = bin_edges(n, batches)
    sums = np.add.reduceat(values.astype(np.float64), edges[:-1])
    sizes = np.diff(edges).astype(np.float64)
    mean = float(values.mean())
    used = len(sums)
    if used < 2:
        return mean, math.nan, used
    residual = sums - mean * sizes
    return mean, used / (used - 1) * float((residual**2).sum()) / n**2, used


def batch_means_test(
    seq_a: BoolArray, seq_b: BoolArray, batches: int = BATCHES
) -> TestResult | None:
    """Welch t on the rate difference B - A, each arm's variance from `batches` consecutive
    stretches of its run; Satterthwaite degrees of freedom. None for runs under 4 requests."""
    from scipy.special import stdtr  # the t distribution's cdf: scipy.stats' t.sf at 1/40 the cost

    (rate_a, var_a, used_a), (rate_b, var_b, used_b) = (
        batch_variance(s, batches) for s in (seq_a, seq_b)
    )
    if math.isnan(var_a) or math.isnan(var_b):
        return None
    dof_floor = float(used_a + used_b - 2)
    note = f"{used_a} + {used_b} batches of ~{len(seq_a) // used_a:,} and ~{len(seq_b) // used_b:,}"
    variance = var_a + var_b
    difference = rate_b - rate_a
    if variance == 0.0:
        if difference == 0.0:
            return TestResult("batch_means", 0.0, 1.0, dof_floor, note + ", no variance", None, 0.0)
        # Every batch alike (e.g. no failure in A, one per batch in B): fall back on the
        # binomial variance at the pooled rate rather than claim infinite precision.
        pooled = (rate_a * len(seq_a) + rate_b * len(seq_b)) / (len(seq_a) + len(seq_b))
        variance = pooled * (1.0 - pooled) * (1.0 / len(seq_a) + 1.0 / len(seq_b))
        var_a = var_b = variance / 2.0
    statistic = difference / math.sqrt(variance)
    denominator = var_a**2 / (used_a - 1) + var_b**2 / (used_b - 1)
    dof = variance**2 / denominator if denominator > 0 else dof_floor
    p_value = float(2.0 * stdtr(dof, -abs(statistic)))
    return TestResult("batch_means", statistic, p_value, dof, note, None, math.sqrt(variance))


def quasi_poisson_test(
    replicates_a: Sequence[tuple[int, int]], replicates_b: Sequence[tuple[int, int]]
) -> TestResult | None:
    """Quasi-Poisson log-linear model over replicate blocks (events, n): the log rate ratio B/A
    with Pearson's dispersion, and t on the blocks' residual degrees of freedom.

    Closed form of the two-group GLM (statsmodels' `GLM(..., Poisson).fit(scale="X2")` gives
    the same numbers); an arm without any failure counts as half a failure, so that a wholly
    clean arm against a failing one is still a finite, testable ratio. None for fewer than 2
    blocks in an arm or no residual degrees of freedom.
    """
    from scipy.special import chdtrc, stdtr  # chi2.sf and t.cdf without scipy.stats' overhead

    if min(len(replicates_a), len(replicates_b)) < 2:
        return None
    dof = len(replicates_a) + len(replicates_b) - 2
    events = [sum(k for k, _ in arm) for arm in (replicates_a, replicates_b)]
    sizes = [sum(n for _, n in arm) for arm in (replicates_a, replicates_b)]
    if 0 in sizes:
        return None
    note = f"{len(replicates_a)} + {len(replicates_b)} blocks"
    if events == [0, 0]:
        return TestResult("quasi_poisson", 0.0, 1.0, float(dof), note + ", no failures")
    pearson = 0.0
    for arm, total, size in zip((replicates_a, replicates_b), events, sizes, strict=True):
        rate = total / size
        pearson += sum((k - n * rate) ** 2 / (n * rate) for k, n in arm if rate > 0)
    scale = pearson / dof
    adjusted = [max(float(total), 0.5) for total in events]
    log_ratio = math.log(adjusted[1] / sizes[1]) - math.log(adjusted[0] / sizes[0])
    spread = math.sqrt(max(scale, 1e-12) * (1.0 / adjusted[0] + 1.0 / adjusted[1]))
    statistic = log_ratio / spread
    p_value = float(2.0 * stdtr(dof, -abs(statistic)))
    overdispersion = float(chdtrc(dof, pearson))
    rates = [total / size for total, size in zip(events, sizes, strict=True)]
    error = math.sqrt(max(scale, 0.0) * (rates[0] / sizes[0] + rates[1] / sizes[1]))
    note += f", dispersion {scale:.3g}, log ratio {log_ratio:.3g}"
    return TestResult("quasi_poisson", statistic, p_value, float(dof), note, overdispersion, error)
