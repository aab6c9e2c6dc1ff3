"""Two-arm comparison of failure rates: every figure `compare` prints, and its verdict.

Convention: arm A is the reference; differences are B - A and ratios B / A. The verdict comes
from `soakgate.stats.verdict.decide`, chosen by the design (replicate blocks, one run per arm,
counts only), never by a clustering pre-test; the clustering tests here are descriptive.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from soakgate.errors import UsageError
from soakgate.stats.clustering import DEFAULT_WINDOW, ClusteringResult, clustering_verdict
from soakgate.stats.naive import fisher_test, poisson_exact_test, pooled_z_test
from soakgate.stats.rates import RateSummary, check_counts, summarize_rate
from soakgate.stats.robust import TestResult, batch_means_test, quasi_poisson_test
from soakgate.stats.verdict import INDETERMINATE, Outcomes, Verdict, decide

__all__ = [
    "AdjustedComparison", "Arm", "Comparison", "compare_arms", "compare_with_baseline",
    "fisher_test", "holm_adjust", "poisson_exact_test", "pooled_z_test",
]  # fmt: skip

BoolArray = npt.NDArray[np.bool_]


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
    """Time-ordered 0/1 failures; enables the one-run verdict and the clustering checks."""
    replicates: tuple[tuple[int, int], ...] = ()
    """(events, n) per replicate run or block; 3 or more per arm enable the test over blocks."""
    clustering: ClusteringResult | None = None
    """Precomputed clustering verdict; computed from `sequence` when absent."""
    times: npt.NDArray[np.float64] | None = None
    """When each request of `sequence` ended (one run of one target): arms soaked side by side
    can then be compared window by window (`stats.paired`)."""

    @classmethod
    def from_sequence(
        cls, label: str, sequence: npt.ArrayLike, replicates: Sequence[tuple[int, int]] = ()
    ) -> Arm:
        """An arm whose counts are taken from its time-ordered 0/1 sequence."""
        seq = np.asarray(sequence).astype(bool)
        return cls(label, int(seq.sum()), len(seq), seq, tuple(replicates))

    def outcomes(self) -> Outcomes:
        """The arm as the verdict sees it."""
        return Outcomes(self.events, self.n, self.sequence, self.replicates, self.times)


@dataclass(frozen=True, slots=True)
class Comparison:
    """Everything `compare` prints for two arms, and the verdict with its design and reason."""

    a: RateSummary
    """Reference arm A."""
    b: RateSummary
    """Arm B."""
    labels: tuple[str, str]
    """Labels of A and B."""
    difference: float
    """rate B - rate A."""
    difference_ci: tuple[float, float]
    """CI of the difference (Newcombe hybrid score; assumes independent requests)."""
    ratio: float
    """rate B / rate A (inf when A has no events and B has)."""
    ratio_ci: tuple[float, float]
    """CI of the ratio (log, 0.5-adjusted; assumes independent requests)."""
    tests: dict[str, TestResult]
    """Every test that could run, by name."""
    clustering: tuple[ClusteringResult | None, ClusteringResult | None]
    """Clustering verdicts of A and B (None without a sequence); descriptive only."""
    verdict: Verdict
    """The verdict: differ, no difference or indeterminate, its test, design and reason."""
    alpha: float
    """Two-sided significance level."""
    significant: bool = field(init=False)
    """True when the verdict is DIFFER."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "significant", self.verdict.differ)

    @property
    def verdict_test(self) -> str:
        """Name of the test the verdict rests on."""
        return self.verdict.test

    @property
    def reason(self) -> str:
        """One line: the design, the test and what decided."""
        return self.verdict.reason

    @property
    def p_value(self) -> float:
        """p-value of the verdict test."""
        return self.verdict.p_value


