"""Clustering tests: calibration on independent sequences, power on bursty ones."""

from __future__ import annotations

import numpy as np
import pytest
from sim import bursty, independent

from soakgate.errors import UsageError
from soakgate.stats._sampling import random_subsets
from soakgate.stats.clustering import (
    clustering_verdict,
    dispersion_test,
    gap_test,
    smallest_hmm_replicates,
)
from soakgate.stats.hmm import fit_hmm, hmm_test


def test_independent_sequences_rarely_called_clustered() -> None:
    rng = np.random.default_rng(11)
    seqs = independent(rng, 200, 20_000, 0.0075)
    alarms = [clustering_verdict(s, seed=i).clustered for i, s in enumerate(seqs)]
    assert np.mean(alarms) <= 0.075  # nominal 5%; 200 seeds leave about 1.5 points of noise


def test_bursty_sequences_detected() -> None:
    rng = np.random.default_rng(12)
    seqs = bursty(rng, 60, 20_000, clean=0.002, enter=0.0003)
    detected = [clustering_verdict(s, seed=i).clustered for i, s in enumerate(seqs)]
    assert np.mean(detected) >= 0.9


def test_design_effect_near_one_when_independent_and_large_when_bursty() -> None:
    rng = np.random.default_rng(13)
    calm = clustering_verdict(independent(rng, 1, 40_000, 0.005)[0])
    storm = clustering_verdict(bursty(rng, 1, 40_000, clean=0.002, enter=0.0003)[0])
    assert calm.design_effect < 1.6
    assert storm.design_effect > 3.0
    assert storm.effective_n == pytest.approx(40_000 / storm.design_effect)
    assert storm.windows == 80


def test_dispersion_test_chi_square_is_calibrated() -> None:
    rng = np.random.default_rng(14)
    p_values = [dispersion_test(s)[0].p_value for s in independent(rng, 600, 20_000, 0.005)]
    assert np.mean(np.array(p_values) < 0.05) == pytest.approx(0.05, abs=0.025)


def test_gap_test_flags_bursts() -> None:
    rng = np.random.default_rng(15)
    assert gap_test(bursty(rng, 1, 20_000, clean=0.002, enter=0.0003)[0]).p_value <= 0.01


@pytest.mark.slow
def test_hmm_recovers_bursts_and_not_noise() -> None:
    rng = np.random.default_rng(16)
    storm = bursty(rng, 1, 60_000, clean=0.001, burst=0.3, enter=0.0002, leave=0.05)[0]
    fit = fit_hmm(len(storm), np.flatnonzero(storm))
    assert fit.burst_rate == pytest.approx(0.3, abs=0.1)
    assert 1 / fit.leave_burst == pytest.approx(20, rel=0.5)
    assert hmm_test(storm[:20_000], replicates=9).p_value == pytest.approx(0.1)
    calm = independent(rng, 1, 20_000, 0.005)[0]
    assert fit_hmm(len(calm), np.flatnonzero(calm)).lr_statistic < 10


@pytest.mark.slow
def test_the_hmm_can_count_with_the_fewest_replicates_allowed() -> None:
    # 60 replicates: the smallest p-value, 1/61, is below alpha/3 = 1/60 (59 could never be).
    rng = np.random.default_rng(17)
    result = clustering_verdict(
        bursty(rng, 1, 20_000, clean=0.002, enter=0.0003)[0], gap_permutations=199,
        hmm_replicates=smallest_hmm_replicates(0.05, 3),
    )  # fmt: skip
    assert result.hmm is not None
    assert [t.name for t in result.tests] == ["dispersion", "gap", "hmm"]
    hmm = result.tests[2]
    assert hmm.p_value == pytest.approx(1 / 61) and "hmm p=" in result.reason


@pytest.mark.parametrize("replicates", [1, 4, 59])
def test_an_hmm_bootstrap_too_small_to_count_is_refused(replicates: int) -> None:
    with pytest.raises(UsageError, match="cannot fall below alpha/3"):
        clustering_verdict(np.zeros(1000, dtype=int), hmm_replicates=replicates)


def test_the_hmm_is_off_by_default() -> None:
    rng = np.random.default_rng(19)
    result = clustering_verdict(bursty(rng, 1, 13_000, clean=0.002, enter=0.0003)[0])
    assert result.hmm is None and [t.name for t in result.tests] == ["dispersion", "gap"]


def test_random_subsets_uniform_and_distinct() -> None:
    rng = np.random.default_rng(18)
    subsets = random_subsets(rng, 50, 5, 20_000)
    assert (np.diff(subsets, axis=1) > 0).all()
    frequency = np.bincount(subsets.ravel(), minlength=50) / 20_000
    assert frequency == pytest.approx(np.full(50, 0.1), abs=0.01)


def test_degenerate_sequences() -> None:
    assert not clustering_verdict(np.zeros(1000, dtype=int)).clustered
    assert not clustering_verdict(np.ones(1000, dtype=int)).clustered
    with pytest.raises(UsageError):
        clustering_verdict([0, 2, 1])
