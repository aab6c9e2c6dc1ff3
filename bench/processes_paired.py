"""Held-out failure processes for the paired verdict of side-by-side arms (issue 26, item 4).

The paired verdict (`stats/paired.py`) was chosen and tuned on `bench/processes.py`'s battery,
whose only process with a shared component is one Ornstein-Uhlenbeck drift of the log rate
(`drift-shared`). These processes were written after that tuning, committed before any verdict
was run on them, and are not to be tuned on: they are the out-of-sample check. Each draws both
arms of a pair at once, with something the arms share (a spike, a prompt, a lagged drift, a
cross-excitation, a period) and, in two of them, something each arm has of its own (resets,
heavy-tailed episodes). Equal rates are exact in expectation over the run for every process (the
null the false-alarm cells need); B "at `ratio` times" scales every hazard of B's own.

Side-by-side arms do not end their requests in lockstep: `jittered_clock` gives each arm its own
completion times (gamma service times, each arm's throughput wandering on its own), both arms
soaked over the same span, as a `soakgate run` with two targets does.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from bench.processes import (
    Bools,
    Generator,
    PairGenerator,
    Process,
    _bernoulli,
    drift_log_rate,
    offspring,
)

Floats = npt.NDArray[np.float64]


def _two_state(
    rng: np.random.Generator, reps: int, n: int, quiet: int, loud: int, factor: float
) -> Floats:
    """reps x n multipliers of a rate, mean 1: quiet sojourns (geometric, mean `quiet`) at a base
    level and loud ones (mean `loud`) at `factor` times it, from a stationary start."""
    share = loud / (quiet + loud)
    base = 1.0 / (1.0 - share + share * factor)
    out = np.empty((reps, n))
    for row in range(reps):
        is_loud = rng.random() < share
        at = 0
        while at < n:
            stay = int(rng.geometric(1.0 / (loud if is_loud else quiet)))
            out[row, at : at + stay] = base * (factor if is_loud else 1.0)
            at += stay
            is_loud = not is_loud
    return out


def shared_spikes(quiet: int = 8_000, loud: int = 300, factor: float = 15.0) -> PairGenerator:
    """A shared upstream hiccups: short episodes (mean `loud` requests, every ~`quiet`) in which
    both arms fail `factor` times as often."""

    def generate(rng: np.random.Generator, reps: int, n: int, rate_a: float, rate_b: float,
                 fresh: bool) -> tuple[Bools, Bools]:  # fmt: skip
        path = _two_state(rng, reps, n, quiet, loud, factor)
        return _bernoulli(rng, rate_a * path), _bernoulli(rng, rate_b * path)

    return generate


def shared_prompts(prompts: int = 500, shape: float = 0.15) -> PairGenerator:
    """Both arms are sent the same prompt at the same time (one shuffled order per pass, the
    same for both), and a few prompts carry most failures (gamma rates, CV 2.6)."""
    weights = np.random.default_rng(2626).gamma(shape, 1.0 / shape, prompts)
    weights /= weights.mean()

    def generate(rng: np.random.Generator, reps: int, n: int, rate_a: float, rate_b: float,
                 fresh: bool) -> tuple[Bools, Bools]:  # fmt: skip
        passes = -(-n // prompts)
        order = np.argsort(rng.random((reps, passes, prompts)), axis=2).reshape(reps, -1)[:, :n]
        hazard = weights[order]
        return _bernoulli(rng, rate_a * hazard), _bernoulli(rng, rate_b * hazard)

    return generate


def lagged_drift(correlation: int = 10_000, spread: float = 0.5, lag: int = 1_500) -> PairGenerator:
    """One drift of the log rate (Ornstein-Uhlenbeck) reaches B `lag` requests after A (a
    rolling change of the traffic mix); B's path is A's shifted circularly, so over the run both
    arms see the same rates, in a different order."""

    def generate(rng: np.random.Generator, reps: int, n: int, rate_a: float, rate_b: float,
                 fresh: bool) -> tuple[Bools, Bools]:  # fmt: skip
        path = np.exp(drift_log_rate(rng, reps, n, correlation, spread))
        return _bernoulli(rng, rate_a * path), _bernoulli(rng, rate_b * np.roll(path, lag, 1))

    return generate


def _reset_ages(rng: np.random.Generator, reps: int, n: int, scale: int) -> Floats:
    """Requests since each arm's own last reset (geometric resets, mean `scale`), stationary."""
    positions = np.arange(n)
    resets = rng.random((reps, n)) < 1.0 / scale
    last = np.maximum.accumulate(np.where(resets, positions, -1), axis=1)
    start = rng.geometric(1.0 / scale, reps) - 1.0
    ages: Floats = np.where(last >= 0, positions - last, positions + start[:, None])
    return ages


