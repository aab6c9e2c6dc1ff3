"""Every kind of failure soakgate observes, judged between two arms as one family.

- **per request** (server errors, collapses, crosstalk (an answer carrying another request's
  canary or prompt: `checks/`), suspect generations, shifted generations (a scored
  row whose typicality, else mean surprisal, is above its calibration's 90th percentile: one in
  ten of a reference-like unit's; `stats/shift.py`), any failure): the two arms'
  time-ordered 0/1 sequences go through `verdict.decide`, the design-driven verdict collapses
  have always had (replicate blocks, one run per arm, counts only; INDETERMINATE where one run
  cannot resolve its own dependence, unless the episodes decide: `verdict._episode_verdict`);
- **crashes** (a server process that died or stopped answering, restarted by the guard): counts
  over hours under load, the exact conditional test of two Poisson counts with exposures;
- **divergence** from a greedy reference: where each compared answer first diverges, no
  divergence ranking last, compared by a two-sided rank test (Mann-Whitney, ties corrected), so
  early and frequent divergence against late and rare differs, and the same late divergence at
  the same rate does not.

The family-wise error across outcomes (and arms) is held by Holm. An outcome with no failure in
either arm cannot reach any level and is left out of the family (Tarone's rule: it could never be
DIFFER, and counting it would only cost the others power).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from soakgate.stats.rates import RateSummary, summarize_rate
from soakgate.stats.robust import TestResult
from soakgate.stats.verdict import (
    BLOCKS,
    COUNTS,
    DIFFER,
    INDETERMINATE,
    MIN_BLOCKS,
    NO_DIFFERENCE,
    Verdict,
)

IntArray = npt.NDArray[np.int64]
CRASH, ERROR, COLLAPSE, SUSPECT, SHIFTED, DIVERGENCE, ANY_FAILURE = (
    "crash", "error", "collapse", "suspect", "shifted", "divergence", "any_failure",
)  # fmt: skip
CROSSTALK = "crosstalk"
"""Answered rows that failed the crosstalk check (`checks.crosstalk`), judged per request."""
INVALID_STRUCTURE = "invalid_structure"
"""Judged answers to structured prompts that broke their structure (`checks.structure`)."""
INCONSISTENT = "inconsistent"
"""Answers whose log-probabilities or usage cannot be right (`checks.numbers`)."""
TWIN_MISMATCH = "twin_mismatch"
"""Twin requests (same body, same seed) whose answers differ, per judged pair (`checks.twins`)."""
OUTCOMES = (
    CRASH, ERROR, COLLAPSE, SUSPECT, SHIFTED, CROSSTALK, INVALID_STRUCTURE, INCONSISTENT,
    TWIN_MISMATCH, DIVERGENCE, ANY_FAILURE,
)  # fmt: skip
CRASH_DESIGN = "crash counts over hours under load"
DIVERGENCE_DESIGN = "greedy comparisons with a reference"


@dataclass(frozen=True, slots=True)
class CrashRate:
    """A unit's server crashes: per hour under load (exact Poisson interval) and per request."""

    crashes: int
    """Crashes the guard recorded (`engine_fault`: the process exited, hung or logged a fatal
    line, or its node was lost)."""
    hours: float
    """Hours under load (the exposure)."""
    per_hour: float
    """crashes / hours (nan without exposure)."""
    per_hour_ci: tuple[float, float]
    """Exact (Garwood) 95% interval of the rate per hour."""
    per_request: RateSummary | None
    """crashes / requests with its exact interval (None without requests)."""
    blocks: tuple[tuple[int, float], ...] = ()
    """(crashes, hours) of each block, when there are several."""


def crash_rate(
    crashes: int, seconds: float, requests: int, blocks: Sequence[tuple[int, float]] = (),
    confidence: float = 0.95,
) -> CrashRate:  # fmt: skip
    """Crash rate per hour with its exact (Garwood, chi-square) interval, and per request."""
    from scipy.stats import chi2

    hours = seconds / 3600.0
    level = 1.0 - confidence
    low = chi2.ppf(level / 2, 2 * crashes) / 2 if crashes else 0.0
    high = chi2.ppf(1 - level / 2, 2 * crashes + 2) / 2
    per_hour = crashes / hours if hours > 0 else math.nan
    interval = (low / hours, high / hours) if hours > 0 else (math.nan, math.nan)
    per_request = summarize_rate(min(crashes, requests), requests) if requests else None
    return CrashRate(crashes, hours, per_hour, interval, per_request, tuple(blocks))


