"""The verdict: its library entry point, its designs, and its false-alarm rate by simulation
under failure processes whose state builds up and resets (the shipped defaults throughout)."""

from __future__ import annotations

import numpy as np
import pytest
from bench.processes import by_name, simulate, simulate_pair

from soakgate.errors import UsageError
from soakgate.stats import compare_outcomes
from soakgate.stats.compare import Arm, compare_arms

RATE = 0.002


def _pairs(name: str, reps: int, n: int, seed: int, fresh: bool = False) -> list[np.ndarray]:
    return simulate(by_name(name), np.random.default_rng(seed), 2 * reps, n, RATE, fresh)


def _false_alarms(name: str, reps: int, n: int, seed: int) -> tuple[float, float]:
    """Share of DIFFER verdicts between two runs of the same process: the library entry point,
    and `compare_arms` (what `soakgate compare` calls) on the same pairs."""
    seqs = _pairs(name, reps, n, seed)
    library = compare_arms_hits = 0
    for i in range(reps):
        a, b = seqs[2 * i], seqs[2 * i + 1]
        library += compare_outcomes(a, b, seed=i).differ
        compare_arms_hits += compare_arms(
            Arm.from_sequence("A", a), Arm.from_sequence("B", b), seed=i
        ).significant
    return library / reps, compare_arms_hits / reps


@pytest.mark.parametrize("name", ["reset-2000", "regimes"])
def test_false_alarms_stay_below_8_percent_when_state_builds_up_and_resets(name: str) -> None:
    # 300 seeded pairs at 13,000 requests per arm; today's rule gives 5% or less here, the
    # pre-test-then-switch rule it replaced 28% (reset) and 25% (regimes).
    library, cli = _false_alarms(name, 300, 13_000, seed=1400)
    assert library == cli
    assert library <= 0.08


def test_false_alarms_stay_below_8_percent_with_few_failures_and_long_resets() -> None:
    # Resets every ~5,000 requests at 13,000 per arm: ~2.6 cycles, ~45 failures per pair. The
    # correlation check at a fixed 0.05 missed the dependence in this sparse case and 12% of
    # equal pairs ended as DIFFER (bench_calibration, 1,000 pairs); judged at check_level's
    # sparse level it is 5%.
    library, _ = _false_alarms("reset-5000", 300, 13_000, seed=1404)
    assert library <= 0.08


def test_a_drift_both_arms_share_is_no_false_alarm_and_one_apart_is_a_difference() -> None:
    # One OU path of the log rate for both arms (what changes with the hour changes both
    # servers): equal rates at every request, so DIFFER is a false alarm and stays rare
    # (bench_calibration: 3.1% at 13k). Each arm on its own path: the arms' window rates differ,
    # which the same verdict reports far more often (bench_drift_window.py).
    rng = np.random.default_rng(1405)
    shared = simulate_pair(by_name("drift-shared"), rng, 200, 13_000, RATE, RATE)
    apart = simulate_pair(by_name("drift-strong"), rng, 200, 40_000, RATE, RATE)
    hits = {name: sum(compare_outcomes(a, b, seed=i).differ
                      for i, (a, b) in enumerate(zip(*pairs, strict=True)))
            for name, pairs in (("shared", shared), ("apart", apart))}  # fmt: skip
    assert hits["shared"] / 200 <= 0.08, hits
    assert hits["apart"] / 200 >= 0.1, hits  # ~20% (BENCHMARKS.md section 7)
    # one path: the arms' failure counts move together from pair to pair; apart, they do not
    counts = {name: np.array([[x.sum(), y.sum()] for x, y in zip(*pairs, strict=True)])
              for name, pairs in (("shared", shared), ("apart", apart))}  # fmt: skip
    assert np.corrcoef(counts["shared"].T)[0, 1] > 0.4
    assert abs(np.corrcoef(counts["apart"].T)[0, 1]) < 0.25


def test_false_alarms_stay_below_8_percent_at_40k_under_resets() -> None:
    library, _ = _false_alarms("reset-2000", 150, 40_000, seed=1401)
    assert library <= 0.08


def test_replicate_blocks_hold_alpha_under_resets() -> None:
    # 8 blocks per arm of 5,000, each block a fresh server: the test over blocks.
    seqs = _pairs("reset-2000", 8 * 2 * 200, 5_000, seed=1402, fresh=True)
    hits = 0
    for i in range(200):
        blocks = seqs[16 * i : 16 * i + 16]
        verdict = compare_outcomes(blocks[:8], blocks[8:], seed=i)
        assert verdict.design == "replicate blocks" and verdict.blocks == (8, 8)
        hits += verdict.differ
    assert hits / 200 <= 0.08