def _intervals(
    a: Arm, b: Arm, confidence: float
) -> tuple[tuple[float, float], tuple[float, float]]:
    from statsmodels.stats.proportion import confint_proportions_2indep

    level = 1.0 - confidence
    diff = confint_proportions_2indep(b.events, b.n, a.events, a.n, compare="diff", alpha=level)
    ratio = confint_proportions_2indep(b.events, b.n, a.events, a.n, compare="ratio", alpha=level)
    return (float(diff[0]), float(diff[1])), (float(ratio[0]), float(ratio[1]))


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


def _tests(a: Arm, b: Arm) -> dict[str, TestResult]:
    counts = (a.events, a.n, b.events, b.n)
    tests = {t.name: t for t in (pooled_z_test(*counts), fisher_test(*counts))}
    tests["poisson_exact"] = poisson_exact_test(*counts)
    if a.sequence is not None and b.sequence is not None:
        batched = batch_means_test(a.sequence, b.sequence)
        if batched is not None:
            tests[batched.name] = batched
    quasi = quasi_poisson_test(a.replicates, b.replicates)
    if quasi is not None:
        tests[quasi.name] = quasi
    return tests


def compare_arms(
    a: Arm,
    b: Arm,
    alpha: float = 0.05,
    confidence: float = 0.95,
    window: int = DEFAULT_WINDOW,
    gap_permutations: int = 199,
    hmm_replicates: int = 0,
    seed: int = 0,
) -> Comparison:
    """Rates, difference, ratio, every test, the descriptive clustering checks and the verdict
    (`soakgate.stats.verdict.decide`, which `compare_outcomes` also calls)."""
    _check_arms(a, b, alpha)
    verdict = decide(a.outcomes(), b.outcomes(), alpha, seed)
    tests = _tests(a, b)
    tests[verdict.test] = verdict.result
    options = {"gap_permutations": gap_permutations, "hmm_replicates": hmm_replicates}
    clustering = (
        _clustering_of(a, alpha, window, seed=seed, **options),
        _clustering_of(b, alpha, window, seed=seed + 1, **options),
    )
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
        verdict=verdict,
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
    """DIFFER at the family-wise alpha after Holm (never for an indeterminate verdict)."""


def holm_adjust(p_values: Sequence[float], alpha: float = 0.05) -> list[tuple[float, bool]]:
    """Holm step-down adjustment (not Holm–Šidák, statsmodels' default): adjusted p-values and
    which are rejected at `alpha`.

    Written here rather than called from statsmodels (`multipletests(method="holm")`, which gives
    the same numbers: tests/stats/test_outcomes.py checks it) because that branch runs
    `gc.collect()` on every call: 0.3-0.6 s in a process holding a report's arrays, paid for
    every gate a campaign or a simulation judges."""
    if not p_values:
        return []
    p = np.asarray(p_values, dtype=np.float64)
    order = np.argsort(p, kind="stable")
    steps = np.maximum.accumulate(p[order] * np.arange(len(p), 0, -1))
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(steps, 1.0)
    return [(float(q), bool(q <= alpha)) for q in adjusted]


def compare_with_baseline(
    baseline: Arm,
    others: Sequence[Arm],
    alpha: float = 0.05,
    window: int = DEFAULT_WINDOW,
    gap_permutations: int = 199,
    hmm_replicates: int = 0,
    seed: int = 0,
) -> list[AdjustedComparison]:
    """Compare every arm with the baseline and control the family-wise error with Holm; an
    indeterminate verdict keeps its p-value in the family but is never DIFFER."""
    options = {"gap_permutations": gap_permutations, "hmm_replicates": hmm_replicates}
    comparisons = [
        compare_arms(baseline, other, alpha, window=window, seed=seed, **options)
        for other in others
    ]
    adjusted = holm_adjust([c.p_value for c in comparisons], alpha)
    return [
        AdjustedComparison(c, p, r and c.verdict.verdict != INDETERMINATE)
        for c, (p, r) in zip(comparisons, adjusted, strict=True)
    ]
