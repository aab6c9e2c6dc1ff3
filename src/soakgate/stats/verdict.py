"""The verdict of a two-arm comparison: DIFFER, NO DIFFERENCE or INDETERMINATE, and why.

The design, not a clustering pre-test, decides which test the verdict rests on:

- **replicate blocks** (at least 3 per arm, e.g. a campaign's A B B A blocks with servers
  restarted in between): a quasi-Poisson t over the blocks' counts. It is valid whatever
  happens inside a block, as long as each block starts from a fresh state.
- **one run per arm**: a Welch t over 12 long batches per arm. It is valid when failures
  forget their past within a batch; when counts in neighbouring stretches of the run are
  correlated (an exact permutation check, at a level that is stricter the fewer failures the
  pair has: `dependence.check_level`), the run cannot resolve its own dependence and the
  verdict is INDETERMINATE, never DIFFER.
- **counts only** (no time order): the exact conditional test, assuming independence.

`compare_outcomes` is the library entry point; `soakgate compare` makes exactly this decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from soakgate.errors import UsageError
from soakgate.stats.dependence import (
    LongRangeCheck,
    LongRangeEstimate,
    bin_edges,
    long_range_check,
    long_range_design_effect,
)
from soakgate.stats.paired import (
    CROSS_LEVEL,
    DISPERSION_LEVEL,
    MIN_FAILURES,
    PAIRED,
    PairedCheck,
    Pairing,
    paired_test,
)
from soakgate.stats.robust import TestResult, batch_means_test, quasi_poisson_test

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]
MIN_BLOCKS = 3  # per arm: fewer leave a t over blocks with under 4 degrees of freedom
DIFFER, NO_DIFFERENCE, INDETERMINATE = "differ", "no difference", "indeterminate"
BLOCKS, ONE_RUN, COUNTS = "replicate blocks", "one run per arm", "counts only"
# What a DIFFER is about: with one run of one server instance per arm no statistic can tell the
# configuration from the instance (or the state it happened to be in); replicate blocks (fresh
# servers, or several instances) can.
INSTANCES, CONFIGURATIONS = "instances", "configurations"
SCOPE_WORDS = {
    INSTANCES: "these server instances (one run per arm: not separable from the configuration)",
    CONFIGURATIONS: "the configurations (replicate blocks or instances per arm)",
}


@dataclass(frozen=True, slots=True)
class Outcomes:
    """One arm's data as the verdict sees it."""

    events: int
    """Failures in the arm."""
    n: int
    """Requests (clean generations) in the arm."""
    sequence: BoolArray | None = None
    """Time-ordered 0/1 failures (blocks concatenated in order), when known."""
    blocks: tuple[tuple[int, int], ...] = ()
    """(failures, requests) of each replicate block (run), when there are several."""
    times: FloatArray | None = None
    """When each request of `sequence` ended (seconds; one run of one target): arms that ran
    side by side can then be compared window by window (`stats.paired`)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a comparison concludes, by which test, on which design, and why."""

    verdict: str
    """`differ`, `no difference` or `indeterminate`."""
    p_value: float
    """Two-sided p-value of the deciding test (shown even when the verdict is indeterminate)."""
    test: str
    """Name of the deciding test: `quasi_poisson`, `batch_means` or `poisson_exact`."""
    design: str
    """`replicate blocks`, `one run per arm` or `counts only`."""
    effective_n: float
    """Independent requests per arm the evidence is worth (n / design effect)."""
    alpha: float
    """Two-sided level."""
    reason: str
    """One line: the design, the test and what decided."""
    result: TestResult
    """The deciding test's full result."""
    blocks: tuple[int, int] = (0, 0)
    """Replicate blocks per arm used by the test (0 when it is not a test over blocks)."""
    dependence: LongRangeCheck | None = None
    """One run per arm: the correlation check that can make the verdict indeterminate."""
    long_range: LongRangeEstimate | None = None
    """One run per arm: the long-range design effect of both arms (variance-time curve)."""
    paired: PairedCheck | None = None
    """Arms that ran side by side and whose one-run check withheld: what their pairing showed
    (it decided when `design` is `paired windows`)."""
    withheld_p: float | None = None
    """One run per arm whose correlation check withheld the batch-means t and nothing resolved
    the dependence (INDETERMINATE, or DIFFER on episodes, whose weaker test a family adjustment
    may overturn): that t's p-value. A release gate reads it (`stats.outcomes`)."""
    differ: bool = field(init=False)
    """True exactly when the verdict is `differ`."""
    scope: str = field(init=False)
    """What the verdict is about: `configurations` (replicate blocks) or `instances` (one run
    or one server instance per arm, where instance and configuration cannot be separated)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "differ", self.verdict == DIFFER)
        object.__setattr__(self, "scope", CONFIGURATIONS if self.design == BLOCKS else INSTANCES)


def _per_arm(a: Outcomes, b: Outcomes) -> float:
    return (a.n + b.n) / 2.0


def _design_effect(result: TestResult, a: Outcomes, b: Outcomes) -> float:
    """Variance the test used over the binomial variance at the pooled rate (>= 1)."""
    pooled = (a.events + b.events) / (a.n + b.n)
    binomial = pooled * (1.0 - pooled) * (1.0 / a.n + 1.0 / b.n)
    error = result.standard_error
    if error is None or not binomial > 0.0:
        return 1.0
    return max(1.0, error * error / binomial)


def _word(p_value: float, alpha: float) -> str:
    return DIFFER if p_value < alpha else NO_DIFFERENCE


def _blocks_verdict(a: Outcomes, b: Outcomes, alpha: float) -> Verdict | None:
    result = quasi_poisson_test(a.blocks, b.blocks)
    if result is None:
        return None
    effect = _design_effect(result, a, b)
    reason = (
        f"{len(a.blocks)} + {len(b.blocks)} replicate blocks: quasi-Poisson t({result.df:g}) "
        f"over block counts, p={result.p_value:.4g} vs alpha {alpha:g} (valid whatever happens "
        "inside a block, when each block starts from a fresh state)"
    )
    return Verdict(
        _word(result.p_value, alpha), result.p_value, result.name, BLOCKS,
        _per_arm(a, b) / effect, alpha, reason, result, (len(a.blocks), len(b.blocks)),
    )  # fmt: skip


def _one_run_verdict(
    a: Outcomes, b: Outcomes, alpha: float, seed: int, runs_note: str
) -> Verdict | None:
    assert a.sequence is not None and b.sequence is not None
    result = batch_means_test(a.sequence, b.sequence)
    if result is None:
        return None
    check = long_range_check([a.sequence, b.sequence], seed)
    spread = long_range_design_effect([a.sequence, b.sequence])
    effect = _design_effect(result, a, b)
    stretch = f"~{min(a.n, b.n) // check.bins:,}"
    paired = _paired(a, b, seed)
    if paired is not None and paired.check.share_usable:
        return _share_verdict(a, b, alpha, check, spread, paired)
    if check.correlated and (by_episodes := _episode_verdict(a, b, alpha, seed, check)):
        return replace(by_episodes, withheld_p=result.p_value)
    if paired is not None and check.correlated and paired.check.usable:
        return _paired_verdict(a, b, alpha, check, spread, paired.check, paired.batch_t)
    if check.correlated:
        effect = max(effect, spread.design_effect)
        verdict = INDETERMINATE
        reason = (
            f"counts in neighbouring stretches of {stretch} requests are correlated "
            f"(permutation p={check.p_value:.3g} <= {check.level:.2g}): one run per arm cannot "
            "resolve this "
            f"dependence, so it cannot separate the arms; the evidence is worth about "
            f"{_per_arm(a, b) / effect:,.0f} independent requests per arm. Run longer, or "
            "replicate with restarts (blocks: soakgate plan --blocks, then a campaign)"
        ) + (_unpaired_note(paired.check) if paired is not None else "")
    else:
        verdict = _word(result.p_value, alpha)
        reason = (
            f"one run per arm{runs_note}: batch-means t({result.df:.1f}) over {result.note}, "
            f"p={result.p_value:.4g} vs alpha {alpha:g}; no correlation between stretches of "
            f"{stretch} requests (permutation p={check.p_value:.3g} > {check.level:.2g})"
        )
    return Verdict(
        verdict, result.p_value, result.name, ONE_RUN, _per_arm(a, b) / effect, alpha,
        reason, result, (0, 0), check, spread, None if paired is None else paired.check,
        result.p_value if check.correlated else None,
    )  # fmt: skip


def _paired(a: Outcomes, b: Outcomes, seed: int) -> Pairing | None:
    """The pairing of two arms that ran side by side (None when either has no times, or they
    did not overlap)."""
    if a.times is None or b.times is None or a.sequence is None or b.sequence is None:
        return None
    if len(a.times) != len(a.sequence) or len(b.times) != len(b.sequence):
        return None
    return paired_test(a.sequence, a.times, b.sequence, b.times, seed)


def _unpaired_note(paired: PairedCheck) -> str:
    """Why the arms' pairing (they ran side by side) did not decide instead."""
    if paired.failures < MIN_FAILURES:
        return (
            f". The arms ran side by side, but {paired.failures} failures in all are too few to "
            f"check the window-by-window differences for dependence (the pairing needs "
            f"{MIN_FAILURES})"
        )
    reasons = []
    correlated = min(paired.residual_p, paired.share_residual_p)
    if correlated <= paired.level:
        reasons.append(
            f"their window-by-window differences are correlated between stretches too "
            f"(p={correlated:.3g} <= {paired.level:.2g})"
        )
    if paired.dispersion_p <= DISPERSION_LEVEL:
        reasons.append(
            f"B's share of the failures disperses beyond binomial (p={paired.dispersion_p:.3g} "
            f"<= {DISPERSION_LEVEL:g}: one arm's failures clump)"
        )
    if paired.cross_p > CROSS_LEVEL:
        reasons.append(
            f"the arms' counts do not move together (cross-correlation p={paired.cross_p:.3g} "
            f"> {CROSS_LEVEL:g})"
        )
    return (
        ". The arms ran side by side, but "
        + ", and ".join(reasons)
        + ", so comparing them window by window would not be valid either"
    )


