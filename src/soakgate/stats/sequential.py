"""Group-sequential stopping: two-sided O'Brien–Fleming-type boundaries by Lan–DeMets spending.

Written by hand: neither scipy nor statsmodels computes group-sequential boundaries. The
boundaries come from the classic recursive numerical integration (Armitage, McPherson and
Rowe) of the score statistic, a Brownian motion observed at the looks. They are on the z
scale; a look judged with a t statistic (few degrees of freedom) uses the t quantile with the
same nominal tail probability (Jennison and Turnbull, Group Sequential Methods, sec. 3.8).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from soakgate.errors import PlanError, UsageError
from soakgate.stats.robust import TestResult
from soakgate.stats.verdict import INDETERMINATE, Verdict

FloatArray = npt.NDArray[np.float64]
GRID_POINTS = 801  # grid over the continuation region; ample for 4-digit boundaries


@dataclass(frozen=True, slots=True)
class SequentialRule:
    """Stopping rule of a group-sequential plan."""

    looks: int
    """Number of equally spaced looks, the last at n max."""
    n_max_per_arm: int
    """Generations per arm at the final look."""
    futility_z: float | None = None
    """Optional non-binding futility bound: stop as 'no difference' when |z| falls below it."""


@dataclass(frozen=True, slots=True)
class SequentialDesign:
    """A planned group-sequential design: looks, boundaries and sample-size inflation."""

    alpha: float
    """Two-sided significance level."""
    power: float
    """Power at the planned effect."""
    information: tuple[float, ...]
    """Planned information fractions of the looks (the last is 1)."""
    boundaries: tuple[float, ...]
    """|z| critical values at the planned looks."""
    inflation: float
    """n max / fixed-design n for the same power."""
    expected_fraction_h1: float
    """Expected fraction of n max used when the planned effect is true."""
    expected_fraction_h0: float
    """Expected fraction of n max used when there is no difference."""


@dataclass(frozen=True, slots=True)
class SequentialDecision:
    """What to do after the latest look, with the boundary it was judged against."""

    action: str
    """`continue`, `reject` (the arms differ) or `accept` (max reached or futility)."""
    look: int
    """1-based index of the latest look."""
    z: float
    """The look's statistic (robust t or z) at the latest look."""
    boundary: float
    """Critical value of |statistic| at the latest look (on the t scale when df is given)."""
    boundaries: tuple[float, ...]
    """z-scale critical values at every look so far, for the actual information fractions."""
    reason: str
    """One line explaining the action."""


def obrien_fleming_spending(fraction: float, alpha: float) -> float:
    """Lan–DeMets O'Brien–Fleming-type two-sided alpha spent by information fraction t.

    Each side spends 2 - 2*Phi(z_{alpha/4} / sqrt(t)), as in gsDesign's sfLDOF and rpact's
    asOF, so five equal looks at alpha 0.05 give the textbook 4.877, 3.357, 2.680, 2.290, 2.031.
    """
    from scipy.stats import norm

    if fraction <= 0.0:
        return 0.0
    fraction = min(fraction, 1.0)
    return float(2.0 * (2.0 - 2.0 * norm.cdf(norm.isf(alpha / 4.0) / math.sqrt(fraction))))


def _check_fractions(information: Sequence[float]) -> None:
    values = list(information)
    if not values or any(not 0.0 < t <= 1.0 for t in values):
        raise UsageError("information fractions must lie in (0, 1]")
    if any(b <= a for a, b in itertools.pairwise(values)):
        raise UsageError("information fractions must increase from look to look")


def _trapezoid(grid: FloatArray) -> FloatArray:
    weights = np.full(len(grid), grid[1] - grid[0])
    weights[[0, -1]] /= 2.0
    return weights


def _advance(
    grid: FloatArray, mass: FloatArray, step: float, drift: float, new_grid: FloatArray
) -> FloatArray:
    """Density of the score on `new_grid` after an independent N(drift*step, step) increment."""
    scaled = (new_grid[:, None] - grid[None, :] - drift * step) / math.sqrt(step)
    kernel = np.exp(-0.5 * scaled * scaled) / math.sqrt(2.0 * math.pi * step)
    result: FloatArray = kernel @ mass
    return result


def _cross(grid: FloatArray, mass: FloatArray, step: float, drift: float, bound: float) -> float:
    """Probability of continuing so far and then landing beyond ±bound (score scale)."""
    from scipy.special import ndtr

    mean = grid + drift * step
    sd = math.sqrt(step)
    tails = ndtr((mean - bound) / sd) + ndtr((-bound - mean) / sd)
    return float((mass * tails).sum())


def _walk(
    information: Sequence[float], alpha: float, drift: float, bounds: Sequence[float] | None
) -> tuple[list[float], list[float]]:
    """Boundaries (solved when `bounds` is None) and crossing probability at each look."""
    from scipy.optimize import brentq

    solved: list[float] = []
    crossing: list[float] = []
    # Before the first look the score is a point mass at 0 (mass 1).
    grid, mass, previous = np.zeros(1), np.ones(1), 0.0
    for index, fraction in enumerate(information):
        step, scale = fraction - previous, math.sqrt(fraction)
        if bounds is None:
            target = obrien_fleming_spending(fraction, alpha) - sum(crossing)

            def excess(
                z: float,
                grid: FloatArray = grid,
                mass: FloatArray = mass,
                step: float = step,
                scale: float = scale,
                target: float = target,
            ) -> float:
                return _cross(grid, mass, step, drift, z * scale) - target

            z_bound = float(brentq(excess, 0.0, 40.0, xtol=1e-7)) if target > 1e-15 else 40.0
        else:
            z_bound = min(bounds[index], 40.0)
        crossing.append(_cross(grid, mass, step, drift, z_bound * scale))
        solved.append(z_bound)
        new_grid = np.linspace(-z_bound * scale, z_bound * scale, GRID_POINTS)
        mass = _advance(grid, mass, step, drift, new_grid) * _trapezoid(new_grid)
        grid, previous = new_grid, fraction
    return solved, crossing


