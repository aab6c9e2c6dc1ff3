"""The paired verdict: arms soaked side by side, compared window by window.

When both arms ran at the same time (the targets of one `soakgate run`), a drift both of them
share (load, the host, the network, a shared upstream) moves their failure counts together.
The one-run verdict judges each arm's counts on their own: such a drift makes every arm's
stretches correlated, and it withholds (INDETERMINATE) or, where its check misses the drift,
carries the drift in both arms' variances. Window by window, the drift cancels: given that a
window holds `t` failures of the two arms, B's share of them is Binomial(t, pi) under "same
rate", where pi is B's share of the window's requests, whatever the shared rate did. This module
uses that, and only where it is safe. The arms must overlap in time (`side_by_side`: at least
`OVERLAP` of each arm's requests ended inside the span both were running); the common span is
cut into `WINDOWS` equal windows of wall-clock time (120: 40 stretches for the checks, 12
batches for the t). Then, first:

**The share test** (`_share_test`), wherever

1. the pair holds more than 120 failures in the common span (`MIN_FAILURES`);
2. the differences show no correlation between stretches: B's excess over its share of each of
   the 40 stretches, against two exact nulls (B's failures in every stretch drawn again from
   Binomial(stretch total, share), and the stretches shuffled), at the level of the one-run
   check (`dependence.check_level`). The share is taken at the fitted rate ratio (the centre
   step 3 uses too) where the pair holds 160 failures or more (`DENSE_FAILURES`, where the
   check reaches its own level), else under "same rate" (as the batches' t below is gated).
   About "same rate", a real difference reads as correlation under a shared drift: B's surplus
   in a stretch is proportional to the stretch's failures, which the drift moves together; at
   sparse counts, though, the fitted centre also absorbs one arm's long regime, which the
   check then cannot see;
3. B's share is binomial: Pearson's X2 of B's failures about its share at the fitted rate ratio,
   over the 40 stretches and over the 12 batches, each with p > `DISPERSION_LEVEL` (0.1). One
   arm's own clumps (bursts, resets) make B's share of a stretch swing more than a coin's;

B's failures less its share of each window's failures, summed over the 120 windows, over the
binomial standard deviation times the square root of the 40 stretches' dispersion (at least 1),
against t with that dispersion's degrees of freedom, decides DIFFER or NO DIFFERENCE. On
independent arms it decides about three pairs in four, with the power of the z test on the
pooled counts less what its checks cost; under a shared drift it is what the pairing is for.

**Otherwise the batches' t**, where the one-run verdict withheld because counts are correlated
between stretches, steps 1 and 2 hold, and the two arms' stretch counts (each less its own rate
times the stretch's requests) rise and fall *together* (a one-sided permutation test of their
cross-product at `CROSS_LEVEL`): a t over the 12 batches' excesses (11 degrees of freedom), whose
variance is estimated, so it holds where the share disperses. Otherwise the verdict stays the
one-run verdict (INDETERMINATE where it withheld, with the reason the pairing was not used).

Step 2 about the fitted share (2026-12-07, issue 26 item 4): the share test's step 2 had been
judged, like the batches' t's, about "same rate". Chosen on a scratch run of five processes
(seed 42300, 1,000 pairs), then run on the whole battery (`bench/bench_paired.py`'s cells, seed
43300, 2,000 pairs per cell) beside the rule before on the same pairs: under a shared drift at
40,000 per arm power at 1.5x 65.2 -> 67.7%, but at 13,000 per arm equal arms under long on/off
regimes DIFFERed 5.3% against 4.1% before (pairs with more than 80 failures there are those one
arm's loud regime made). Only from 160 failures on, as now: 65.2 -> 67.2% under the shared
drift, 13,000 per arm unchanged, every equal-rate cell within 0.2 points of the rule before.
A run of that code on fresh seeds (44300) then put equal arms under resets every ~5,000
requests at 13,000 per arm at 7.1%, before the change as after it: the pairing now needs 121
failures (`MIN_FAILURES`, was 81); on the next fresh seeds (46300) 5.9% (6.5% before), the
shared drift at 40,000 per arm 65.0% (64.4% before). BENCHMARKS.md section 12 has the runs.

The share test (2026-12-06, issue 26 item 4): chosen on a scratch exploration (400 pairs per
cell, the whole battery, seeds of their own) among variants of the dispersion check (scales,
levels, fitted or "same rate" centre) and then frozen (commit 1d0aa5c). Its first run on the
battery (`bench/bench_paired.py --seed 30300`, 1,000 pairs per cell): under a shared drift at
40,000 per arm, power at 1.5x 64.3 ± 1.5% (the batches' t alone, earlier runs: 58.6-60.9%;
without the pairing 42.2%), no equal-rate process above 5.2% but resets every ~250 requests at
40,000 per arm, 6.2 ± 0.8% (5.5% without the pairing); a second run on fresh seeds (2,000 pairs)
gave that cell 5.5 ± 0.5%. The scratch showed the frontier: a dispersion check at 0.05 instead
of 0.1 reached ~68-69% power and let gamma-distributed resets DIFFER ~7-8%. Centring the
dispersion at "same rate" instead of the fitted ratio cost power (under B at 1.5x the
difference itself reads as dispersion). BENCHMARKS.md section 12 has the runs.

The batches' t was chosen first (issue 26, item 4): a test on the differences alone, always
used, let equal arms under resets every ~5,000 requests DIFFER 7.2% of the time at 13,000 per
arm. The first shipped rule centred the correlation check (step 2) at B's share under the
*observed* rate ratio; its first run on the battery (`bench/bench_paired.py`, 1,000 pairs per
cell) let those arms DIFFER 8.7 ± 0.9% of the time: the fitted ratio absorbs part of one arm's
clumps, and the check misses them. Centred at the share "same rate" implies, as now, the check
is exact under the hypothesis the t tests; the second run (fresh seeds) gave 7.3 ± 0.8%, against
5.5 ± 0.7% for the one-run verdict alone on the same pairs: with ~26 failures per arm, a check
on one series of differences cannot see what the one-run check sees on two arms. Step 1
followed: at 13,000 per arm (about 60 failures in the pair) the pairing is not used, and at
40,000 it is. BENCHMARKS.md section 12 has the three runs.

Why the batches' t decides only where the one-run check withheld (tried and measured, issue 26
item 4, 2026-12-04):
under a shared drift a third of the pairs pass the one-run check, and its t, which adds both
arms' variances, then loses power to the drift. Letting the pairing decide there too, with step
2 judged on the 12 batches the t uses, raised power at 1.5x and 40,000 per arm from ~59% to
63.5 ± 1.5%, but equal arms DIFFERed up to 7.6 ± 0.8% of the time (first run of that code,
1,000 pairs per cell): the gate selects pairs whose batches' sample covariance is high, and the
paired t subtracts that same covariance, so its variance is understated exactly where it is
used. A binomial floor under the variance fixed the independent processes but not those that
cluster on their own (self-exciting 8.2%, resets every ~2,000 6.8%, scratch runs of 500 pairs).
Judging step 2 on the 40 stretches, as here, the selection is on other units than the t's.
The share test has no such selection: its variance is the binomial's, estimated from nothing
the gate selects on but the dispersion, which only scales it up. Like every one-run verdict,
the scope of either is these two server instances.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from soakgate.stats._sampling import monte_carlo_p
from soakgate.stats.dependence import (
    CHECK_BINS,
    CHECK_LAGS,
    DENSE_FAILURES,
    SPARSE_FAILURES,
    _autocorrelation_sum,
    check_level,
)
from soakgate.stats.robust import BATCHES, TestResult

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
WINDOWS = 120  # equal windows of wall-clock time over the common span: 40 stretches, 12 batches
OVERLAP = 0.9  # share of each arm's requests that must end inside the common span
CROSS_LEVEL = 0.3  # the arms' counts must move together at this one-sided permutation level
MIN_FAILURES = (SPARSE_FAILURES + DENSE_FAILURES) // 2 + 1
"""Fewer failures in the pair (120 or fewer): the differences' checks see too little. At
13,000 requests per arm the pairs holding 81-120 failures are mostly those one arm's clumps
made (resets every ~5,000 requests), where the pairing added false alarms and no power."""
PERMUTATIONS = 199
DISPERSION_LEVEL = 0.1
"""B's share of the failures must not disperse beyond binomial at this level (Pearson's X2
about its fitted share, over the 40 stretches and over the 12 batches) for the share test."""
PAIRED = "paired windows"
"""The design name of a verdict decided on the pairing (`Verdict.design`)."""
assert WINDOWS % CHECK_BINS == 0 and WINDOWS % BATCHES == 0


@dataclass(frozen=True, slots=True)
class PairedCheck:
    """What the pairing of two side-by-side arms showed, whether or not it decided."""

    cross_p: float
    """One-sided permutation p that the arms' stretch counts move together (small: shared)."""
    residual_p: float
    """Permutation p of correlation in the window-by-window differences (the smaller of the
    two nulls); small means the differences carry dependence of their own."""
    level: float
    """The level `residual_p` was judged at (`dependence.check_level`)."""
    requests: tuple[int, int]
    """Requests of each arm inside the common span (the ones the pairing used)."""
    span_s: float
    """Seconds both arms were running."""
    design_effect: float = 1.0
    """Variance of the batches' differences over what independent requests would give (at
    least 1): the pair's evidence is worth its requests divided by this."""
    failures: int = 0
    """Failures of both arms inside the common span."""
    dispersion: float = 1.0
    """Pearson's X2 over df of B's share of each of the 40 stretches' failures about its
    fitted share: 1 where the share is binomial, more where one arm's failures clump."""
    dispersion_p: float = 0.0
    """The smaller p of the dispersion tests over the 40 stretches and over the 12 batches."""
    share_residual_p: float = 1.0
    """The share test's own gate: `residual_p` of B's excess over its share at the fitted rate
    ratio (the dispersion check's centre) where the pair holds `DENSE_FAILURES` or more
    failures, else `residual_p` itself. About "same rate", a real difference between the arms,
    scaled by a drift both share, reads as correlation between stretches."""

    @property
    def share_centre(self) -> str:
        """About which share `share_residual_p` was judged (where the share test decided, both
        arms failed at least once: the fitted ratio exists)."""
        return "its fitted share" if self.failures >= DENSE_FAILURES else "its share at equal rates"

    @property
    def share_usable(self) -> bool:
        """The share test may decide: enough failures, the differences about B's fitted share do
        not correlate between stretches, and B's share of each stretch's (and batch's) failures
        is binomial."""
        return (
            self.failures >= MIN_FAILURES
            and self.share_residual_p > self.level
            and self.dispersion_p > DISPERSION_LEVEL
        )

    @property
    def usable(self) -> bool:
        """The pairing may decide: enough failures for its check to see, the counts move
        together, the differences do not correlate."""
        return (
            self.failures >= MIN_FAILURES
            and self.cross_p <= CROSS_LEVEL
            and self.residual_p > self.level
        )