def drift_and_own_resets(
    correlation: int = 5_000, spread: float = 0.6, scale: int = 3_000
) -> PairGenerator:
    """A drift both arms share (Ornstein-Uhlenbeck log rate) times each arm's own state that
    builds up and resets (hazard growing since its own last reset, resets every ~`scale`)."""

    def generate(rng: np.random.Generator, reps: int, n: int, rate_a: float, rate_b: float,
                 fresh: bool) -> tuple[Bools, Bools]:  # fmt: skip
        path = np.exp(drift_log_rate(rng, reps, n, correlation, spread))
        slope = 1.0 / (scale - 1.0)
        arms = []
        for rate in (rate_a, rate_b):
            arms.append(_bernoulli(rng, rate * path * _reset_ages(rng, reps, n, scale) * slope))
        return arms[0], arms[1]

    return generate


def cross_exciting(branching: float = 0.5, reach: int = 300) -> PairGenerator:
    """A collapse in either arm raises both arms' hazard (a shared upstream that, once
    disturbed, disturbs everything it serves): each collapse has Poisson(branching / 2) children
    in A and Poisson(branching / 2 x ratio) in B, each within the next `reach` requests.
    Background rates (1 - branching) x each arm's rate: at equal rates both arms fail at the
    rate given, and B fails exactly `ratio` times as often as A whatever the ratio."""

    def generate(rng: np.random.Generator, reps: int, n: int, rate_a: float, rate_b: float,
                 fresh: bool) -> tuple[Bools, Bools]:  # fmt: skip
        ratio = rate_b / rate_a
        burn = 20 * reach
        length = n + burn
        arms = [rng.random((reps, length)) < r * (1.0 - branching) for r in (rate_a, rate_b)]
        rows_a, cols_a = np.nonzero(arms[0])
        rows_b, cols_b = np.nonzero(arms[1])
        rows, cols = np.concatenate([rows_a, rows_b]), np.concatenate([cols_a, cols_b])
        while rows.size:
            born = []
            for arm, mean in ((arms[0], branching / 2.0), (arms[1], branching / 2.0 * ratio)):
                r, c = offspring(rng, rows, cols, mean, reach, length)
                arm[r, c] = True
                born.append((r, c))
            rows = np.concatenate([born[0][0], born[1][0]])
            cols = np.concatenate([born[0][1], born[1][1]])
        first: Bools = np.ascontiguousarray(arms[0][:, burn:])
        second: Bools = np.ascontiguousarray(arms[1][:, burn:])
        return first, second

    return generate


def _episodes(rng: np.random.Generator, reps: int, n: int, every: int, tail: float,
              shortest: int, cap: int, factor: float) -> Floats:  # fmt: skip
    """reps x n multipliers (mean 1) of one arm's own episodes: they start every ~`every`
    requests, last a Pareto(`tail`) number of requests from `shortest` up to `cap`, and raise
    the rate `factor` times while they last."""
    burn = cap
    starts = rng.random((reps, n + burn)) < 1.0 / every
    rows, cols = np.nonzero(starts)
    lengths = np.minimum(cap, np.floor(shortest * (1.0 - rng.random(rows.size)) ** (-1.0 / tail)))
    edges = np.zeros((reps, n + burn + cap + 1), dtype=np.int64)
    np.add.at(edges, (rows, cols), 1)
    np.add.at(edges, (rows, cols + lengths.astype(np.int64)), -1)
    inside = np.cumsum(edges, axis=1)[:, burn : burn + n] > 0
    # the share of requests inside an episode, from the law (stationary, overlaps merged): a
    # request is outside when no start j requests before it lasted longer than j
    longer = np.minimum(1.0, (shortest / np.arange(1.0, cap + 1.0)) ** tail)  # P(length > j)
    busy = 1.0 - float(np.prod(1.0 - longer / every))
    level = 1.0 / (1.0 - busy + busy * factor)
    multiplier: Floats = np.where(inside, level * factor, level)
    return multiplier


