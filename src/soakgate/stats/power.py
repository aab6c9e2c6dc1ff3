"""Sample size and power for two failure rates (normal approximation, pooled null variance)."""

from __future__ import annotations

import math

from soakgate.errors import UsageError


def check_design(baseline_rate: float, ratio: float, alpha: float, power: float | None) -> None:
    """Raise UsageError for numbers no design can use."""
    if not 0.0 < baseline_rate < 1.0:
        raise UsageError(f"baseline rate must be in (0, 1), got {baseline_rate}")
    if ratio <= 0.0 or ratio == 1.0:
        raise UsageError(f"ratio must be > 0 and not 1, got {ratio}")
    if not 0.0 < baseline_rate * ratio < 1.0:
        raise UsageError(f"baseline rate x ratio must be in (0, 1), got {baseline_rate * ratio}")
    if not 0.0 < alpha < 1.0:
        raise UsageError(f"alpha must be in (0, 1), got {alpha}")
    if power is not None and not 0.0 < power < 1.0:
        raise UsageError(f"power must be in (0, 1), got {power}")


def _check_design_effect(design_effect: float) -> None:
    if not design_effect >= 1.0:
        raise UsageError(f"design effect must be >= 1, got {design_effect}")


def n_per_arm(
    baseline_rate: float,
    ratio: float,
    alpha: float = 0.05,
    power: float = 0.8,
    design_effect: float = 1.0,
) -> int:
    """Generations per arm to tell baseline*ratio from baseline (two-sided), times deff."""
    from statsmodels.stats.proportion import samplesize_proportions_2indep_onetail

    check_design(baseline_rate, ratio, alpha, power)
    _check_design_effect(design_effect)
    diff = baseline_rate * ratio - baseline_rate
    n = samplesize_proportions_2indep_onetail(
        diff, baseline_rate, power, ratio=1, alpha=alpha, alternative="two-sided"
    )
    return math.ceil(float(n) * design_effect)


def achieved_power(
    baseline_rate: float,
    ratio: float,
    n: int,
    alpha: float = 0.05,
    design_effect: float = 1.0,
) -> float:
    """Power of the two-sided test with n generations per arm (effective n = n / deff)."""
    from statsmodels.stats.proportion import power_proportions_2indep

    check_design(baseline_rate, ratio, alpha, None)
    _check_design_effect(design_effect)
    if n <= 0:
        raise UsageError(f"n must be positive, got {n}")
    diff = baseline_rate * ratio - baseline_rate
    result = power_proportions_2indep(
        diff,
        baseline_rate,
        n / design_effect,
        ratio=1,
        alpha=alpha,
        alternative="two-sided",
        return_results=False,
    )
    return float(result)


def detectable_ratio(
    baseline_rate: float,
    n: int,
    alpha: float = 0.05,
    power: float = 0.8,
    design_effect: float = 1.0,
) -> float:
    """Smallest ratio > 1 that n generations per arm detect with the given power."""
    from scipy.optimize import brentq

    check_design(baseline_rate, 1.0 + 1e-9, alpha, power)
    ceiling = (1.0 - 1e-9) / baseline_rate
    if achieved_power(baseline_rate, ceiling, n, alpha, design_effect) < power:
        return math.inf

    def shortfall(r: float) -> float:
        return achieved_power(baseline_rate, r, n, alpha, design_effect) - power

    return float(brentq(shortfall, 1.0 + 1e-9, ceiling, xtol=1e-6))