def side_by_side(times_a: FloatArray, times_b: FloatArray) -> tuple[float, float] | None:
    """The common span of two arms' completion times, when both ran side by side (at least
    `OVERLAP` of each arm's requests inside it), else None."""
    if len(times_a) < WINDOWS or len(times_b) < WINDOWS:
        return None
    low = max(float(times_a.min()), float(times_b.min()))
    high = min(float(times_a.max()), float(times_b.max()))
    if not high > low:
        return None
    for times in (times_a, times_b):
        if np.count_nonzero((times >= low) & (times <= high)) < OVERLAP * len(times):
            return None
    return low, high


def _window_counts(
    sequence: BoolArray, times: FloatArray, edges: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Failures and requests in each window (a request belongs to the window it ended in)."""
    inside = (times >= edges[0]) & (times <= edges[-1])
    index = np.clip(np.searchsorted(edges, times[inside], side="right") - 1, 0, len(edges) - 2)
    windows = len(edges) - 1
    failures = np.bincount(index, weights=sequence[inside].astype(np.float64), minlength=windows)
    requests = np.bincount(index, minlength=windows)
    return failures.astype(np.float64), requests.astype(np.float64)


def _coarse(values: FloatArray, groups: int) -> FloatArray:
    grouped: FloatArray = values.reshape(groups, -1).sum(axis=1)
    return grouped


def _share(requests_a: FloatArray, requests_b: FloatArray, ratio: float) -> FloatArray:
    """B's expected share of a window's failures when B's rate is `ratio` times A's."""
    total = requests_a + ratio * requests_b
    share: FloatArray = np.where(total > 0, ratio * requests_b / np.where(total > 0, total, 1), 0)
    return share


def _cross_p(
    fails_a: FloatArray, reqs_a: FloatArray, fails_b: FloatArray, reqs_b: FloatArray,
    rng: np.random.Generator,
) -> float:  # fmt: skip
    """One-sided permutation p of the cross-product of the arms' excess counts per stretch."""
    excess = []
    for fails, reqs in ((fails_a, reqs_a), (fails_b, reqs_b)):
        rate = fails.sum() / reqs.sum() if reqs.sum() > 0 else 0.0
        excess.append(fails - rate * reqs)
    observed = float((excess[0] * excess[1]).sum())
    shuffled = np.array([rng.permutation(excess[1]) for _ in range(PERMUTATIONS)])
    null = (shuffled * excess[0][None, :]).sum(axis=1)
    return monte_carlo_p(null, observed)


def _residual_p(
    totals: FloatArray, share: FloatArray, fails_b: FloatArray, rng: np.random.Generator
) -> float:
    """Correlation between neighbouring stretches of B's excess over its share (lags 1-4), the
    larger of two exact nulls' p-values' complement: B's share redrawn from Binomial(total,
    share) in every stretch, and the stretches shuffled. The smaller p is returned."""
    residual = fails_b - totals * share
    observed = float(_autocorrelation_sum([residual[None, :]], CHECK_LAGS)[0])
    counts = np.broadcast_to(totals.astype(np.int64), (PERMUTATIONS, len(totals)))
    redrawn = rng.binomial(counts, np.broadcast_to(share, counts.shape)) - totals * share
    shuffled = np.array([rng.permutation(residual) for _ in range(PERMUTATIONS)])
    p_values = []
    for null in (redrawn.astype(np.float64), shuffled):
        replicated = _autocorrelation_sum([null], CHECK_LAGS)
        p_values.append(monte_carlo_p(replicated, observed))
    return min(p_values)


def _batch_t(fails_a: FloatArray, reqs_a: FloatArray, fails_b: FloatArray,
             reqs_b: FloatArray) -> tuple[float, float, float]:  # fmt: skip
    """t over the batches' excess of B over its share under equal rates: (t, p, the design
    effect: the excess's variance over its binomial variance)."""
    from scipy.special import stdtr

    share = _share(reqs_a, reqs_b, 1.0)
    totals = fails_a + fails_b
    excess = fails_b - totals * share
    spread = float(excess.std(ddof=1))
    binomial = float((totals * share * (1 - share)).mean())
    effect = max(1.0, spread**2 / binomial) if binomial > 0 else 1.0
    if spread == 0.0:
        return 0.0, 1.0, effect
    statistic = float(excess.mean()) / (spread / math.sqrt(len(excess)))
    return statistic, float(2.0 * stdtr(len(excess) - 1, -abs(statistic))), effect


def _dispersion(fails_a: FloatArray, reqs_a: FloatArray, fails_b: FloatArray,
                reqs_b: FloatArray) -> tuple[float, float, int]:  # fmt: skip
    """Pearson's X2 of B's failures in each group about its share at the fitted rate ratio:
    (X2 / df, its upper-tail p, df = groups holding failures - 2)."""
    from scipy.special import chdtrc

    totals = fails_a + fails_b
    used = totals > 0
    df = max(1, int(used.sum()) - 2)
    rate_a = fails_a.sum() / reqs_a.sum() if reqs_a.sum() > 0 else 0.0
    rate_b = fails_b.sum() / reqs_b.sum() if reqs_b.sum() > 0 else 0.0
    if not (rate_a > 0 and rate_b > 0):
        # One arm has no failure: B's share is 0 or 1 in every group whatever the other arm's
        # failures did (one burst or many), so nothing says it is binomial: not assessable.
        return 1.0, 0.0, df
    share = _share(reqs_a[used], reqs_b[used], rate_b / rate_a)
    variance = totals[used] * share * (1.0 - share)
    keep = variance > 0
    squares = (fails_b[used] - totals[used] * share)[keep] ** 2 / variance[keep]
    x2 = float(squares.sum())
    return x2 / df, float(chdtrc(df, x2)), df


def _share_test(fails_a: FloatArray, reqs_a: FloatArray, fails_b: FloatArray,
                reqs_b: FloatArray, dispersion: float, df: int) -> TestResult:  # fmt: skip
    """B's failures against its share of each window's failures under "same rate" (B's share of
    the window's requests), summed over the windows: binomial given the windows' totals
    whatever rate the arms shared, its variance scaled by the dispersion (at least 1), against
    t with the dispersion's degrees of freedom."""
    from scipy.special import stdtr

    share = _share(reqs_a, reqs_b, 1.0)
    totals = fails_a + fails_b
    excess = float((fails_b - totals * share).sum())
    variance = float((totals * share * (1.0 - share)).sum()) * max(1.0, dispersion)
    statistic = excess / math.sqrt(variance) if variance > 0 else 0.0
    p_value = float(2.0 * stdtr(df, -abs(statistic))) if variance > 0 else 1.0
    scale = max(1.0, dispersion)
    note = (
        f"B's share of each of {len(totals)} windows' failures, variance x{scale:.2f} "
        f"(dispersion over {CHECK_BINS} stretches)"
    )
    return TestResult("paired_share", statistic, p_value, float(df), note)


@dataclass(frozen=True, slots=True)
class Pairing:
    """What `paired_test` found: the checks, the batches' t and the share test."""

    check: PairedCheck
    batch_t: TestResult
    """t over the 12 batches' excesses (decides where the one-run check withheld)."""
    share: TestResult
    """B's share of each window's failures (decides where `check.share_usable`)."""


def paired_test(
    seq_a: BoolArray, times_a: FloatArray, seq_b: BoolArray, times_b: FloatArray, seed: int = 0
) -> Pairing | None:
    """The pairing of two side-by-side arms: its checks and its tests (None when the arms did
    not run side by side)."""
    span = side_by_side(times_a, times_b)
    if span is None:
        return None
    edges = np.linspace(span[0], span[1], WINDOWS + 1)
    fails_a, reqs_a = _window_counts(seq_a, times_a, edges)
    fails_b, reqs_b = _window_counts(seq_b, times_b, edges)
    rng = np.random.default_rng(seed + 26)
    stretches = [_coarse(x, CHECK_BINS) for x in (fails_a, reqs_a, fails_b, reqs_b)]
    cross_p = _cross_p(stretches[0], stretches[1], stretches[2], stretches[3], rng)
    failures = float(fails_a.sum() + fails_b.sum())
    share = _share(stretches[1], stretches[3], 1.0)  # B's share under "same rate" (see above)
    residual_p = _residual_p(stretches[0] + stretches[2], share, stretches[2], rng)
    share_residual_p = residual_p
    rate_a, rate_b = (float(stretches[i].sum() / stretches[i + 1].sum()) for i in (0, 2))
    if failures >= DENSE_FAILURES and rate_a > 0 and rate_b > 0:
        # the share test's gate, about B's share at the fitted ratio (not at sparse counts)
        fitted = _share(stretches[1], stretches[3], rate_b / rate_a)
        share_residual_p = _residual_p(stretches[0] + stretches[2], fitted, stretches[2], rng)
    batches = [_coarse(x, BATCHES) for x in (fails_a, reqs_a, fails_b, reqs_b)]
    statistic, p_value, effect = _batch_t(*batches)
    dispersion, dispersion_p, dispersion_df = _dispersion(*stretches)
    dispersion_p = min(dispersion_p, _dispersion(*batches)[1])
    check = PairedCheck(
        cross_p, residual_p, check_level(int(failures)),
        (int(reqs_a.sum()), int(reqs_b.sum())), span[1] - span[0], effect, int(failures),
        dispersion, dispersion_p, share_residual_p,
    )  # fmt: skip
    note = f"{BATCHES} windows of ~{check.span_s / BATCHES:,.1f} s, B's excess over its share"
    return Pairing(
        check,
        TestResult("paired_windows", statistic, p_value, float(BATCHES - 1), note),
        _share_test(fails_a, reqs_a, fails_b, reqs_b, dispersion, dispersion_df),
    )
