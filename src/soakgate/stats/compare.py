"""Two-arm comparison of failure rates and the choice of the test its verdict rests on.

Convention: arm A is the reference; differences are B - A and ratios B / A.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from soakgate.errors import UsageError
from soakgate.stats.clustering import DEFAULT_WINDOW, ClusteringResult, clustering_verdict
from soakgate.stats.rates import RateSummary, check_counts, summarize_rate
from soakgate.stats.robust import TestResult, batch_means_test, quasi_poisson_test

BoolArray = npt.NDArray[np.bool_]
NAIVE_MIN_EXPECTED = 5.0  # below this expected count per arm the z approximation is poor
ALPHA_CLUSTERING = 0.05  # level of the between-runs overdispersion check


@dataclass(frozen=True, slots=True)
class Arm:
    """One arm of a comparison: counts, and optionally its time order and replicate runs."""

    label: str
    """Label shown in output (configuration label, optionally `@target`)."""
    events: int
    """Failures (collapses) in the arm."""
    n: int
    """Generations in the arm."""
    sequence: BoolArray | None = None
    """Time-ordered 0/1 failures; enables clustering checks and batch-means errors."""
    replicates: tuple[tuple[int, int], ...] = ()
    """(events, n) per replicate run; enables the quasi-Poisson GLM."""
    clustering: ClusteringResult | None = None
    """Precomputed clustering verdict; computed from `sequence` when absent."""

    @classmethod
    def from_sequence(
        cls, label: str, sequence: npt.ArrayLike, replicates: Sequence[tuple[int, int]] = ()
    ) -> Arm:
        """An arm whose counts are taken from its time-ordered 0/1 sequence."""
        seq = np.asarray(sequence).astype(bool)
        return cls(label, int(seq.sum()), len(seq), seq, tuple(replicates))


@dataclass(frozen=True, slots=True)
class Comparison:
    """Everything `compare` prints for two arms, and which test the verdict uses and why."""

    a: RateSummary
    """Reference arm A."""
    b: RateSummary
    """Arm B."""
    labels: tuple[str, str]
    """Labels of A and B."""
    difference: float
    """rate B - rate A."""
    difference_ci: tuple[float, float]
    """CI of the difference (Newcombe hybrid score)."""
    ratio: float
    """rate B / rate A (inf when A has no events and B has)."""
    ratio_ci: tuple[float, float]
    """CI of the ratio (log, 0.5-adjusted)."""
    tests: dict[str, TestResult]
    """Every test that could run, by name."""
    clustering: tuple[ClusteringResult | None, ClusteringResult | None]
    """Clustering verdicts of A and B (None without a sequence)."""
    verdict_test: str
    """Name of the test the verdict rests on."""
    reason: str
    """One line: why that test."""
    alpha: float
    """Two-sided significance level."""
    significant: bool = field(init=False)
    """True when the verdict test's p-value is below alpha."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "significant", self.p_value < self.alpha)

    @property
    def p_value(self) -> float:
        """p-value of the verdict test."""
        return self.tests[self.verdict_test].p_value


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


def _intervals(
    a: Arm, b: Arm, confidence: float
) -> tuple[tuple[float, float], tuple[float, float]]:
    from statsmodels.stats.proportion import confint_proportions_2indep

    level = 1.0 - confidence
    diff = confint_proportions_2indep(b.events, b.n, a.events, a.n, compare="diff", alpha=level)
    ratio = confint_proportions_2indep(b.events, b.n, a.events, a.n, compare="ratio", alpha=level)
    return (float(diff[0]), float(diff[1])), (float(ratio[0]), float(ratio[1]))


def _naive_choice(a: Arm, b: Arm) -> tuple[str, str]:
    expected = (a.events + b.events) * min(a.n, b.n) / (a.n + b.n)
    if expected < NAIVE_MIN_EXPECTED:
        return "fisher", f"expected events per arm {expected:.3g} < 5: Fisher exact"
    return "pooled_z", "pooled z"


def choose_verdict_test(
    a: Arm,
    b: Arm,
    tests: dict[str, TestResult],
    clustering: tuple[ClusteringResult | None, ClusteringResult | None],
) -> tuple[str, str]:
    """Pick the test the verdict uses: robust when either arm clusters, else naive or exact."""
    naive, naive_reason = _naive_choice(a, b)
    clustered = [(arm, c) for arm, c in zip((a, b), clustering, strict=True) if c and c.clustered]
    found = "; ".join(f"arm {arm.label} ({c.reason})" for arm, c in clustered)
    quasi = tests.get("quasi_poisson")
    between_runs = quasi is not None and (quasi.overdispersion_p or 1.0) < ALPHA_CLUSTERING
    if quasi is not None and (clustered or between_runs):
        why = found or f"overdispersion between runs (p={quasi.overdispersion_p:.3g})"
        return "quasi_poisson", f"clustering: {why}: quasi-Poisson GLM over runs, t({quasi.df:g})"
    if not clustered:
        if clustering[0] is None or clustering[1] is None:
            return naive, f"no time-ordered sequence, independence assumed: {naive_reason}"
        return naive, f"no clustering detected in either arm: {naive_reason}"
    if "batch_means" in tests:
        return "batch_means", f"clustering in {found}: batch-means t over windows"
    return naive, f"clustering in {found} but no windows or runs to be robust: {naive_reason}"


