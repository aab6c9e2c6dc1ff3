"""Failure processes for calibrating soakgate's verdicts: time-ordered 0/1 collapse sequences.

Each generator returns `reps` sequences of length `n` (a boolean array, one row per run) whose
long-run failure rate is `rate` (the processes are stationary unless `fresh=True`: then every
row starts as a freshly restarted server would, which is what a campaign block is). A rate
ratio of 1.5 is made by scaling every hazard of the process by 1.5, so "the same failure
mechanism, 1.5 times as often". Shared by `bench_calibration.py` and the statistics tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from soakgate.stats.plan import Plan

Bools = npt.NDArray[np.bool_]
Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.intp]
Generator = Callable[[np.random.Generator, int, int, float, bool], Bools]
PairGenerator = Callable[[np.random.Generator, int, int, float, float, bool], tuple[Bools, Bools]]
CHUNK_CELLS = 4_000_000  # rows x requests simulated at once (bounds memory at ~32 MB of floats)


def _bernoulli(rng: np.random.Generator, hazard: Floats) -> Bools:
    result: Bools = rng.random(hazard.shape) < np.clip(hazard, 0.0, 1.0)
    return result


def independent(rng: np.random.Generator, reps: int, n: int, rate: float, fresh: bool) -> Bools:
    """Every request fails independently with probability `rate`."""
    return rng.random((reps, n)) < rate


def reset_hazard(scale: int) -> Generator:
    """Hazard growing linearly with the requests since the last reset; resets arrive at random
    (geometric intervals, mean `scale` requests): state that accumulates and is cleared."""

    def generate(rng: np.random.Generator, reps: int, n: int, rate: float, fresh: bool) -> Bools:
        positions = np.arange(n)
        resets = rng.random((reps, n)) < 1.0 / scale
        last = np.maximum.accumulate(np.where(resets, positions, -1), axis=1)
        # A stationary start has been up a while: its age at the first request is geometric.
        start_age = np.zeros(reps) if fresh else rng.geometric(1.0 / scale, reps) - 1.0
        age = np.where(last >= 0, positions - last, positions + start_age[:, None])
        # The stationary age is geometric with mean ~`scale`, so this slope gives rate `rate`.
        return _bernoulli(rng, age * (rate / (scale - 1.0)))

    generate.__name__ = f"reset_{scale}"
    return generate


def offspring(
    rng: np.random.Generator, rows: Ints, cols: Ints, mean: float, reach: int, length: int
) -> tuple[Ints, Ints]:
    """The children of the failures at (rows, cols): Poisson(`mean`) each, each uniformly within
    the next `reach` requests, those falling past `length` dropped."""
    kids = rng.poisson(mean, rows.size)
    rows = np.repeat(rows, kids)
    cols = np.repeat(cols, kids) + rng.integers(1, reach + 1, rows.size)
    keep = cols < length
    return rows[keep], cols[keep]


def self_exciting(branching: float = 0.5, reach: int = 200) -> Generator:
    """Discrete Hawkes process: background failures at rate (1 - branching) * rate; each failure
    triggers Poisson(branching) more, each uniformly within the next `reach` requests."""

    def generate(rng: np.random.Generator, reps: int, n: int, rate: float, fresh: bool) -> Bools:
        burn = 0 if fresh else 20 * reach  # clusters that began before the run spill into it
        length = n + burn
        background = rng.random((reps, length)) < rate * (1.0 - branching)
        rows, cols = np.nonzero(background)
        out = background
        while rows.size:
            rows, cols = offspring(rng, rows, cols, branching, reach, length)
            out[rows, cols] = True
        result: Bools = out[:, burn:]
        return np.ascontiguousarray(result)

    generate.__name__ = "self_exciting"
    return generate


def regimes(clean_mean: int = 5_000, bursty_mean: int = 1_000, factor: float = 19.0) -> Generator:
    """Long regimes: clean stretches (mean `clean_mean` requests) and bursty ones (mean
    `bursty_mean`) at `factor` times the clean rate; sojourns are geometric."""
    share = bursty_mean / (clean_mean + bursty_mean)

    def generate(rng: np.random.Generator, reps: int, n: int, rate: float, fresh: bool) -> Bools:
        clean_rate = rate / (1.0 - share + share * factor)
        hazard = np.empty((reps, n))
        for row in range(reps):
            bursty = (not fresh) and rng.random() < share
            at = 0
            while at < n:
                mean = bursty_mean if bursty else clean_mean
                stay = int(rng.geometric(1.0 / mean))
                hazard[row, at : at + stay] = clean_rate * (factor if bursty else 1.0)
                at += stay
                bursty = not bursty
        return _bernoulli(rng, hazard)

    generate.__name__ = "regimes"
    return generate


def batch_coincident(width: int = 5) -> Generator:
    """A corrupted batch step: `width` adjacent rows collapse together."""

    def generate(rng: np.random.Generator, reps: int, n: int, rate: float, fresh: bool) -> Bools:
        starts = rng.random((reps, n + width - 1)) < rate / width
        counts = np.cumsum(starts, axis=1)
        window = counts[:, width - 1 :] - np.pad(counts, ((0, 0), (1, 0)))[:, :n]
        result: Bools = window > 0
        return result

    generate.__name__ = "batch_coincident"
    return generate


def prompt_heterogeneity(prompts: int = 300, shape: float = 0.3) -> Generator:
    """Each prompt of a fixed set has its own failure rate (gamma, coefficient of variation
    1/sqrt(shape)), the same in every run as the same prompts are; sent round-robin from a
    random first prompt."""
    weights = np.random.default_rng(300).gamma(shape, 1.0 / shape, prompts)
    weights /= weights.mean()

    def generate(rng: np.random.Generator, reps: int, n: int, rate: float, fresh: bool) -> Bools:
        offset = rng.integers(0, prompts, reps)
        index = (np.arange(n)[None, :] + offset[:, None]) % prompts
        return _bernoulli(rng, rate * weights[index])

    generate.__name__ = "prompt_heterogeneity"
    return generate


def renewal_hazard(scale: int, shape: float | None) -> Generator:
    """Hazard growing linearly with the requests since the last reset, as `reset_hazard`, but
    the resets come after gamma intervals (mean `scale`, shape `shape`: more regular than
    geometric) or exactly every `scale` requests (shape None). A fresh server starts at age 0."""
    mean_age = scale * (1.0 + 1.0 / shape) / 2.0 if shape else scale / 2.0

    def generate(rng: np.random.Generator, reps: int, n: int, rate: float, fresh: bool) -> Bools:
        count = int(n / scale * 1.5) + 12
        if shape:
            gaps = np.maximum(1, np.round(rng.gamma(shape, scale / shape, (reps, count))))
        else:
            gaps = np.full((reps, count), float(scale))
        if not fresh:  # a server up a while: the first gap is a residual one
            gaps[:, 0] = np.maximum(1, np.round(gaps[:, 0] * rng.random(reps)))
        resets = np.cumsum(gaps.astype(np.int64), axis=1)
        marks = np.zeros((reps, n), dtype=bool)
        rows, cols = np.nonzero(resets < n)
        marks[rows, resets[rows, cols]] = True
        positions = np.arange(n)
        last = np.maximum.accumulate(np.where(marks, positions, 0), axis=1)
        start_age = np.zeros(reps) if fresh else rng.random(reps) * 2.0 * mean_age
        age = np.where(last > 0, positions - last, positions + start_age[:, None])
        return _bernoulli(rng, age * (rate / mean_age))

    generate.__name__ = f"renewal_{scale}"
    return generate


def saturating_uptime(scale: int = 4_000) -> Generator:
    """State that builds up from the server's start and is never cleared: the hazard rises as
    rate * (1 - exp(-uptime / scale)) (90% of the steady rate after 2.3 x scale requests). A
    stationary run is one of a server up for long."""

    def generate(rng: np.random.Generator, reps: int, n: int, rate: float, fresh: bool) -> Bools:
        uptime = np.arange(n, dtype=np.float64) + (0.0 if fresh else 50.0 * scale)
        hazard = rate * -np.expm1(-uptime / scale)
        return _bernoulli(rng, np.broadcast_to(hazard, (reps, n)))

    generate.__name__ = "saturating_uptime"
    return generate


def heavy_bursts(tail: float = 2.5, cap: int = 500) -> Generator:
    """Bursts of adjacent collapses whose sizes are heavy-tailed: P(size = k) ~ k^-tail (Zipf,
    infinite variance at tail 2.5 but for the cap)."""
    sizes = np.arange(1, cap + 1, dtype=np.float64)
    weights = sizes**-tail / (sizes**-tail).sum()
    mean_size = float((sizes * weights).sum())

    def generate(rng: np.random.Generator, reps: int, n: int, rate: float, fresh: bool) -> Bools:
        burn = 0 if fresh else cap
        starts = rng.random((reps, n + burn)) < rate / mean_size
        rows, cols = np.nonzero(starts)
        lengths = rng.choice(cap, size=len(rows), p=weights) + 1
        edges = np.zeros((reps, n + burn + cap + 1), dtype=np.int64)
        np.add.at(edges, (rows, cols), 1)
        np.add.at(edges, (rows, cols + lengths), -1)
        result: Bools = np.cumsum(edges, axis=1)[:, burn : burn + n] > 0
        return result

    generate.__name__ = "heavy_bursts"
    return generate


def hot_prompts(prompts: int = 300, shape: float = 0.1) -> Generator:
    """A few prompts carry most failures (per-prompt rates gamma with CV 3.2, the same prompts
    in every run), sent in a fresh random order every pass over the set."""
    weights = np.random.default_rng(301).gamma(shape, 1.0 / shape, prompts)
    weights /= weights.mean()

    def generate(rng: np.random.Generator, reps: int, n: int, rate: float, fresh: bool) -> Bools:
        passes = -(-n // prompts)
        order = np.argsort(rng.random((reps, passes, prompts)), axis=2).reshape(reps, -1)[:, :n]
        return _bernoulli(rng, rate * weights[order])

    generate.__name__ = "hot_prompts"
    return generate


def drift_log_rate(
    rng: np.random.Generator, reps: int, n: int, correlation: int, spread: float
) -> npt.NDArray[np.float64]:
    """reps x n log multipliers of the rate: an Ornstein-Uhlenbeck process from 0 at the run's
    start (correlation time `correlation` requests, stationary sd `spread`), evaluated every
    100 requests, each centred so the multiplier's mean is 1 at every request."""
    step = 100  # the drift is smooth: evaluate it every 100 requests
    points = -(-n // step)
    keep = np.exp(-step / correlation)
    noise = rng.standard_normal((reps, points)) * spread * np.sqrt(1.0 - keep * keep)
    level = np.empty((reps, points))
    level[:, 0] = noise[:, 0]
    for i in range(1, points):
        level[:, i] = keep * level[:, i - 1] + noise[:, i]
    variance = spread * spread * (1.0 - keep ** (2.0 * np.arange(1, points + 1)))
    log_rate: npt.NDArray[np.float64] = np.repeat(level - variance / 2.0, step, axis=1)[:, :n]
    return log_rate


def slow_drift(correlation: int = 20_000, spread: float = 0.4) -> Generator:
    """The log rate wanders from the run's start as an Ornstein-Uhlenbeck process (correlation
    time `correlation` requests, stationary standard deviation `spread`), independently in each
    run: both arms start at the same rate and drift apart, as servers do over hours."""

    def generate(rng: np.random.Generator, reps: int, n: int, rate: float, fresh: bool) -> Bools:
        return _bernoulli(rng, rate * np.exp(drift_log_rate(rng, reps, n, correlation, spread)))

    generate.__name__ = "slow_drift"
    return generate


def shared_drift(correlation: int = 20_000, spread: float = 0.4) -> PairGenerator:
    """One Ornstein-Uhlenbeck path of the log rate (as `slow_drift`) drives both arms: what
    changes with the hour (the traffic mix, a shared host) changes both servers' rates alike, so
    at every request the arms' rates are equal (or in the given ratio) while the rate wanders."""

    def generate(rng: np.random.Generator, reps: int, n: int, rate_a: float, rate_b: float,
                 fresh: bool) -> tuple[Bools, Bools]:  # fmt: skip
        path = np.exp(drift_log_rate(rng, reps, n, correlation, spread))
        return _bernoulli(rng, rate_a * path), _bernoulli(rng, rate_b * path)

    generate.__name__ = "shared_drift"
    return generate


@dataclass(frozen=True, slots=True)
class Process:
    """A named failure process of the battery."""

    name: str
    """Short name printed in the tables."""
    description: str
    """One line for the bench output."""
    generate: Generator
    """(rng, reps, n, rate, fresh) -> reps x n boolean sequences."""
    pair: PairGenerator | None = None
    """(rng, reps, n, rate_a, rate_b, fresh) -> both arms at once, for a process whose arms share
    a path (None: the arms are independent draws of `generate`, which is then one arm's law)."""


DRIFTS = {"drift": (20_000, 0.2), "drift-strong": (20_000, 0.4)}
"""(correlation in requests, sd of the log rate) of the battery's drifts apart (bench_drift_window
re-simulates their paths)."""

BATTERY = (
    Process("independent", "independent requests", independent),
    Process("reset-250", "hazard grows since a reset, resets every ~250", reset_hazard(250)),
    Process("reset-1000", "hazard grows since a reset, resets every ~1,000", reset_hazard(1_000)),
    Process("reset-2000", "hazard grows since a reset, resets every ~2,000", reset_hazard(2_000)),
    Process("reset-5000", "hazard grows since a reset, resets every ~5,000", reset_hazard(5_000)),
    Process("self-exciting", "each collapse raises the next ~200's hazard, branching 0.5",
            self_exciting()),
    Process("regimes", "clean ~5,000 / bursty ~1,000 at 19x the rate", regimes()),
    Process("batch-5", "5 adjacent rows collapse together", batch_coincident()),
    Process("prompts", "per-prompt rates (gamma, CV 1.8), 300 prompts round-robin",
            prompt_heterogeneity()),
    Process("gamma-resets", "hazard grows since a reset, resets after gamma(4) ~3,000",
            renewal_hazard(3_000, 4.0)),
    Process("fixed-resets", "hazard grows since a reset, resets exactly every 4,000",
            renewal_hazard(4_000, None)),
    Process("uptime", "hazard rises with uptime, 90% of steady after ~9,200 (never reset)",
            saturating_uptime(4_000)),
    Process("long-regimes", "clean ~20,000 / bursty ~4,000 at 10x the rate",
            regimes(20_000, 4_000, 10.0)),
    Process("heavy-bursts", "bursts of adjacent collapses, Zipf(2.5) sizes up to 500",
            heavy_bursts()),
    Process("hot-prompts", "per-prompt rates (gamma, CV 3.2), shuffled every pass",
            hot_prompts()),
    Process("drift-shared", "one drifting log rate for both arms (OU, 20,000, sd 0.4)",
            slow_drift(*DRIFTS["drift-strong"]), shared_drift(*DRIFTS["drift-strong"])),
    Process("drift", "each arm's log rate drifts apart from the start (OU, 20,000, sd 0.2)",
            slow_drift(*DRIFTS["drift"])),
    Process("drift-strong", "each arm's log rate drifts apart (OU, 20,000, sd 0.4)",
            slow_drift(*DRIFTS["drift-strong"])),
)  # fmt: skip
APART = ("drift", "drift-strong")
"""Processes whose arms' rates differ during the run (equal only on average over runs): a
DIFFER there is right about the run, and only replicates across restarts can say otherwise."""


def by_name(name: str, pool: Sequence[Process] = ()) -> Process:
    """The process called `name` in `pool` (the battery when none is given)."""
    for process in pool or BATTERY:
        if process.name == name:
            return process
    raise KeyError(name)


def selected(subset: str | None, pool: Sequence[Process] = ()) -> list[str]:
    """The names of `pool` (the battery when none is given), or the comma-separated subset given
    (KeyError for one not in the pool)."""
    if not subset:
        return [p.name for p in pool or BATTERY]
    names = [name.strip() for name in subset.split(",")]
    for name in names:
        by_name(name, pool)
    return names


def simulate(
    process: Process,
    rng: np.random.Generator,
    reps: int,
    n: int,
    rate: float,
    fresh: bool = False,
) -> list[Bools]:
    """`reps` sequences of the process, generated in memory-bounded chunks."""
    out: list[Bools] = []
    for size in _chunks(reps, n):
        out.extend(process.generate(rng, size, n, rate, fresh))
    return out


def _chunks(reps: int, n: int) -> Iterator[int]:
    """Rows per chunk, so that a chunk holds at most CHUNK_CELLS requests."""
    chunk = max(1, CHUNK_CELLS // max(n, 1))
    for start in range(0, reps, chunk):
        yield min(chunk, reps - start)


def simulate_pair(
    process: Process, rng: np.random.Generator, reps: int, n: int, rate_a: float, rate_b: float,
    fresh: bool = False,
) -> tuple[list[Bools], list[Bools]]:  # fmt: skip
    """`reps` sequences of each arm: independent draws (arm a's, then arm b's), or, for a
    process with a shared path, both arms from the same path row by row."""
    if process.pair is None:
        return simulate(process, rng, reps, n, rate_a, fresh), simulate(
            process, rng, reps, n, rate_b, fresh
        )
    a: list[Bools] = []
    b: list[Bools] = []
    for size in _chunks(reps, n):
        first, second = process.pair(rng, size, n, rate_a, rate_b, fresh)
        a.extend(first)
        b.extend(second)
    return a, b


def sequential_verdict(plan: Plan, a: Bools, b: Bools) -> tuple[str, int]:
    """Walk the plan's looks over two arms' sequences (each at least the plan's maximum per arm)
    as the soak's monitor does (its own `judge_look`): the verdict and the generations per arm
    it was reached at."""
    from soakgate.stats.decision import judge_look, look_due

    rule = plan.sequential
    assert rule is not None, "the plan is not sequential"
    fractions: list[float] = []
    for look in range(1, rule.looks + 1):
        n = look_due(rule, look)
        decision, _ = judge_look(plan, a[:n], b[:n], fractions)
        fractions.append(min(n / rule.n_max_per_arm, 1.0))
        if decision.verdict != "continue":
            break
    return decision.verdict, n
