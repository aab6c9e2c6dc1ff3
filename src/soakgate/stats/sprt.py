"""Wald's sequential probability ratio test for one configuration's failure rate, with error
bounds that hold at every look (Ville's inequality), for the probes of a configuration search.

A probe asks: does this configuration fail at the failing configuration's rate (at least
`p_fail`) or at the clean one's (at most `p_clean`)? The log-likelihood ratio of `p_fail`
against `p_clean` over the probe's requests is a supermartingale under any rate <= p_clean, so
the chance that it *ever* reaches log(1/a) is at most a, however often it is looked at (after
every block here); symmetrically the chance that it ever falls to log(b) under any rate >=
p_fail is at most b. Only a probe that reaches neither bound by `max_requests` is decided
without that guarantee (by the sign of its evidence; it is marked `truncated`).

Clustered failures make one request's evidence count for less: `design_effect` divides the
log-likelihood ratio (a quasi-likelihood correction; 1 assumes independent requests).
Written by hand: statsmodels and scipy have no sequential binomial test.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats as scipy_stats

FAILS = "fails"
CLEAN = "clean"


@dataclass(frozen=True, slots=True)
class ProbeDesign:
    """The sequential test every probe of a search applies."""

    p_clean: float
    """A rate at or below this is `clean` (wrongly called `fails` with chance <= fail_error)."""
    p_fail: float
    """A rate at or above this `fails` (wrongly called `clean` with chance <= clean_error)."""
    fail_error: float
    """Bound on calling a clean configuration failing."""
    clean_error: float
    """Bound on calling a failing configuration clean."""
    max_requests: int
    """Requests after which an undecided probe is decided by the sign of its evidence."""
    design_effect: float = 1.0
    """Variance inflation of clustered failures; divides the evidence."""

    @property
    def upper(self) -> float:
        """Evidence at which a probe `fails`."""
        return math.log(1.0 / self.fail_error)

    @property
    def lower(self) -> float:
        """Evidence at which a probe is `clean`."""
        return math.log(self.clean_error)

    def _steps(self) -> tuple[float, float]:
        """The evidence one failure and one success add (before the design effect)."""
        per_failure = math.log(self.p_fail / self.p_clean)
        per_success = math.log((1.0 - self.p_fail) / (1.0 - self.p_clean))
        return per_failure, per_success

    def evidence(self, failures: int, answered: int) -> float:
        """The log-likelihood ratio of p_fail against p_clean for `failures` of `answered`."""
        per_failure, per_success = self._steps()
        llr = failures * per_failure + (answered - failures) * per_success
        return llr / self.design_effect

    def expected_requests(self, rate: float) -> float:
        """Wald's approximation of the requests a probe at `rate` needs (no overshoot)."""
        per_failure, per_success = self._steps()
        drift = (rate * per_failure + (1.0 - rate) * per_success) / self.design_effect
        if abs(drift) < 1e-15:
            return float(self.max_requests)
        bound = self.upper if drift > 0 else -self.lower
        return min(float(self.max_requests), bound / abs(drift))


@dataclass(frozen=True, slots=True)
class ProbeDecision:
    """Where one probe's evidence stands."""

    outcome: str | None
    """`fails`, `clean`, or None while undecided."""
    evidence: float
    truncated: bool = False
    """Decided at `max_requests` without reaching a bound (no error guarantee)."""


def decide(design: ProbeDesign, failures: int, answered: int) -> ProbeDecision:
    """The probe's decision after `failures` of `answered` requests."""
    evidence = design.evidence(failures, answered)
    if evidence >= design.upper:
        return ProbeDecision(FAILS, evidence)
    if evidence <= design.lower:
        return ProbeDecision(CLEAN, evidence)
    if answered >= design.max_requests:
        middle = (design.upper + design.lower) / 2
        return ProbeDecision(FAILS if evidence > middle else CLEAN, evidence, truncated=True)
    return ProbeDecision(None, evidence)


def probe_design(
    baseline_rate: float, failing_rate: float, fail_error: float, clean_error: float,
    reproduce: float = 0.5, design_effect: float = 1.0, max_requests: int | None = None,
) -> ProbeDesign:  # fmt: skip
    """The design for a search between a baseline and a failing rate: a probe `fails` at
    `reproduce` x the failing rate or more, is `clean` at the baseline rate or less (floored at a
    tenth of the failing rate, so a baseline of 0 still leaves a finite test). Raises ValueError
    when the two are too close to tell apart."""
    if not 0.0 < failing_rate < 1.0:
        raise ValueError(f"the failing rate must be in (0, 1), not {failing_rate}")
    if not 0.0 <= baseline_rate < 1.0:
        raise ValueError(f"the baseline rate must be in [0, 1), not {baseline_rate}")
    if not 0.0 < reproduce <= 1.0:
        raise ValueError(f"reproduce must be in (0, 1], not {reproduce}")
    p_clean = max(baseline_rate, failing_rate / 10.0)
    p_fail = reproduce * failing_rate
    if p_fail <= p_clean * 1.2:
        raise ValueError(
            f"a failing rate of {failing_rate:.4%} is too close to the baseline's "
            f"{baseline_rate:.4%} for a search (reproduce x failing must exceed the baseline "
            "by 20%)"
        )
    design = ProbeDesign(p_clean, p_fail, fail_error, clean_error, 2**62, design_effect)
    if max_requests is None:  # four times the longer of the two expected lengths
        longest = max(design.expected_requests(p_clean), design.expected_requests(p_fail))
        max_requests = math.ceil(4 * longest)
    return ProbeDesign(p_clean, p_fail, fail_error, clean_error, max_requests, design_effect)


@dataclass(frozen=True, slots=True)
class Dispersion:
    """How much more block counts vary than independent failures would make them."""

    ratio: float
    """Pearson chi-square over its degrees of freedom (about 1 for independent failures)."""
    df: int
    p_value: float
    """Chance of a ratio this large were the variance inflation no more than the one assumed."""


def block_dispersion(groups: Sequence[Sequence[tuple[int, int]]],
                     design_effect: float = 1.0) -> Dispersion | None:  # fmt: skip
    """Pearson's dispersion test over blocks: each group (one configuration's blocks, as
    (failures, answered)) against its own pooled rate; a group with one block, or that failed
    never or always, adds nothing. None when nothing can be tested."""
    chi2, df = 0.0, 0
    for blocks in groups:
        failures = sum(f for f, _ in blocks)
        answered = sum(n for _, n in blocks)
        if len(blocks) < 2 or failures == 0 or failures == answered:
            continue  # one block, or a rate of 0 or 1: no variance to test
        rate = failures / answered
        for f, n in blocks:
            expected = n * rate
            if expected > 0:
                chi2 += (f - expected) ** 2 / (expected * (1 - rate))
        df += len(blocks) - 1
    if df == 0:
        return None
    p_value = float(scipy_stats.chi2.sf(chi2 / design_effect, df))
    return Dispersion(chi2 / df, df, p_value)