def crash_verdict(a: CrashRate, b: CrashRate, alpha: float = 0.05) -> Verdict:
    """The exact conditional test of two crash counts over their hours: given k crashes in
    all, B's share is binomial(k, hours B / all hours) when both crash at one rate."""
    from scipy.stats import binomtest

    total = a.crashes + b.crashes
    blocks = (len(a.blocks), len(b.blocks))
    design = BLOCKS if min(blocks) >= MIN_BLOCKS else CRASH_DESIGN
    if total == 0 or not (a.hours > 0 and b.hours > 0):
        p_value, share = 1.0, math.nan
    else:
        share = b.hours / (a.hours + b.hours)
        p_value = float(binomtest(b.crashes, total, share).pvalue)
    note = f"{a.crashes} vs {b.crashes} crashes in {a.hours:.3g} vs {b.hours:.3g} h"
    result = TestResult("crashes_exact", float(b.crashes), p_value, None, note)
    reason = (
        f"{a.crashes} vs {b.crashes} crashes in {a.hours:.3g} vs {b.hours:.3g} hours under load: "
        f"exact conditional test of two Poisson counts (B's share of the crashes against its "
        f"share of the hours, {share:.3g}), p={p_value:.4g} vs alpha {alpha:g}; it assumes "
        "crashes arrive independently"
    )
    word = DIFFER if p_value < alpha else NO_DIFFERENCE
    return Verdict(word, p_value, result.name, design, float(total), alpha, reason, result,
                   blocks if min(blocks) >= MIN_BLOCKS else (0, 0))  # fmt: skip


