"""Bench (issue 30): the latency statistics at the shipped settings (`stats.latency`: 12 batch
medians per arm, Welch's t, alpha 0.05; order-statistic 95% intervals), by seeded simulation.

Prints, with Monte Carlo standard errors: the comparison's false alarms on equal arms of three
latency processes (independent lognormal; AR(1) in log latency, phi 0.9, a slow stretch slowing
~10 neighbouring requests; Pareto tail 1.5), its power at a 10% and a 20% slower median, and
the coverage of the p50 / p90 / p99 intervals. `tests/stats/test_stats_latency.py` asserts the
same properties on the same processes.

Run: python bench/bench_latency.py [--reps 2000] [--n 1000]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from soakgate.stats.latency import QUANTILES, compare_medians, distribution


def lognormal(rng: np.random.Generator, n: int) -> np.ndarray:
    """Independent latencies, median 0.2 s, log-sd 0.5."""
    return np.exp(rng.normal(np.log(0.2), 0.5, n))


def correlated(rng: np.random.Generator, n: int) -> np.ndarray:
    """AR(1) in log latency, phi 0.9 (the same marginal as `lognormal`)."""
    noise = rng.normal(0.0, 0.5 * math.sqrt(1 - 0.81), n)
    log = np.empty(n)
    log[0] = rng.normal(0.0, 0.5)
    for i in range(1, n):
        log[i] = 0.9 * log[i - 1] + noise[i]
    return 0.2 * np.exp(log)


def heavy(rng: np.random.Generator, n: int) -> np.ndarray:
    """Pareto tail (shape 1.5: infinite variance) above 0.1 s."""
    return 0.1 * (1 + rng.pareto(1.5, n))


PROCESSES = {"lognormal": lognormal, "correlated": correlated, "heavy": heavy}


def rate_line(name: str, hits: int, reps: int) -> str:
    rate = hits / reps
    return f"{name}: {100 * rate:.1f}% ± {100 * math.sqrt(rate * (1 - rate) / reps):.1f}%"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--reps", type=int, default=2000)
    parser.add_argument("--n", type=int, default=1000, help="requests per arm")
    args = parser.parse_args()
    rng = np.random.default_rng(2026)
    print(f"{args.reps} simulated pairs per cell, {args.n} requests per arm, alpha 0.05")
    for name, draw in PROCESSES.items():
        alarms = sum(compare_medians(draw(rng, args.n), draw(rng, args.n)).p_value < 0.05  # type: ignore[union-attr]
                     for _ in range(args.reps))  # fmt: skip
        print(rate_line(f"false alarms, equal arms, {name}", alarms, args.reps))
    for shift in (1.1, 1.2):
        found = sum(compare_medians(lognormal(rng, args.n), shift * lognormal(rng, args.n))  # type: ignore[union-attr]
                    .p_value < 0.05 for _ in range(args.reps))  # fmt: skip
        print(rate_line(f"power, lognormal, B's median x{shift}", found, args.reps))
    from scipy.stats import norm

    truth = {q: float(0.2 * np.exp(0.5 * norm.ppf(q))) for q in QUANTILES}
    covered = dict.fromkeys(QUANTILES, 0)
    for _ in range(args.reps):
        found_distribution = distribution(lognormal(rng, args.n))
        assert found_distribution is not None
        for q in found_distribution.quantiles:
            covered[q.q] += q.low <= truth[q.q] <= q.high
    for q, count in covered.items():
        print(rate_line(f"95% interval covers the lognormal's p{round(q * 100)}", count,
                        args.reps))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
