"""Two-arm tests that assume independent requests: pooled z, Fisher's exact, exact Poisson.

Shown beside the robust tests for reference; only the exact Poisson test ever decides a
verdict, and only for arms without a time order (nothing to measure dependence on).
"""

from __future__ import annotations

from soakgate.stats.robust import TestResult


def pooled_z_test(events_a: int, n_a: int, events_b: int, n_b: int) -> TestResult:
    """Two-proportion z test with pooled variance (assumes independent requests)."""
    from statsmodels.stats.proportion import proportions_ztest

    if events_a + events_b in (0, n_a + n_b):
        return TestResult("pooled_z", 0.0, 1.0, note="no variation")
    z, p = proportions_ztest([events_b, events_a], [n_b, n_a])
    return TestResult("pooled_z", float(z), float(p))


def fisher_test(events_a: int, n_a: int, events_b: int, n_b: int) -> TestResult:
    """Fisher's exact test on the 2x2 table; the statistic is the odds ratio B vs A."""
    from scipy.stats import fisher_exact

    result = fisher_exact([[events_b, n_b - events_b], [events_a, n_a - events_a]])
    odds = float(result.statistic)
    return TestResult("fisher", odds, float(result.pvalue))


def poisson_exact_test(events_a: int, n_a: int, events_b: int, n_b: int) -> TestResult:
    """Exact conditional test of equal Poisson rates: B's share of all events is binomial."""
    from scipy.stats import binomtest

    total = events_a + events_b
    if total == 0:
        return TestResult("poisson_exact", 0.0, 1.0, note="no events")
    result = binomtest(events_b, total, n_b / (n_a + n_b))
    return TestResult("poisson_exact", float(events_b), float(result.pvalue))