def own_episodes_shared_drift(
    every: int = 6_000, tail: float = 1.5, factor: float = 20.0, correlation: int = 10_000,
    spread: float = 0.3,
) -> PairGenerator:  # fmt: skip
    """Each arm has its own bad episodes (Pareto(1.5) lengths from 50 up to 5,000 requests at 20x
    the rate, one every ~6,000), and both share a drift (Ornstein-Uhlenbeck log rate)."""

    def generate(rng: np.random.Generator, reps: int, n: int, rate_a: float, rate_b: float,
                 fresh: bool) -> tuple[Bools, Bools]:  # fmt: skip
        path = np.exp(drift_log_rate(rng, reps, n, correlation, spread))
        arms = []
        for rate in (rate_a, rate_b):
            own = _episodes(rng, reps, n, every, tail, 50, 5_000, factor)
            arms.append(_bernoulli(rng, rate * path * own))
        return arms[0], arms[1]

    return generate


def shared_period(period: int = 6_000, amplitude: float = 0.7) -> PairGenerator:
    """A daily-like cycle both arms share: the log rate is a sine of the given period and
    amplitude (random phase per pair), centred so its mean multiplier is 1."""

    def generate(rng: np.random.Generator, reps: int, n: int, rate_a: float, rate_b: float,
                 fresh: bool) -> tuple[Bools, Bools]:  # fmt: skip
        phase = rng.random((reps, 1)) * 2.0 * np.pi
        wave = np.exp(amplitude * np.sin(2.0 * np.pi * np.arange(n)[None, :] / period + phase))
        path = wave / np.i0(amplitude)  # E[exp(a sin U)] = I0(a)
        return _bernoulli(rng, rate_a * path), _bernoulli(rng, rate_b * path)

    return generate


def jittered_clock(rng: np.random.Generator, n: int) -> Floats:
    """One arm's completion times over [0, n]: gamma service times (shape 4) whose speed wanders
    by a factor up to ~1.5 over the run (its own OU path), rescaled to end at n."""
    speed = np.exp(drift_log_rate(rng, 1, n, max(1, n // 5), 0.2)[0])
    steps = rng.gamma(4.0, 0.25, n) / speed
    times: Floats = np.cumsum(steps)
    scaled: Floats = times * (n / float(times[-1]))
    return scaled


def _one_arm_law(pair: PairGenerator) -> Generator:
    """A Process needs one arm's law; these are only ever drawn as pairs."""

    def generate(rng: np.random.Generator, reps: int, n: int, rate: float, fresh: bool) -> Bools:
        return pair(rng, reps, n, rate, rate, fresh)[0]

    return generate


def _process(name: str, description: str, pair: PairGenerator) -> Process:
    return Process(name, description, _one_arm_law(pair), pair)


HELD_OUT = (
    _process("shared-spikes", "both arms x15 in shared episodes of ~300 every ~8,000",
             shared_spikes()),
    _process("shared-prompts", "the same prompt to both arms at once, gamma rates CV 2.6",
             shared_prompts()),
    _process("lagged-drift", "one OU drift (10,000, sd 0.5) reaching B 1,500 requests later",
             lagged_drift()),
    _process("drift+resets", "shared OU drift (5,000, sd 0.6) x each arm's own resets ~3,000",
             drift_and_own_resets()),
    _process("cross-exciting", "a collapse in either arm begets collapses in both (0.5, 300)",
             cross_exciting()),
    _process("episodes+drift", "own Pareto(1.5) episodes at 20x x a shared drift (sd 0.3)",
             own_episodes_shared_drift()),
    _process("shared-period", "a shared cycle of the log rate, period 6,000, amplitude 0.7",
             shared_period()),
)  # fmt: skip
"""The held-out processes, every one drawn as a pair."""
