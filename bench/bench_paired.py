"""Bench (issue 26, item 4): the paired verdict of arms soaked side by side, on the battery.

Arms soaked at the same time (one `soakgate run` with two targets) carry each request's end
time; `stats.paired` then compares them window by window where the one-run verdict withholds
and the arms' counts move together (a shared drift). Every pair here is judged by the verdict
soakgate ships (`stats.verdict.decide`, the one `soakgate compare` applies), given both arms'
times on one clock as if they ran side by side, and again without the clock (the one-run
verdict alone: the "without" columns). Every process of the battery, 13,000 and 40,000
requests per arm, rate 0.2%, equal rates (false alarms) and B at 1.5x (power), with Monte
Carlo standard errors.

`--held-out` runs instead the processes of `bench/processes_paired.py`, written after the paired
verdict was tuned and not to be tuned on (shared spikes, prompts, a lagged drift, own resets or
episodes under a shared drift, cross-excitation, a shared cycle), each arm on its own jittered
clock rather than in lockstep.

Run: `nice -n 10 python bench/bench_paired.py [--reps 1000] [--jobs 2] [--processes a,b]
[--held-out]`.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.processes import APART, BATTERY, by_name, selected, simulate_pair
from bench.processes_paired import HELD_OUT, jittered_clock

RATE, RATIO, LENGTHS = 0.002, 1.5, (13_000, 40_000)


def cell(name: str, n: int, ratio: float, reps: int, seed: int) -> list[tuple[str, str, str]]:
    """(design, verdict, verdict without the clock) of `reps` side-by-side pairs."""
    from soakgate.stats.verdict import Outcomes, decide

    rng = np.random.default_rng(seed)
    found = []
    process = by_name(name, BATTERY + HELD_OUT)
    held_out = process in HELD_OUT
    (arms_a, arms_b) = simulate_pair(process, rng, reps, n, RATE, RATE * ratio)
    clock = np.arange(n, dtype=np.float64)  # side by side: request i of each arm ends together
    for i, (a, b) in enumerate(zip(arms_a, arms_b, strict=True)):
        arms = (Outcomes(int(a.sum()), n, a, ()), Outcomes(int(b.sum()), n, b, ()))
        clocks = (jittered_clock(rng, n), jittered_clock(rng, n)) if held_out else (clock, clock)
        timed = [replace(arm, times=times) for arm, times in zip(arms, clocks, strict=True)]
        verdict = decide(timed[0], timed[1], 0.05, seed + i)
        without = decide(arms[0], arms[1], 0.05, seed + i)
        found.append((verdict.design, verdict.verdict, without.verdict))
    return found


def _share(hits: int, total: int) -> str:
    p = hits / total
    return f"{100 * p:5.1f} ± {100 * math.sqrt(p * (1 - p) / total):3.1f}"


def main() -> None:
    """Every process at both lengths, under equal rates and a 1.5x ratio."""
    from soakgate.stats.paired import PAIRED

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--reps", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--processes", help="comma-separated subset of the battery")
    parser.add_argument("--seed", type=int, default=26_300)
    parser.add_argument(
        "--held-out",
        action="store_true",
        help="the held-out processes of bench/processes_paired.py, own clocks",
    )
    args = parser.parse_args()
    # a subset named on the command line may come from either pool
    pool = BATTERY + HELD_OUT if args.processes else HELD_OUT if args.held_out else BATTERY
    try:
        names = selected(args.processes, pool)
    except KeyError as unknown:
        raise SystemExit(f"bench_paired: no process {unknown}") from None
    work = [(p, n, r) for n in LENGTHS for p in names for r in (1.0, RATIO)]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(cell, p, n, r, args.reps, args.seed + 10_000 * i)
                   for i, (p, n, r) in enumerate(work)]  # fmt: skip
        results = {key: future.result() for key, future in zip(work, futures, strict=True)}
    for n in LENGTHS:
        clocks = ", each arm on its own jittered clock" if args.held_out else ""
        print(
            f"\nside by side, {n:,} requests per arm, {args.reps} pairs per cell, DIFFER %{clocks}"
        )
        print(f"  {'process':<14} {'with pairing':>14} {'without':>14}  "
              f"{'decided paired':>14} {'indeterminate':>14} | power: {'with':>13} "
              f"{'without':>13}")  # fmt: skip
        for name in names:
            equal, apart = results[(name, n, 1.0)], results[(name, n, RATIO)]
            reps = len(equal)
            with_0 = sum(v == "differ" for _, v, _ in equal)
            without_0 = sum(w == "differ" for _, _, w in equal)
            paired_0 = sum(d == PAIRED for d, _, _ in equal)
            undecided = sum(v == "indeterminate" for _, v, _ in equal)
            with_1 = sum(v == "differ" for _, v, _ in apart)
            without_1 = sum(w == "differ" for _, _, w in apart)
            mark = " (rates apart)" if name in APART else ""
            print(f"  {name:<14} {_share(with_0, reps):>14} {_share(without_0, reps):>14}  "
                  f"{_share(paired_0, reps):>14} {_share(undecided, reps):>14} | "
                  f"{_share(with_1, reps):>13} {_share(without_1, reps):>13}{mark}")  # fmt: skip


if __name__ == "__main__":
    main()