def _share_verdict(
    a: Outcomes, b: Outcomes, alpha: float, check: LongRangeCheck, spread: LongRangeEstimate,
    paired: Pairing,
) -> Verdict:  # fmt: skip
    """DIFFER or NO DIFFERENCE on B's share of each window's failures (side-by-side arms)."""
    found, result = paired.check, paired.share
    reason = (
        f"arms soaked side by side: B's share of the failures of each window of time, against "
        f"its share of their requests (whatever rate both arms shared, it cancels); "
        f"{result.note}: t({result.df:g}) = {result.statistic:.3g}, p={result.p_value:.4g} vs "
        f"alpha {alpha:g}. The share is binomial (dispersion {found.dispersion:.2f}, p="
        f"{found.dispersion_p:.3g} > {DISPERSION_LEVEL:g}) and, about {found.share_centre}, "
        f"not correlated between stretches (permutation p={found.share_residual_p:.3g} > "
        f"{found.level:.2g})"
    )
    return _decided_paired(a, b, alpha, (check, spread), found, result, found.dispersion, reason)


def _paired_verdict(
    a: Outcomes, b: Outcomes, alpha: float, check: LongRangeCheck, spread: LongRangeEstimate,
    paired: PairedCheck, result: TestResult,
) -> Verdict:  # fmt: skip
    """DIFFER or NO DIFFERENCE on the window-by-window differences of side-by-side arms."""
    reason = (
        f"arms soaked side by side: failures are correlated between stretches of each run "
        f"(permutation p={check.p_value:.3g} <= {check.level:.2g}), and the arms' counts move "
        f"together (cross-correlation p={paired.cross_p:.3g} <= {CROSS_LEVEL:g}): a drift they "
        f"share, which cancels window by window. Paired t({result.df:g}) over {result.note}, "
        f"p={result.p_value:.4g} vs alpha {alpha:g}; the differences are not correlated "
        f"between stretches (permutation p={paired.residual_p:.3g} > {paired.level:.2g})"
    )
    return _decided_paired(
        a, b, alpha, (check, spread), paired, result, paired.design_effect, reason
    )