def _clustering_of(arm: Arm, alpha: float, window: int, **options: int) -> ClusteringResult | None:
    if arm.clustering is not None or arm.sequence is None:
        return arm.clustering
    return clustering_verdict(arm.sequence, alpha, window, **options)


def _check_arms(a: Arm, b: Arm, alpha: float) -> None:
    for arm in (a, b):
        check_counts(arm.events, arm.n)
        seq = arm.sequence
        if seq is not None and (len(seq), int(seq.sum())) != (arm.n, arm.events):
            raise UsageError(f"arm {arm.label}: sequence does not match its counts")
    if not 0.0 < alpha < 1.0:
        raise UsageError(f"alpha must be in (0, 1), got {alpha}")


def compare_arms(
    a: Arm,
    b: Arm,
    alpha: float = 0.05,
    confidence: float = 0.95,
    window: int = DEFAULT_WINDOW,
    gap_permutations: int = 199,
    hmm_replicates: int = 59,
    seed: int = 0,
) -> Comparison:
    """Rates, difference, ratio, naive, exact and robust tests, and the verdict's choice."""
    _check_arms(a, b, alpha)
    counts = (a.events, a.n, b.events, b.n)
    tests = {t.name: t for t in (pooled_z_test(*counts), fisher_test(*counts))}
    tests["poisson_exact"] = poisson_exact_test(*counts)
    if a.sequence is not None and b.sequence is not None:
        robust = batch_means_test(a.sequence, b.sequence, window)
        if robust is not None:
            tests[robust.name] = robust
    quasi = quasi_poisson_test(a.replicates, b.replicates)
    if quasi is not None:
        tests[quasi.name] = quasi
    options = {"gap_permutations": gap_permutations, "hmm_replicates": hmm_replicates}
    clustering = (
        _clustering_of(a, alpha, window, seed=seed, **options),
        _clustering_of(b, alpha, window, seed=seed + 1, **options),
    )
    verdict_test, reason = choose_verdict_test(a, b, tests, clustering)
    difference_ci, ratio_ci = _intervals(a, b, confidence)
    rate_a, rate_b = a.events / a.n, b.events / b.n
    ratio = rate_b / rate_a if rate_a > 0 else (math.inf if rate_b > 0 else math.nan)
    return Comparison(
        a=summarize_rate(a.events, a.n, confidence),
        b=summarize_rate(b.events, b.n, confidence),
        labels=(a.label, b.label),
        difference=rate_b - rate_a,
        difference_ci=difference_ci,
        ratio=ratio,
        ratio_ci=ratio_ci,
        tests=tests,
        clustering=clustering,
        verdict_test=verdict_test,
        reason=reason,
        alpha=alpha,
    )


@dataclass(frozen=True, slots=True)
class AdjustedComparison:
    """One arm compared with the baseline, with its Holm-adjusted p-value."""

    comparison: Comparison
    """The two-arm comparison (A = baseline)."""
    adjusted_p: float
    """Holm-adjusted p-value of the verdict test."""
    significant: bool
    """Rejected at the family-wise alpha after Holm."""


def holm_adjust(p_values: Sequence[float], alpha: float = 0.05) -> list[tuple[float, bool]]:
    """Holm step-down adjustment (explicitly 'holm': statsmodels' default is Holm–Šidák)."""
    from statsmodels.stats.multitest import multipletests

    if not p_values:
        return []
    reject, adjusted, _, _ = multipletests(list(p_values), alpha=alpha, method="holm")
    return [(float(p), bool(r)) for p, r in zip(adjusted, reject, strict=True)]


def compare_with_baseline(
    baseline: Arm,
    others: Sequence[Arm],
    alpha: float = 0.05,
    window: int = DEFAULT_WINDOW,
    gap_permutations: int = 199,
    hmm_replicates: int = 59,
) -> list[AdjustedComparison]:
    """Compare every arm with the baseline and control the family-wise error with Holm."""
    options = {"gap_permutations": gap_permutations, "hmm_replicates": hmm_replicates}
    comparisons = [
        compare_arms(baseline, other, alpha, window=window, **options) for other in others
    ]
    adjusted = holm_adjust([c.p_value for c in comparisons], alpha)
    return [AdjustedComparison(c, p, r) for c, (p, r) in zip(comparisons, adjusted, strict=True)]
