"""Bench (issue 25): how often does the release gate fail two identical configurations, and how
often does it fail a broken one?

Simulates pairs of arms and judges them with the gate `soakgate compare --fail-on-differ` applies
(`soakgate.report.gate.judge`, its defaults: alpha 0.05, Holm across outcomes). Every replicate
gives each arm, over `n` requests:

- server errors: independent sprinkles (0.1%) plus crash-like episodes (a Poisson number of runs
  of consecutive failed requests, mean length 6);
- collapses from a failure process of `bench/processes.py` at 0.5% (independent, self-exciting,
  long regimes);
- greedy comparisons with a reference on 1 request in 10: divergence in 5% of them, late (a
  uniform position from 64 to 159, as batching noise gives), and the reference's own repeats from
  the same law;
- crashes: none (healthy servers), or a Poisson count with a shared mean of 0.5 per arm, to show
  what the "crashed where the baseline never did" rule costs when crashes are ordinary.

Under the null both arms draw from the same law, independently; the gate's false alarms are the
share of pairs it fails (Monte Carlo SE beside each). Under the alternative (the issue's
KV-cache bug, scaled: 7 crashes per 250 requests each losing ~8 requests, 84% of greedy answers
diverging at token 0, collapses 3x) the share it fails is its power.

Run: `nice -n 10 python bench/bench_gate.py [--reps 1000] [--jobs N]`; `--quick` is smoke size.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.processes import by_name, simulate_pair

COLLAPSE_RATE, ERROR_RATE, EPISODES_PER_1000 = 0.005, 0.001, 0.5
COMPARED_EVERY, DIVERGE, LENGTH = 10, 0.05, 160
SIZES = (500, 5_000)
PROCESSES = ("independent", "self-exciting", "regimes")
CHUNK = 50


@dataclass(frozen=True, slots=True)
class Work:
    """One chunk of replicates of one cell."""

    process: str
    n: int
    crashes: str  # "none", "shared" or "broken" (the alternative)
    reps: int
    seed: int


def _errors(rng: np.random.Generator, n: int, episodes_per_1000: float) -> np.ndarray:
    errors = rng.random(n) < ERROR_RATE
    for _ in range(rng.poisson(episodes_per_1000 * n / 1000)):
        start = int(rng.integers(0, n))
        errors[start : start + int(rng.geometric(1 / 6))] = True
    return errors


def _positions(rng: np.random.Generator, count: int, share: float, early: bool) -> np.ndarray:
    diverged = rng.random(count) < share
    where = np.zeros(count, np.int64) if early else rng.integers(64, LENGTH, count)
    return np.where(diverged, where, -1)


def _arm(rng: np.random.Generator, collapses: np.ndarray, n: int, broken: bool,
         crashes: int, name: str) -> object:  # fmt: skip
    """A UnitOutcomes of synthetic rows, as `report.outcomes` builds it from a database."""
    from soakgate.report.model import Unit
    from soakgate.report.outcomes import Divergence, RowFlags, UnitOutcomes, per_request
    from soakgate.stats.outcomes import crash_rate

    errors = _errors(rng, n, 28.0 if broken else EPISODES_PER_1000)
    judged = np.ones(n, bool)
    collapsed = collapses & ~errors
    compared = n // COMPARED_EVERY
    positions = _positions(rng, compared, 0.84 if broken else DIVERGE, broken)
    own = _positions(rng, compared, DIVERGE, False)
    unit = Unit(name, "gpu0", False, ("gpu0",), ("r",), n, None, {}, n * 1.0, 0, 0)
    clean = ~errors
    collapse = per_request([(collapsed, clean)])
    return UnitOutcomes(
        unit=unit, judged=n, error=per_request([(errors, judged)]), collapse=collapse,
        suspect=None, shifted=None, crash=crash_rate(crashes, n * 1.0, n), crash_lost=0,
        crash_causes={},
        divergence=Divergence(positions, own, False),
        rows=[RowFlags(errors, collapsed, np.zeros(n, bool), judged, np.arange(n, dtype=float))],
    )  # fmt: skip


def _chunk(work: Work) -> tuple[Work, int, int, dict[str, int]]:
    from soakgate.report.gate import judge

    rng = np.random.default_rng(work.seed)
    process = by_name(work.process)
    fails = crash_rule = 0
    worse: dict[str, int] = {}
    for _ in range(work.reps):
        broken = work.crashes == "broken"
        rate_b = COLLAPSE_RATE * (3 if broken else 1)
        (a,), (b,) = simulate_pair(process, rng, 1, work.n, COLLAPSE_RATE, rate_b)
        mean = {"none": 0.0, "shared": 0.5, "broken": 0.0}[work.crashes]
        crashes = [int(rng.poisson(mean)), int(rng.poisson(mean))]
        if broken:
            crashes[1] = int(rng.poisson(7 * work.n / 250))
        arm_a = _arm(rng, a, work.n, False, crashes[0], "A")
        arm_b = _arm(rng, b, work.n, broken, crashes[1], "B")
        (gate,) = judge([(arm_a, arm_b)], seed=int(rng.integers(1 << 30)))  # type: ignore[list-item]
        fails += gate.fails
        crash_rule += gate.crashed_alone and not gate.worse()
        for item in gate.worse():
            worse[item.outcome] = worse.get(item.outcome, 0) + 1
    return work, fails, crash_rule, worse


def _work(reps: int, processes: list[str]) -> Iterator[Work]:
    seed = 25_000
    for n in SIZES:
        for process in processes:
            for crashes in ("none", "shared", "broken"):
                for start in range(0, reps, CHUNK):
                    seed += 1
                    yield Work(process, n, crashes, min(CHUNK, reps - start), seed)


def _pct(count: int, total: int) -> str:
    p = count / total if total else math.nan
    return f"{100 * p:5.1f} ± {100 * math.sqrt(p * (1 - p) / total):3.1f}"


def main() -> None:
    """Simulate every cell and print the gate's failure shares."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--reps", type=int, default=1000, help="replicate pairs per cell")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--quick", action="store_true", help="smoke size: 20 reps, 2 processes")
    args = parser.parse_args()
    reps, processes = (20, list(PROCESSES[:2])) if args.quick else (args.reps, list(PROCESSES))
    totals: dict[tuple[str, int, str], list[int]] = {}
    worse: dict[tuple[str, int, str], dict[str, int]] = {}
    works = list(_work(reps, processes))
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for done, (work, fails, rule, by) in enumerate(pool.map(_chunk, works), 1):
            key = (work.process, work.n, work.crashes)
            cell = totals.setdefault(key, [0, 0, 0])
            cell[0] += work.reps
            cell[1] += fails
            cell[2] += rule
            for name, count in by.items():
                worse.setdefault(key, {})[name] = worse.get(key, {}).get(name, 0) + count
            print(f"[{done}/{len(works)}] {key}", file=sys.stderr, flush=True)
    print(f"release gate (compare --fail-on-differ defaults), {reps} pairs per cell, % ± MC SE")
    for n in SIZES:
        print(f"\n{n:,} requests per arm")
        print(f"  {'process':<14} {'identical, no crashes':>22} {'identical, crashes 0.5/arm':>27}"
              f" {'... with --allow-crashes':>25} {'broken (power)':>16}")  # fmt: skip
        for p in processes:
            none, shared, broken = (totals[(p, n, c)] for c in ("none", "shared", "broken"))
            allowed = shared[1] - shared[2]  # the crash rule alone failed the rest
            print(
                f"  {p:<14} {_pct(none[1], none[0]):>22} {_pct(shared[1], shared[0]):>27} "
                f"{_pct(allowed, shared[0]):>25} {_pct(broken[1], broken[0]):>16}"
            )
        for p in processes:
            by = worse.get((p, n, "none"), {})
            if by:
                print(
                    f"  false alarms by outcome, {p}, no crashes: "
                    + ", ".join(f"{k} {v}" for k, v in sorted(by.items()))
                )


if __name__ == "__main__":
    main()
