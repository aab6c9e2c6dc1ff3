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


DEFAULT_BLOCKS = 8  # per arm: t over blocks on 14 df, ~4% less power than known variance
MIN_PLAN_BLOCKS = 4  # per arm: fewer give a t over blocks too few degrees of freedom


def block_power(
    baseline_rate: float,
    ratio: float,
    blocks: int,
    requests_per_block: int,
    alpha: float = 0.05,
    design_effect: float = 1.0,
) -> float:
    """Power of the quasi-Poisson t over `blocks` replicate blocks per arm (noncentral t on
    2 x blocks - 2 degrees of freedom, block counts overdispersed by `design_effect`)."""
    from scipy.stats import nct
    from scipy.stats import t as student_t

    check_design(baseline_rate, ratio, alpha, None)
    _check_design_effect(design_effect)
    if blocks < 2 or requests_per_block < 1:
        raise UsageError("a block design needs at least 2 blocks per arm of at least 1 request")
    expected = [blocks * requests_per_block * r for r in (baseline_rate, baseline_rate * ratio)]
    spread = math.sqrt(design_effect * (1.0 / expected[0] + 1.0 / expected[1]))
    shift = abs(math.log(ratio)) / spread
    dof = 2 * blocks - 2
    critical = float(student_t.isf(alpha / 2.0, dof))
    return float(nct.sf(critical, dof, shift) + nct.cdf(-critical, dof, shift))


def block_design(
    baseline_rate: float,
    ratio: float,
    alpha: float = 0.05,
    power: float = 0.8,
    design_effect: float = 1.0,
    blocks: int | None = None,
    requests_per_block: int | None = None,
) -> tuple[int, int, float]:
    """(blocks per arm, requests per block, achieved power): the fewest requests per block for
    the given number of blocks (default 8), or the fewest blocks for a given block length."""
    check_design(baseline_rate, ratio, alpha, power)
    if blocks is not None and blocks < MIN_PLAN_BLOCKS:
        raise UsageError(f"a block design needs at least {MIN_PLAN_BLOCKS} blocks per arm")
    if requests_per_block is not None and requests_per_block < 1:
        raise UsageError(f"requests per block must be positive, got {requests_per_block}")
    if blocks is not None and requests_per_block is not None:
        got = block_power(baseline_rate, ratio, blocks, requests_per_block, alpha, design_effect)
        return blocks, requests_per_block, got
    if requests_per_block is not None:
        count = MIN_PLAN_BLOCKS
        while count < 10_000:
            got = block_power(baseline_rate, ratio, count, requests_per_block, alpha, design_effect)
            if got >= power:
                return count, requests_per_block, got
            count += 1
        raise UsageError("no block count up to 10,000 reaches the power: use longer blocks")
    count = blocks or DEFAULT_BLOCKS
    low, high = 1, 1
    while block_power(baseline_rate, ratio, count, high, alpha, design_effect) < power:
        low, high = high, high * 2
        if high > 10**10:
            raise UsageError("no block length reaches the power")
    while low < high:  # smallest length reaching the power, by bisection
        middle = (low + high) // 2
        if block_power(baseline_rate, ratio, count, middle, alpha, design_effect) >= power:
            high = middle
        else:
            low = middle + 1
    return count, high, block_power(baseline_rate, ratio, count, high, alpha, design_effect)