def test_one_run_of_independent_requests_keeps_its_power() -> None:
    rng = np.random.default_rng(1403)
    differ = 0
    for i in range(150):
        a, b = rng.random(40_000) < RATE, rng.random(40_000) < RATE * 2.0
        differ += compare_outcomes(a, b, seed=i).differ
    assert differ / 150 >= 0.9  # ratio 2 at 40,000 per arm: pooled z has 99.6% power


def test_a_run_that_cannot_resolve_its_dependence_is_indeterminate() -> None:
    # One reset cycle of ~5,000 requests on 13,000 per arm: the state spans the run.
    (a, b) = _pairs("reset-5000", 1, 13_000, seed=3)
    found = [compare_outcomes(a, b, seed=s) for s in range(3)]
    verdicts = {v.verdict for v in found}
    assert verdicts <= {"indeterminate", "no difference", "differ"}
    seqs = _pairs("reset-5000", 60, 13_000, seed=1404)
    outcome = [compare_outcomes(seqs[2 * i], seqs[2 * i + 1]).verdict for i in range(60)]
    assert outcome.count("indeterminate") / 60 >= 0.3
    first = next(
        compare_outcomes(seqs[2 * i], seqs[2 * i + 1])
        for i in range(60)
        if outcome[i] == "indeterminate"
    )
    assert not first.differ and first.dependence is not None and first.dependence.correlated
    assert "independent requests per arm" in first.reason and "replicate" in first.reason
    assert first.effective_n < 13_000 / 1.5


def test_a_run_failing_on_every_request_is_not_read_as_correlated() -> None:
    """The check's residuals are each stretch's count less its share of the failures. From the
    mean stretch instead, a run failing on every request had counts that followed the
    stretches' lengths (70 requests in 40 stretches: 1, 2, 2, 1, ...), which read as
    correlation: 100% vs 0% twin mismatch on 70 pairs was INDETERMINATE every time (a CI run saw
    46% vs 0% INDETERMINATE too, at the sparse level). Independent requests at a high share fire
    the check at most at its level."""
    from soakgate.stats.dependence import long_range_check

    for n in (70, 1_001, 13_000):
        everything = compare_outcomes(np.zeros(n, bool), np.ones(n, bool))
        assert everything.differ and everything.dependence is not None, n
        assert not everything.dependence.correlated and everything.dependence.p_value == 1.0
    rng = np.random.default_rng(1406)
    for n, share in ((430, 0.5), (430, 0.95), (13_001, 0.01)):
        fired = [long_range_check([rng.random(n) < share], seed=i) for i in range(300)]
        level = max(check.level for check in fired)
        rate = sum(check.correlated for check in fired) / 300
        assert rate <= level + 3 * (level * (1 - level) / 300) ** 0.5, (n, share, rate, level)


def test_entry_point_forms_and_fields() -> None:
    rng = np.random.default_rng(7)
    a = (rng.random(13_000) < RATE).astype(int)
    b = (rng.random(13_000) < RATE * 4).astype(int)
    one = compare_outcomes(list(a), b.tolist())
    assert one.design == "one run per arm" and one.test == "batch_means"
    assert one.verdict in ("differ", "indeterminate") and one.differ == (one.verdict == "differ")
    assert 0.0 <= one.p_value <= 1.0 and 0 < one.effective_n <= 13_000
    blocks = compare_outcomes(list(a.reshape(4, -1)), np.split(b, 4))
    assert blocks.design == "replicate blocks" and blocks.test == "quasi_poisson"
    assert compare_outcomes(a.reshape(4, -1), np.split(b, 4)).p_value == blocks.p_value
    two = compare_outcomes([a[:6500], a[6500:]], [b[:6500], b[6500:]])
    assert two.design == "one run per arm" and "runs joined" in two.reason
    with pytest.raises(UsageError, match="arm B"):
        compare_outcomes(a, [0, 2, 1])
    with pytest.raises(UsageError, match="alpha"):
        compare_outcomes(a, b, alpha=1.5)


def test_entry_point_is_exactly_what_compare_arms_decides() -> None:
    rng = np.random.default_rng(8)
    for i in range(20):
        a, b = rng.random(13_000) < RATE, rng.random(13_000) < RATE * (1 + i / 10)
        ours = compare_outcomes(a, b, seed=i)
        theirs = compare_arms(Arm.from_sequence("A", a), Arm.from_sequence("B", b), seed=i)
        assert (ours.verdict, ours.p_value, ours.test) == (
            theirs.verdict.verdict,
            theirs.p_value,
            theirs.verdict_test,
        )


def test_no_time_order_means_the_exact_test_with_its_assumption_said() -> None:
    verdict = compare_arms(Arm("A", 20, 20_000), Arm("B", 45, 20_000)).verdict
    assert verdict.design == "counts only" and verdict.test == "poisson_exact" and verdict.differ
    assert "assuming independent requests" in verdict.reason