def censored(positions: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """First divergence positions with `no divergence` (-1) ranked after every position."""
    values = np.asarray(positions, dtype=np.float64)
    return np.where(values < 0, np.inf, values)


def divergence_verdict(
    a: npt.ArrayLike, b: npt.ArrayLike, alpha: float = 0.05, what: str = "tokens"
) -> Verdict:
    """Two-sided Mann-Whitney test of where compared answers first diverge (-1: they did not;
    ranked last), B against A. Frequent or early divergence against rare or late is a
    difference; the same positions at the same rate are not. Assumes the comparisons are
    independent (each is a separate greedy request, sampled across the soak)."""
    from scipy.stats import mannwhitneyu

    left, right = censored(a), censored(b)
    if not len(left) or not len(right) or np.unique(np.concatenate([left, right])).size < 2:
        statistic, p_value = len(left) * len(right) / 2.0, 1.0
    else:
        found = mannwhitneyu(right, left, alternative="two-sided", method="asymptotic")
        statistic, p_value = float(found.statistic), float(found.pvalue)
    note = f"B {divergence_words(right, what)}; A {divergence_words(left, what)}"
    result = TestResult("mann_whitney", statistic, p_value, None, note)
    reason = (
        f"{len(left):,} vs {len(right):,} greedy comparisons: {note}; two-sided Mann-Whitney on "
        f"the position of the first divergence (none ranks last), p={p_value:.4g} vs alpha "
        f"{alpha:g}; it assumes the comparisons are independent"
    )
    word = DIFFER if p_value < alpha else NO_DIFFERENCE
    per_arm = (len(left) + len(right)) / 2.0
    return Verdict(word, p_value, result.name, DIVERGENCE_DESIGN, per_arm, alpha, reason, result)


def divergence_words(positions: npt.ArrayLike, what: str = "tokens") -> str:
    """`12/180 diverged (6.7%), median first at token 54`, from first-divergence positions."""
    values = censored(positions)
    finite = values[np.isfinite(values)]
    text = f"{len(finite)}/{len(values)} diverged"
    if len(values):
        text += f" ({len(finite) / len(values):.1%})"
    if len(finite):
        text += f", median first at {what.removesuffix('s')} {float(np.median(finite)):g}"
    return text


def divergence_direction(a: npt.ArrayLike, b: npt.ArrayLike) -> int:
    """+1 when B's answers diverge earlier or more often than A's (its positions rank lower),
    -1 when later or less often, 0 when alike."""
    left, right = censored(a), censored(b)
    if not len(left) or not len(right):
        return 0
    below = (right[:, None] < left[None, :]).sum() - (right[:, None] > left[None, :]).sum()
    return int(np.sign(below))


@dataclass(slots=True)
class OutcomeComparison:
    """One outcome of two arms: the failures and exposure of each, the verdict, and where it
    stands in its family."""

    outcome: str
    """One of OUTCOMES."""
    events: tuple[int, int]
    """Failures of A and B (crashes; failed requests; divergent comparisons)."""
    exposure: tuple[float, float]
    """What they are out of: requests (or compared answers, or hours for crashes)."""
    verdict: Verdict
    """The outcome's own verdict, at the family's alpha before adjustment."""
    direction: int
    """+1 when B fails more (or diverges earlier) than A, -1 when less, 0 when alike."""
    in_family: bool = True
    """False when neither arm failed: it cannot be DIFFER and is left out of the adjustment."""
    adjusted_p: float = math.nan
    """Holm-adjusted p-value in the family (the raw p-value when alone; 1 out of the family)."""
    differ: bool = field(default=False)
    """DIFFER after the adjustment (never for an INDETERMINATE verdict)."""
    overwhelming: bool = field(default=False)
    """Not DIFFER after the adjustment, but the one-run t its correlation check withheld
    (`Verdict.withheld_p`) is at or below alpha x `OVERWHELMING_FRACTION` once multiplied by
    the family's size: evidence the dependence one run cannot resolve does not explain away (a
    release gate does not clear B on it)."""

    @property
    def worse(self) -> bool:
        """B is judged worse than A on this outcome."""
        return self.differ and self.direction > 0

    @property
    def not_cleared(self) -> bool:
        """A release gate cannot pass B on this outcome: judged worse, or INDETERMINATE with
        B's rate higher on overwhelming evidence."""
        return self.worse or (self.overwhelming and self.direction > 0)

    @property
    def word(self) -> str:
        """DIFFER, INDETERMINATE or no difference, after the adjustment (a DIFFER on episodes
        the adjustment overturns is INDETERMINATE: the one-run t was withheld)."""
        withheld = self.verdict.withheld_p is not None and not self.differ
        if self.verdict.verdict == INDETERMINATE or withheld:
            return "INDETERMINATE"
        return "DIFFER" if self.differ else "no difference"


OVERWHELMING_FRACTION = 1 / 50
"""An outcome one run per arm cannot resolve (its check withheld the batch-means t, and it is not
DIFFER after the family's adjustment) whose t has p x (family size) <= alpha / 50 (0.001 at
0.05) with B worse is not cleared by the release gate. One run per arm withholds a verdict when
its failures are correlated between stretches, because a t over batches then lets equal arms
DIFFER far above alpha; it is still evidence, and a gate errs toward failing. Measured on equal arms
(`bench/bench_overwhelming.py`, BENCHMARKS.md section 26): at 0.2% and 13,000-40,000 requests
per arm the rule adds at most 3.3 points of false gate failures; at 10% and 2,000 per arm under
resets 11-24 points (instances that really did fail at different rates). Before it, 46% twin
mismatch against 0% (p = 4e-6) passed the gate, and so did 80 of 400 against 0 when the
check's episodes decided DIFFER at p = 0.031 and Holm over two outcomes overturned it."""


def rate_direction(events: tuple[int, int], exposure: tuple[float, float]) -> int:
    """+1 when B's rate is above A's, -1 below, 0 equal (or nothing to compare)."""
    rates = [e / x if x > 0 else 0.0 for e, x in zip(events, exposure, strict=True)]
    return int(np.sign(rates[1] - rates[0]))


def adjust_family(items: Sequence[OutcomeComparison], alpha: float) -> None:
    """Holm over every item that can reach significance (some failure in either arm); sets each
    item's adjusted p-value and DIFFER. An INDETERMINATE verdict keeps its place in the family
    but is never DIFFER; an outcome not DIFFER whose withheld one-run t has p x (family size) <=
    alpha x OVERWHELMING_FRACTION is `overwhelming` (Bonferroni: the t is not the p Holm saw)."""
    from soakgate.stats.compare import holm_adjust

    family = [item for item in items if item.in_family]
    for item in items:
        if not item.in_family:
            item.adjusted_p, item.differ = 1.0, False
    adjusted = holm_adjust([item.verdict.p_value for item in family], alpha)
    for item, (p_value, reject) in zip(family, adjusted, strict=True):
        item.adjusted_p = p_value
        item.differ = reject and item.verdict.verdict != INDETERMINATE
        withheld = item.verdict.withheld_p
        item.overwhelming = (
            not item.differ
            and withheld is not None
            and withheld * len(family) <= alpha * OVERWHELMING_FRACTION
        )


__all__ = [
    "ANY_FAILURE", "COLLAPSE", "COUNTS", "CRASH", "CROSSTALK", "DIVERGENCE", "ERROR",
    "INCONSISTENT", "INVALID_STRUCTURE", "OUTCOMES", "OVERWHELMING_FRACTION", "SHIFTED",
    "SUSPECT", "TWIN_MISMATCH", "CrashRate", "OutcomeComparison", "adjust_family", "crash_rate",
    "crash_verdict", "divergence_direction", "divergence_verdict", "rate_direction",
]  # fmt: skip
