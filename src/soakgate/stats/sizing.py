"""Sample sizes from the delivered power: the smallest design whose simulated verdict reaches
the power asked (`stats.delivered`), never a z formula standing in for it.

A search over a length (requests per arm, per block, or n max) runs in two steps: a spread of
lengths around a first guess, each simulated a little, locates the power curve (a probit line
in log length, fitted by weighted least squares); then the length it points to is simulated in
full and, while the figure falls short, moved up and simulated again. The figure printed is
always that last full simulation, with its Monte Carlo error.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from soakgate.stats.delivered import (
    SEED,
    Blocks,
    Delivered,
    Design,
    OneRun,
    SequentialRun,
    SideBySide,
    delivered,
)
from soakgate.stats.models import FailureModel
from soakgate.stats.power import MIN_PLAN_BLOCKS, n_per_arm
from soakgate.stats.segments import SEGMENTS
from soakgate.stats.sequential import SequentialRule

GRID = 5  # lengths in the locating spread
GRID_REPS = 120  # simulated pairs at each of them
VERIFY_REPS = {OneRun: 800, SideBySide: 800, SequentialRun: 500, Blocks: 1200}
"""Pairs simulated for a printed figure: Monte Carlo SE about 1.4 / 1.4 / 1.8 / 1.2 points at
80%."""
LIMIT = 10**9  # no design of more requests than this per arm is searched


@dataclass(frozen=True, slots=True)
class Sized:
    """A design and the power it delivers, or the best the search found below the power."""

    design: Design
    """The design (the smallest found reaching the power, or the largest tried)."""
    delivered: Delivered
    """Its simulated power."""
    reached: bool
    """Whether `delivered.power` reached the power asked (within its Monte Carlo error)."""
    design_length: int = 0
    """The length searched over (requests per arm, per block, or n max)."""


def _probit_line(lengths: list[int], hits: list[int], reps: int) -> tuple[float, float] | None:
    """(intercept, slope) of probit(power) against log length; None when it does not rise."""
    from scipy.stats import norm

    x = np.log(np.asarray(lengths, dtype=np.float64))
    share = (np.asarray(hits, dtype=np.float64) + 0.5) / (reps + 1.0)
    y = norm.ppf(share)
    weight = reps * norm.pdf(y) ** 2 / (share * (1.0 - share))
    if np.ptp(x) == 0.0:
        return None
    slope, intercept = np.polyfit(x, y, 1, w=np.sqrt(weight))
    if not slope > 0.0:
        return None
    return float(intercept), float(slope)


def _round_up(value: float, quantum: int) -> int:
    return max(quantum, math.ceil(value / quantum) * quantum)


Maker = Callable[[int], tuple[FailureModel, Design] | None]
"""length -> (model, design) at that length, or None where the model cannot vouch for it."""


def _simulate(
    make: Maker, length: int, ratio: float, alpha: float, reps: int | None, seed: int
) -> Sized | None:
    """The design at `length` simulated `reps` times (None: as many as a printed figure gets),
    or None where the model vouches for no design there."""
    made = make(length)
    if made is None:
        return None
    model, design = made
    got = delivered(model, design, ratio, alpha, reps or VERIFY_REPS[type(design)], seed)
    return Sized(design, got, False, length)


def _locate(
    make: Maker, ratio: float, alpha: float, power: float, guess: int, quantum: int, top: int
) -> tuple[float, float, float] | None:
    """(length the spread points to, the probit line's slope, the power's probit); None when
    the model vouches for no length of the spread."""
    from scipy.stats import norm

    spread = np.linspace(-0.5, 0.7, GRID)
    tried = sorted({min(top, _round_up(guess * math.exp(s), quantum)) for s in spread})
    lengths, hits = [], []
    for index, point in enumerate(tried):
        got = _simulate(make, point, ratio, alpha, GRID_REPS, SEED + 1 + index)
        if got is not None:
            lengths.append(point)
            hits.append(round(got.delivered.power * GRID_REPS))
    if not lengths:
        return None
    line = _probit_line(lengths, hits, GRID_REPS)
    target = float(norm.ppf(power))
    slope = line[1] if line is not None else 1.0
    at = math.log(lengths[-1] * 4.0) if line is None else (target - line[0]) / slope
    return math.exp(min(max(at, 0.0), math.log(top))), slope, target


def solve_length(
    make: Maker,
    ratio: float,
    alpha: float,
    power: float,
    guess: int,
    quantum: int,
    ceiling: int = LIMIT,
) -> Sized | None:
    """The smallest length (a multiple of `quantum`, at most `ceiling`) whose design delivers
    `power`, the longest tried when none does, or None when the model vouches for none tried."""
    from scipy.stats import norm

    top = max(quantum, ceiling // quantum * quantum)
    located = _locate(make, ratio, alpha, power, guess, quantum, top)
    if located is None:
        return None
    length, slope, target = located
    verified: list[Sized] = []
    low, high = 0.0, math.inf  # longest short of the power, shortest reaching it
    for attempt in range(5):
        length = float(min(_round_up(length, quantum), top))
        got = _simulate(make, int(length), ratio, alpha, None, SEED)
        if got is None:
            break
        reached = got.delivered.power >= power - got.delivered.standard_error
        verified.append(Sized(got.design, got.delivered, reached, int(length)))
        over = got.delivered.power > power + 2.5 * got.delivered.standard_error and attempt < 3
        if (reached and not over) or (length >= top and not reached):
            break
        low, high = (low, min(high, length)) if reached else (max(low, length), high)
        step = target - float(norm.ppf(min(max(got.delivered.power, 0.01), 0.99)))
        length *= math.exp(min(max(step / slope, -3.0), 3.0))
        if not low < length < high:  # the probit step left the bracket: split it
            if math.isfinite(high) and low > 0.0:
                length = math.sqrt(low * high)
            else:
                length = high * 0.85 if math.isfinite(high) else low * 1.15
        if round(length / quantum) in {round(v.design_length / quantum) for v in verified}:
            break
    reached_ones = [v for v in verified if v.reached]
    chosen = (
        min(reached_ones, key=lambda v: v.design_length)
        if reached_ones
        else max(verified, key=lambda v: v.design_length, default=None)
    )
    return None if chosen is None else _afresh(make, chosen, ratio, alpha)


def _afresh(make: Maker, chosen: Sized, ratio: float, alpha: float) -> Sized:
    """The chosen design's power simulated again on draws of its own: the figure the search
    chose by is biased by the choice (the shortest length whose draws reached the power)."""
    again = _simulate(make, chosen.design_length, ratio, alpha, None, SEED + 97)
    assert again is not None
    return Sized(chosen.design, again.delivered, chosen.reached, chosen.design_length)


def size_one_run(
    model: FailureModel, rate: float, ratio: float, alpha: float, power: float, warmup: int = 0,
    side_by_side: bool = False,
) -> Sized:  # fmt: skip
    """Fewest requests per arm for one run per arm (or both arms side by side in one run)
    judged as `compare` judges it."""
    guess = int(n_per_arm(rate, ratio, alpha, power) * _spread(model) * 1.25)
    shape = SideBySide if side_by_side else OneRun
    sized = solve_length(
        lambda n: (model, shape(n, warmup)), ratio, alpha, power, guess, SEGMENTS
    )  # fmt: skip
    assert sized is not None
    return sized


def size_sequential(
    model: FailureModel,
    rate: float,
    ratio: float,
    alpha: float,
    power: float,
    looks: int,
    warmup: int = 0,
) -> Sized:
    """Smallest n max per arm for which the looks (judged as the monitor judges them) reach
    `power`."""
    guess = int(n_per_arm(rate, ratio, alpha, power) * _spread(model) * 1.2)

    def make(n_max: int) -> tuple[FailureModel, Design]:
        return model, SequentialRun(SequentialRule(looks, n_max), warmup)

    sized = solve_length(make, ratio, alpha, power, guess, SEGMENTS * looks)
    assert sized is not None
    return sized


def size_blocks(
    model: FailureModel,
    rate: float,
    ratio: float,
    alpha: float,
    power: float,
    blocks: int | None,
    length: int | None,
    warmup: int = 0,
) -> Sized:
    """Blocks per arm for a given block length, or the block length for a given number of
    blocks (default 8), whose test over blocks reaches `power`."""
    if length is not None and blocks is None:
        return _fewest_blocks(model, ratio, alpha, power, length, warmup)
    count = blocks or 8
    guess = max(1, int(n_per_arm(rate, ratio, alpha, power) * _spread(model) * 1.15 / count))
    if length is not None:
        got = delivered(model, Blocks(count, length, warmup), ratio, alpha, VERIFY_REPS[Blocks])
        return Sized(Blocks(count, length, warmup), got, got.power >= power - got.standard_error)
    sized = solve_length(
        lambda m: (model, Blocks(count, m, warmup)), ratio, alpha, power, guess, 1
    )  # fmt: skip
    assert sized is not None
    return sized


def _fewest_blocks(
    model: FailureModel, ratio: float, alpha: float, power: float, length: int, warmup: int
) -> Sized:
    reps = VERIFY_REPS[Blocks]
    low, high = MIN_PLAN_BLOCKS, MIN_PLAN_BLOCKS
    while True:
        got = delivered(model, Blocks(high, length, warmup), ratio, alpha, reps)
        if got.power >= power or high >= 4096:
            break
        low, high = high + 1, high * 2
    while low < high:
        middle = (low + high) // 2
        if delivered(model, Blocks(middle, length, warmup), ratio, alpha, reps).power >= power:
            high = middle
        else:
            low = middle + 1
    reached = delivered(model, Blocks(high, length, warmup), ratio, alpha, reps).power >= power
    again = delivered(model, Blocks(high, length, warmup), ratio, alpha, reps, SEED + 97)
    return Sized(Blocks(high, length, warmup), again, reached)  # printed: draws of its own


def _spread(model: FailureModel) -> float:
    """The model's design effect where it states one (a first guess only)."""
    return float(getattr(model, "design_effect", 1.0))
