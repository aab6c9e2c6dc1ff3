"""Bench (issue 14): is a false alarm under a slow drift a false alarm?

The battery's drift (`bench/processes.py`, `slow_drift`) starts equal in both arms and wanders
apart in each server. Over the soak's window the two servers then really fail at different
rates. This prints, for each drift of the battery at 13,000 and 40,000 requests per arm:

- how far apart the two servers' window-mean rates are (the share of pairs whose ratio is
  beyond 1.2x and 1.5x either way), from `--ratio-reps` simulated pairs of drift paths;
- the DIFFER rate of the shipped verdict (`soakgate.stats.compare_outcomes`, its defaults) on
  servers whose rates differ by exactly those window-mean ratios but are constant in time,
  from `--reps` pairs, with its Monte Carlo SE.

A verdict that held alpha under the drift would have to miss such differences between servers.

Run: `nice -n 10 python bench/bench_drift_window.py [--reps 500] [--ratio-reps 20000]`.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `bench.processes` from anywhere

from bench.processes import DRIFTS, drift_log_rate

from soakgate.stats import compare_outcomes

RATE = 0.002
RUN_LENGTHS = (13_000, 40_000)
CHUNK = 2_000  # drift paths simulated at once


def window_means(rng: np.random.Generator, reps: int, n: int, corr: int, sd: float) -> np.ndarray:
    """Each of `reps` servers' mean rate multiplier over a window of n requests."""
    parts = [
        np.exp(drift_log_rate(rng, min(CHUNK, reps - done), n, corr, sd)).mean(axis=1)
        for done in range(0, reps, CHUNK)
    ]
    return np.concatenate(parts)


def differ_rate(
    rng: np.random.Generator, ratios_a: np.ndarray, ratios_b: np.ndarray, n: int
) -> float:
    """Share of DIFFER verdicts for independent requests at constant rates RATE x multiplier."""
    hits = 0
    for i, (ma, mb) in enumerate(zip(ratios_a, ratios_b, strict=True)):
        a, b = rng.random(n) < RATE * ma, rng.random(n) < RATE * mb
        hits += compare_outcomes(a, b, seed=i).differ
    return hits / len(ratios_a)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=500, help="verdicts per cell")
    parser.add_argument("--ratio-reps", type=int, default=20_000, help="drift pairs per cell")
    args = parser.parse_args()
    rng = np.random.default_rng(14)
    print(f"window-mean rates of two drifting servers ({args.ratio_reps:,} pairs per cell) and")
    print(f"the verdict on constant rates that differ as much ({args.reps:,} pairs per cell)")
    print("  process        n/arm    beyond 1.2x %   beyond 1.5x %   DIFFER at constant rates %")
    for name, (corr, sd) in DRIFTS.items():
        for n in RUN_LENGTHS:
            ratio = window_means(rng, args.ratio_reps, n, corr, sd) / window_means(
                rng, args.ratio_reps, n, corr, sd
            )
            far = [float(np.mean((ratio >= r) | (ratio <= 1.0 / r))) for r in (1.2, 1.5)]
            ma = window_means(rng, args.reps, n, corr, sd)
            mb = window_means(rng, args.reps, n, corr, sd)
            p = differ_rate(rng, ma, mb, n)
            se = math.sqrt(p * (1.0 - p) / args.reps)
            print(
                f"  {name:<13} {n:>7,}    {100 * far[0]:>11.1f}   {100 * far[1]:>13.1f}"
                f"   {100 * p:>10.1f} ± {100 * se:.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
