"""Every failure outcome judged (issue 25): crash counts over uptime, divergence against the
reference's own, episodes where failures cluster, and one family-wise error across outcomes."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from scipy.stats import chi2

from soakgate.stats import compare_outcomes
from soakgate.stats.outcomes import (
    COLLAPSE,
    OutcomeComparison,
    adjust_family,
    crash_rate,
    crash_verdict,
    divergence_direction,
    divergence_verdict,
)
from soakgate.stats.verdict import episode_starts


def test_crash_rate_has_the_exact_poisson_interval_per_hour_and_per_request() -> None:
    none = crash_rate(0, 7200.0, 500)
    assert none.per_hour == 0.0 and none.per_hour_ci[0] == 0.0
    assert none.per_hour_ci[1] == pytest.approx(chi2.ppf(0.975, 2) / 2 / 2.0)  # 1.84 per hour
    seven = crash_rate(7, 1800.0, 238)
    assert seven.per_hour == pytest.approx(14.0)
    low, high = (chi2.ppf(0.025, 14) / 2, chi2.ppf(0.975, 16) / 2)
    assert seven.per_hour_ci == pytest.approx((low * 2, high * 2))
    assert seven.per_request is not None and seven.per_request.events == 7


def test_seven_crashes_against_none_over_equal_uptime_differ_by_the_exact_test() -> None:
    a, b = crash_rate(0, 420.0, 268), crash_rate(7, 420.0, 238)
    verdict = crash_verdict(a, b)
    assert verdict.p_value == pytest.approx(2 * 0.5**7)  # binomial(7, 1/2), both tails
    assert verdict.differ and verdict.scope == "instances"
    assert crash_verdict(a, crash_rate(0, 420.0, 238)).p_value == 1.0
    # B up twice as long: its share of the crashes is expected to be 2/3, so 7 of 7 is weaker
    assert crash_verdict(a, crash_rate(7, 840.0, 238)).p_value > verdict.p_value


def test_divergence_early_and_frequent_differs_even_when_the_reference_diverged_a_little() -> None:
    rng = np.random.default_rng(25)
    own = np.where(rng.random(86) < 5 / 86, rng.integers(100, 160, 86), -1)  # late, 5 of 86
    candidate = np.where(rng.random(180) < 0.844, 0, -1)  # 84% at token 0
    verdict = divergence_verdict(own, candidate)
    assert verdict.differ and verdict.p_value < 1e-10
    assert divergence_direction(own, candidate) == 1
    assert "median first at token 0" in verdict.result.note


def test_late_divergence_at_the_references_own_rate_is_no_difference_beyond_alpha() -> None:
    """A reference against a second instance of itself: both diverge late, at one rate."""
    rng = np.random.default_rng(2026)
    differ = 0
    trials = 400
    for _ in range(trials):
        own = np.where(rng.random(86) < 0.06, rng.integers(64, 160, 86), -1)
        other = np.where(rng.random(86) < 0.06, rng.integers(64, 160, 86), -1)
        differ += divergence_verdict(own, other).differ
    assert differ / trials <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / trials)


def test_no_divergence_anywhere_is_no_difference() -> None:
    verdict = divergence_verdict(np.full(20, -1), np.full(30, -1))
    assert verdict.p_value == 1.0 and not verdict.differ


def test_episodes_count_a_burst_once() -> None:
    sequence = np.zeros(40, bool)
    sequence[[3, 4, 5, 9, 30, 31]] = True
    # segments of 4 requests, an episode ends after 1 empty segment: 9 follows 5's segment
    assert np.flatnonzero(episode_starts(sequence, segments=10, quiet=1)).tolist() == [3, 30]
    # segments of 2: 9's segment follows an empty one
    assert np.flatnonzero(episode_starts(sequence, segments=20, quiet=1)).tolist() == [3, 9, 30]
    # ... unless 2 empty segments are needed to end an episode
    assert np.flatnonzero(episode_starts(sequence, segments=20, quiet=2)).tolist() == [3, 30]
    assert np.flatnonzero(episode_starts(sequence, quiet=1)).tolist() == [3, 9, 30]  # per request


def test_episodes_are_read_per_segment_so_a_plans_compact_runs_see_the_same() -> None:
    rng = np.random.default_rng(5)
    full = rng.random(12_000) < 0.002
    full[3_000:3_400] = rng.random(400) < 0.3  # a burst over several segments
    counts = np.add.reduceat(full.astype(np.int64), np.arange(0, 12_000, 100))
    width = int(counts.max())  # as stats.segments.compact_sequence lays them out
    compact = np.zeros(120 * width, bool)
    for i, k in enumerate(counts):
        compact[i * width : i * width + k] = True
    per_segment = [
        np.add.reduceat(episode_starts(s).astype(np.int64), np.arange(0, len(s), len(s) // 120))
        for s in (full, compact)
    ]
    assert per_segment[0].tolist() == per_segment[1].tolist()


def _crash_windows(rng: np.random.Generator, n: int, episodes: int) -> np.ndarray:
    errors = np.zeros(n, bool)
    for start in rng.choice(n - 10, episodes, replace=False):
        errors[start : start + 8] = True
    return errors


def test_overwhelming_clustered_evidence_is_decided_on_its_episodes() -> None:
    """Seven crashes' worth of lost requests against none: where the correlation check
    withholds the verdict on the requests, the episodes decide it (before, 29 of these 40 were
    INDETERMINATE; now 8 are)."""
    verdicts: Counter[tuple[str, str]] = Counter()
    for seed in range(40):
        rng = np.random.default_rng(seed)
        verdict = compare_outcomes(np.zeros(268, bool), _crash_windows(rng, 238, 7), seed=seed)
        verdicts[(verdict.verdict, verdict.test)] += 1
        if verdict.test == "episodes":
            assert verdict.differ and "each burst is counted once: 0 vs " in verdict.reason
    assert verdicts[("differ", "episodes")] >= 15
    assert verdicts[("indeterminate", "batch_means")] <= 10


def test_equal_arms_whose_failures_come_in_episodes_are_no_difference_beyond_alpha() -> None:
    rng = np.random.default_rng(11)
    differ = 0
    trials = 300
    for seed in range(trials):
        a = _crash_windows(rng, 600, int(rng.poisson(4)) or 1)
        b = _crash_windows(rng, 600, int(rng.poisson(4)) or 1)
        differ += compare_outcomes(a, b, seed=seed).differ
    assert differ / trials <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / trials)


def _item(outcome: str, p_value: float, events: tuple[int, int], word: str = "differ") -> object:
    from soakgate.stats.robust import TestResult
    from soakgate.stats.verdict import Verdict

    result = TestResult("t", 0.0, p_value)
    verdict = Verdict(word, p_value, "t", "one run per arm", 1.0, 0.05, "", result)
    return OutcomeComparison(outcome, events, (100.0, 100.0), verdict, 1, sum(events) > 0)


def test_the_family_is_holm_over_the_outcomes_that_could_fail() -> None:
    items = [
        _item("crash", 1.0, (0, 0), "no difference"),  # no crash anywhere: out of the family
        _item("error", 0.02, (0, 9)),
        _item("collapse", 0.03, (2, 8)),
        _item("divergence", 0.001, (3, 40)),
        _item("any_failure", 0.004, (2, 17), "indeterminate"),
    ]
    adjust_family(items, 0.05)  # type: ignore[arg-type]
    by = {i.outcome: i for i in items}  # type: ignore[attr-defined]
    assert not by["crash"].in_family and by["crash"].adjusted_p == 1.0
    assert by["divergence"].adjusted_p == pytest.approx(0.004)  # 4 in the family
    assert by["any_failure"].adjusted_p == pytest.approx(0.012) and not by["any_failure"].differ
    assert by["error"].adjusted_p == pytest.approx(0.04) and by["error"].differ
    assert by["collapse"].adjusted_p == pytest.approx(0.04) and by["collapse"].differ


def test_holm_is_statsmodels_holm() -> None:
    from statsmodels.stats.multitest import multipletests

    from soakgate.stats.compare import holm_adjust

    rng = np.random.default_rng(7)
    for size in (1, 2, 5, 9):
        for _ in range(10):  # (statsmodels collects garbage on every call: slow)
            p = rng.random(size) ** 3
            p[rng.random(size) < 0.2] = 1.0  # ties at 1, and the odd tie below it
            if size > 2:
                p[1] = p[0]
            reject, adjusted, _, _ = multipletests(p, alpha=0.05, method="holm")
            ours = holm_adjust(list(p), 0.05)
            assert [r for _, r in ours] == list(reject)
            assert np.allclose([q for q, _ in ours], adjusted)


def test_dense_equal_arms_under_resets_stay_withheld_where_the_check_flags_them() -> None:
    """Dense failures (10%, 2,000 requests per arm) under resets exactly every 4,000 requests:
    equal arms differ as overwhelmingly as a real 5x difference does, and only the correlation
    check keeps them from DIFFER. A rule that decided flagged pairs whose twelve-batch t was
    below alpha/50 and whose t over quarters was below alpha took these false alarms from 7.0%
    to 40.4% (bench_calibration --dense, 1,000 pairs; rejected, BENCHMARKS.md section 7)."""
    from bench.processes import by_name, simulate_pair

    rng = np.random.default_rng(2504)
    pairs = simulate_pair(by_name("fixed-resets"), rng, 150, 2_000, 0.10, 0.10)
    differ = sum(compare_outcomes(a, b, seed=i).differ
                 for i, (a, b) in enumerate(zip(*pairs, strict=True)))  # fmt: skip
    assert differ / 150 <= 0.15


def test_episodes_never_decide_against_the_failures() -> None:
    """Dense failures under resets every ~2,000 requests (10%, 2,000 per arm): an arm late in
    its cycle fails steadily (one long episode), an arm just reset sporadically (many short
    ones). Episodes then point against the failures; deciding on them made 11.6% of equal
    pairs DIFFER (bench_calibration --dense, 1,000 pairs), 9.4 points of it on episodes."""
    from bench.processes import by_name, simulate_pair

    rng = np.random.default_rng(2505)
    pairs = simulate_pair(by_name("reset-2000"), rng, 200, 2_000, 0.10, 0.10)
    differ = 0
    for i, (a, b) in enumerate(zip(*pairs, strict=True)):
        verdict = compare_outcomes(a, b, seed=i)
        differ += verdict.differ
        if verdict.test == "episodes":
            episodes = [int(episode_starts(s).sum()) for s in (a, b)]
            assert (episodes[1] - episodes[0]) * (int(b.sum()) - int(a.sum())) > 0
    assert differ / 200 <= 0.06


def test_a_differ_on_episodes_the_family_overturns_is_indeterminate_and_not_cleared() -> None:
    """80-odd failures of 400 against none, placed so that the one-run check fires: episodes
    decide DIFFER at p = 1/32 (their exact test on a few episodes), far weaker than the batch
    t the check withheld (p ~ 3e-6). Holm over two outcomes overturned that DIFFER, and the
    gate passed B; now the outcome reads INDETERMINATE and the withheld t does not clear B."""
    from soakgate.stats.outcomes import rate_direction

    bad = np.random.default_rng(1).random(400) < 0.2
    verdict = compare_outcomes(np.zeros(400, bool), bad)
    assert verdict.test == "episodes" and verdict.differ and 0.025 < verdict.p_value < 0.05
    assert verdict.withheld_p is not None and verdict.withheld_p < 1e-4
    events, exposure = (0, int(bad.sum())), (400.0, 400.0)
    items = [OutcomeComparison(COLLAPSE, events, exposure, verdict,
                               rate_direction(events, exposure)) for _ in range(2)]  # fmt: skip
    adjust_family(items, 0.05)
    assert not items[0].differ and not items[0].worse
    assert items[0].word == "INDETERMINATE" and items[0].overwhelming and items[0].not_cleared
    alone = OutcomeComparison(COLLAPSE, events, exposure, verdict, 1)
    adjust_family([alone], 0.05)
    assert alone.worse and alone.word == "DIFFER" and not alone.overwhelming


def test_an_indeterminate_outcome_clears_b_only_short_of_overwhelming_evidence() -> None:
    rng = np.random.default_rng(3)
    quiet = compare_outcomes(np.zeros(13_000, bool), rng.random(13_000) < 0.002)
    assert quiet.withheld_p is None  # the check did not fire: nothing was withheld
    stuck = (np.arange(2_000) % 800) < 500  # three long blocks: the check fires
    verdict = compare_outcomes(np.zeros(2_000, bool), stuck)
    assert verdict.verdict == "indeterminate" and verdict.withheld_p == verdict.p_value
    events, exposure = (0, int(stuck.sum())), (2_000.0, 2_000.0)
    for family, cleared in ((1, False), (8, True)):  # p ~ 1.3e-4: x8 is above 0.001
        items = [OutcomeComparison(COLLAPSE, events, exposure, verdict, 1)
                 for _ in range(family)]  # fmt: skip
        adjust_family(items, 0.05)
        assert items[0].not_cleared is not cleared and not items[0].differ
    better = OutcomeComparison(COLLAPSE, (int(stuck.sum()), 0), exposure, verdict, -1)
    adjust_family([better], 0.05)
    assert better.overwhelming and not better.not_cleared  # B better: nothing against it