def efficacy_boundaries(information: Sequence[float], alpha: float = 0.05) -> list[float]:
    """|z| critical values at the given information fractions (last one 1 = all alpha spent)."""
    _check_fractions(information)
    return list(_cached_boundaries(tuple(float(t) for t in information), alpha))


@functools.lru_cache(maxsize=256)  # pure and ~0.1 s; every look of every soak asks again
def _cached_boundaries(information: tuple[float, ...], alpha: float) -> tuple[float, ...]:
    bounds, _ = _walk(information, alpha, 0.0, None)
    return tuple(bounds)


def _power_at(information: Sequence[float], bounds: Sequence[float], drift: float) -> list[float]:
    return _walk(information, 1.0, drift, bounds)[1]


@functools.lru_cache(maxsize=32)  # pure and ~0.5 s; plans and CLI ask for the same designs
def design_sequential(looks: int = 5, alpha: float = 0.05, power: float = 0.8) -> SequentialDesign:
    """Equally spaced looks: boundaries, n-max inflation and expected sample fractions."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    if looks < 1 or looks > 20:
        raise UsageError(f"looks must be between 1 and 20, got {looks}")
    if not 0.0 < alpha < 1.0 or not 0.0 < power < 1.0:
        raise UsageError("alpha and power must be in (0, 1)")
    information = [(k + 1) / looks for k in range(looks)]
    bounds = efficacy_boundaries(information, alpha)
    drift = brentq(lambda d: sum(_power_at(information, bounds, d)) - power, 0.1, 20.0)
    fixed = norm.isf(alpha / 2.0) + norm.isf(1.0 - power)
    expected = []
    for effect in (drift, 0.0):
        stops = _power_at(information, bounds, effect)
        reach_end = 1.0 - sum(stops[:-1])
        expected.append(
            sum(t * p for t, p in zip(information[:-1], stops, strict=False)) + reach_end
        )
    return SequentialDesign(
        alpha, power, tuple(information), tuple(bounds), (drift / fixed) ** 2, *expected
    )


def t_boundary(z_boundary: float, df: float | None) -> float:
    """The |t| critical value with the same nominal two-sided tail as |z| >= z_boundary."""
    from scipy.stats import norm
    from scipy.stats import t as student_t

    if df is None or not math.isfinite(df):
        return z_boundary
    return float(student_t.isf(norm.sf(z_boundary), df))


def sequential_decision(
    information: Sequence[float],
    z_values: Sequence[float],
    alpha: float = 0.05,
    futility_z: float | None = None,
    df: float | None = None,
) -> SequentialDecision:
    """Judge the latest look; boundaries follow the actual fractions (capped at 1 = final).

    With `df`, the latest statistic is a t with those degrees of freedom and is judged against
    the t quantile of the look's nominal level, not against the z boundary."""
    if len(information) != len(z_values) or not z_values:
        raise UsageError("need one z value per look, and at least one look")
    capped = [min(t, 1.0) for t in information]
    _check_fractions(capped)
    bounds = efficacy_boundaries(capped, alpha)
    look, z = len(capped), float(z_values[-1])
    bound = t_boundary(bounds[-1], df)
    name = "|z|" if df is None else f"|t({df:.1f})|"
    if abs(z) >= bound:
        action, reason = "reject", f"{name}={abs(z):.3f} >= {bound:.3f} at look {look}: arms differ"
    elif capped[-1] >= 1.0:
        action = "accept"
        reason = f"n max reached, {name}={abs(z):.3f} < {bound:.3f}: no difference"
    elif futility_z is not None and abs(z) < futility_z:
        action = "accept"
        reason = f"futility: {name}={abs(z):.3f} < {futility_z:.3f} at look {look}"
    else:
        action, reason = "continue", f"{name}={abs(z):.3f} < {bound:.3f} at look {look}: continue"
    return SequentialDecision(action, look, z, bound, tuple(bounds), reason)


def sequential_look(
    rule: SequentialRule,
    alpha: float,
    result: TestResult,
    own: Verdict | bool,
    n_now: int,
    previous: Sequence[float],
) -> tuple[str, str]:
    """(verdict, reason) of one look of a sequential rule: `result` is the statistic judged
    against the boundary, `own` the verdict it came from (False when the plan names another
    test), so that a run that cannot resolve its dependence never stops for `differ` and ends
    `indeterminate` at n max. The soak's monitor and the plan's Monte Carlo both call this."""
    fractions = [*previous, min(n_now / rule.n_max_per_arm, 1.0)]
    z_values = [0.0] * (len(fractions) - 1) + [result.statistic]
    try:
        step = sequential_decision(fractions, z_values, alpha, rule.futility_z, result.df)
    except ValueError as exc:
        raise PlanError(f"looks cannot be judged: {exc}") from None
    verdict = {"reject": "differ", "accept": "no_difference"}.get(step.action, "continue")
    reason = step.reason
    unresolved = isinstance(own, Verdict) and own.verdict == INDETERMINATE
    if unresolved and (verdict != "continue" or fractions[-1] >= 1.0):
        assert isinstance(own, Verdict)
        verdict = "indeterminate" if fractions[-1] >= 1.0 else "continue"
        reason = f"{step.reason}; not a verdict: {own.reason}"
    return verdict, reason
