"""Sample size and power against the issue's figures and against simulation."""

from __future__ import annotations

import numpy as np
import pytest

from soakgate.errors import UsageError
from soakgate.stats.power import achieved_power, detectable_ratio, n_per_arm


def test_n_for_point_two_vs_point_three_percent() -> None:
    assert 38_500 <= n_per_arm(0.002, 1.5) <= 39_500


def test_power_at_thirteen_thousand() -> None:
    assert achieved_power(0.002, 1.5, 13_000) == pytest.approx(0.37, abs=0.01)


def test_detectable_ratio_inverts_n() -> None:
    assert detectable_ratio(0.002, n_per_arm(0.002, 1.5)) == pytest.approx(1.5, abs=0.002)


def test_design_effect_inflates_n_and_deflates_power() -> None:
    assert n_per_arm(0.002, 1.5, design_effect=3.0) == pytest.approx(3 * 39_145, rel=1e-4)
    assert achieved_power(0.002, 1.5, 39_146, design_effect=3.0) == pytest.approx(
        achieved_power(0.002, 1.5, 13_049), abs=1e-4
    )


def test_power_matches_simulated_pooled_z() -> None:
    from scipy.stats import norm

    rng = np.random.default_rng(7)
    n, reps = 13_000, 4_000
    a = rng.binomial(n, 0.002, reps)
    b = rng.binomial(n, 0.003, reps)
    pooled = (a + b) / (2 * n)
    z = (b - a) / n / np.sqrt(pooled * (1 - pooled) * 2 / n)
    simulated = float((np.abs(z) >= norm.isf(0.025)).mean())
    assert simulated == pytest.approx(achieved_power(0.002, 1.5, n), abs=0.03)


@pytest.mark.parametrize(
    ("rate", "ratio", "alpha", "power"),
    [(0.0, 1.5, 0.05, 0.8), (1.2, 1.5, 0.05, 0.8), (0.002, 0.0, 0.05, 0.8), (0.002, 1.5, 0.05, 1)],
)
def test_bad_numbers(rate: float, ratio: float, alpha: float, power: float) -> None:
    with pytest.raises(UsageError):
        n_per_arm(rate, ratio, alpha, power)