def _decided_paired(
    a: Outcomes, b: Outcomes, alpha: float, one_run: tuple[LongRangeCheck, LongRangeEstimate],
    paired: PairedCheck, result: TestResult, effect: float, reason: str,
) -> Verdict:  # fmt: skip
    """The verdict a paired test decided (`effect`: the design effect of its evidence)."""
    return Verdict(
        _word(result.p_value, alpha), result.p_value, result.name, PAIRED,
        _per_arm(a, b) / max(1.0, effect), alpha, reason, result, (0, 0), *one_run, paired,
    )  # fmt: skip


EPISODE_SEGMENTS = 120
"""Episodes are read at this resolution (stats.segments.SEGMENTS: a multiple of the 12 batches
and the 40 stretches), so they, like the rest of the one-run verdict, are a function of the
run's counts per 1/120th: a plan's simulation of segment counts gets the verdict applied."""
EPISODE_QUIET = 3
"""Segments without failures that end an episode: 3 of 120, one of the check's 40 stretches."""


def episode_starts(
    sequence: BoolArray, segments: int = EPISODE_SEGMENTS, quiet: int = EPISODE_QUIET
) -> BoolArray:
    """The failures that start an episode: the first failure of each of the run's `segments`
    near-equal stretches (each request, for a shorter run) that holds failures when the `quiet`
    stretches before it hold none. A burst of failures (the requests lost to one server crash)
    is one episode however many stretches it spans."""
    edges = bin_edges(len(sequence), segments)
    counts = np.add.reduceat(sequence.astype(np.int64), edges[:-1]) if len(sequence) else edges[:0]
    busy = counts > 0
    recent = np.zeros(len(busy), dtype=bool)  # a failure in one of the `quiet` segments before
    for lag in range(1, quiet + 1):
        recent[lag:] |= busy[:-lag]
    opens = np.flatnonzero(busy & ~recent)
    starts = np.zeros(len(sequence), dtype=bool)
    for segment in opens:  # the first failure inside each segment that opens an episode
        lo, hi = int(edges[segment]), int(edges[segment + 1])
        starts[lo + int(np.argmax(sequence[lo:hi]))] = True
    return starts


def _episode_verdict(
    a: Outcomes, b: Outcomes, alpha: float, seed: int, check: LongRangeCheck
) -> Verdict | None:
    """DIFFER on episodes, when the failures are correlated between stretches but the episodes
    they form are not: each burst counted once (`episode_starts`), and both the batch-means t
    on the episodes' starts and the exact conditional test of the two episode counts below
    alpha, with the correlation check on the episodes finding nothing, and the arm with more
    episodes the arm with more failures. None when that does not decide DIFFER (the verdict
    stays INDETERMINATE).

    The last condition came from dense failures (bench_calibration --dense, first run): under
    resets, an arm that fails steadily late in its cycle forms one long episode while an arm
    just reset fails sporadically in many short ones, so episodes pointed against the failures
    and equal arms under resets every ~2,000 at 10% were DIFFER in 11.6% of pairs, 9.4 points
    of it on episodes, every one of them in the opposite direction.

    Overwhelming evidence (seven crashes' worth of lost requests against none) is then a verdict,
    while dependence that reaches across episodes (regimes, drifts, slow resets) still withholds
    one. Chosen by simulation (issue 25: the batch-means t on episodes alone let equal arms under
    slow resets DIFFER about twice as often as alpha); `bench/bench_calibration.py` measures the
    rule against the check alone (`--without-episodes`) on the whole battery, BENCHMARKS.md
    section 7."""
    from scipy.stats import binomtest

    assert a.sequence is not None and b.sequence is not None
    starts = [episode_starts(s) for s in (a.sequence, b.sequence)]
    width = max(1, min(a.n, b.n) // EPISODE_SEGMENTS)
    counts = [int(s.sum()) for s in starts]
    result = batch_means_test(starts[0], starts[1])
    if result is None or not result.p_value < alpha or not sum(counts):
        return None
    if np.sign(counts[1] / b.n - counts[0] / a.n) != np.sign(b.events / b.n - a.events / a.n):
        return None  # more episodes where there are fewer failures: not bursts, a steady rate
    exact = float(binomtest(counts[1], sum(counts), b.n / (a.n + b.n)).pvalue)
    again = long_range_check(starts, seed + 1)
    if not exact < alpha or again.correlated:
        return None
    p_value = max(result.p_value, exact)
    reason = (
        f"failures are correlated between stretches (permutation p={check.p_value:.3g} <= "
        f"{check.level:.2g}), so each burst is counted once: {counts[0]:,} vs {counts[1]:,} "
        f"episodes (failures in a 1/{EPISODE_SEGMENTS} of the run, ~{width:,} requests, after "
        f"{EPISODE_QUIET} without); batch-means t({result.df:.1f}) on the episodes "
        f"p={result.p_value:.4g} and exact conditional test of the episode counts "
        f"p={exact:.4g}, both below alpha {alpha:g}; episodes not correlated between "
        f"stretches (permutation p={again.p_value:.3g} > {again.level:.2g})"
    )
    episodes = Outcomes(counts[0], a.n, starts[0]), Outcomes(counts[1], b.n, starts[1])
    note = f"{counts[0]} vs {counts[1]} episodes"
    decided = TestResult(
        "episodes", result.statistic, p_value, result.df, note, None, result.standard_error
    )
    return Verdict(
        DIFFER, p_value, decided.name, ONE_RUN,
        _per_arm(a, b) / _design_effect(result, *episodes), alpha, reason, decided, (0, 0),
        again, long_range_design_effect(starts),
    )  # fmt: skip


def _counts_verdict(a: Outcomes, b: Outcomes, alpha: float) -> Verdict:
    from soakgate.stats.naive import poisson_exact_test

    result = poisson_exact_test(a.events, a.n, b.events, b.n)
    reason = (
        f"no time order: exact conditional (Poisson) test, p={result.p_value:.4g} vs alpha "
        f"{alpha:g}, assuming independent requests (it cannot see clustering)"
    )
    return Verdict(
        _word(result.p_value, alpha), result.p_value, result.name, COUNTS,
        _per_arm(a, b), alpha, reason, result,
    )  # fmt: skip


def decide(a: Outcomes, b: Outcomes, alpha: float = 0.05, seed: int = 0) -> Verdict:
    """The verdict for arms A (reference) and B, on the strongest design their data allow."""
    if not 0.0 < alpha < 1.0:
        raise UsageError(f"alpha must be in (0, 1), got {alpha}")
    if min(len(a.blocks), len(b.blocks)) >= MIN_BLOCKS:
        by_blocks = _blocks_verdict(a, b, alpha)
        if by_blocks is not None:
            return by_blocks
    if a.sequence is not None and b.sequence is not None:
        runs = max(len(a.blocks), len(b.blocks))
        note = (
            f" ({len(a.blocks)} + {len(b.blocks)} runs joined: a test over blocks needs "
            f"{MIN_BLOCKS} per arm)"
            if runs > 1
            else ""
        )
        by_run = _one_run_verdict(a, b, alpha, seed, note)
        if by_run is not None:
            return by_run
    return _counts_verdict(a, b, alpha)


def _as_outcomes(values: object, name: str) -> Outcomes:
    """One 0/1 sequence, or a list of them (replicate blocks, in time order)."""
    from soakgate.stats.clustering import as_sequence

    parts: list[Any]
    if isinstance(values, np.ndarray):
        parts = list(values) if values.ndim == 2 else [values]
    elif isinstance(values, Sequence) and values and not _is_number(values[0]):
        parts = list(values)
    else:
        parts = [values]
    try:
        sequences = [as_sequence(part) for part in parts]
    except UsageError as exc:
        raise UsageError(f"arm {name}: {exc}") from None
    joined = np.concatenate(sequences)
    blocks = tuple((int(s.sum()), len(s)) for s in sequences) if len(sequences) > 1 else ()
    return Outcomes(int(joined.sum()), len(joined), joined, blocks)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float | bool | np.integer | np.floating | np.bool_)


def compare_outcomes(
    a: Sequence[int] | Sequence[Sequence[int]] | npt.ArrayLike,
    b: Sequence[int] | Sequence[Sequence[int]] | npt.ArrayLike,
    *,
    alpha: float = 0.05,
    seed: int = 0,
) -> Verdict:
    """Compare B with reference A, each one time-ordered 0/1 sequence (one run) or a list of
    them (replicate runs or blocks): exactly the decision `soakgate compare` makes for two
    units with its defaults. `.verdict` is `differ`, `no difference` or `indeterminate`."""
    return decide(_as_outcomes(a, "A"), _as_outcomes(b, "B"), alpha, seed)
