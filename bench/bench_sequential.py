"""Bench (issue 7 item 5): generations to a verdict, sequential vs fixed-n, 0.2% vs 0.3%.

Simulates both arms as failure counts per window of 500 requests, independent and bursty
(two-state clean/burst Markov), at alpha 0.05 and power 0.8, and prints for each design the
generations per arm at the verdict (mean under the alternative and under the null), the
power and the false-alarm rate. Run: `python bench/bench_sequential.py [--reps 200]`.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import numpy.typing as npt
from scipy.stats import norm

from soakgate.stats.power import n_per_arm
from soakgate.stats.sequential import design_sequential

WINDOW = 500
BASE, RATIO, ALPHA, POWER, LOOKS = 0.002, 1.5, 0.05, 0.8, 5
CLEAN, BURST, LEAVE = 0.001, 0.3, 0.05  # bursty process: mean burst 20 requests at 30%
Counts = npt.NDArray[np.int64]


def independent_counts(rng: np.random.Generator, reps: int, windows: int, rate: float) -> Counts:
    """Failures per window for independent requests."""
    return rng.binomial(WINDOW, rate, size=(reps, windows)).astype(np.int64)


def bursty_counts(rng: np.random.Generator, reps: int, windows: int, rate: float) -> Counts:
    """Failures per window for the two-state process tuned to an overall `rate`."""
    share = (rate - CLEAN) / (BURST - CLEAN)  # stationary fraction of requests in a burst
    enter = LEAVE * share / (1.0 - share)
    state = rng.random(reps) < share
    out = np.empty((reps, windows), dtype=np.int64)
    for w in range(windows):
        flips, draws = rng.random((WINDOW, reps)), rng.random((WINDOW, reps))
        hits = np.zeros(reps, dtype=np.int64)
        for i in range(WINDOW):
            state ^= np.where(state, flips[i] < LEAVE, flips[i] < enter)
            hits += draws[i] < np.where(state, BURST, CLEAN)
        out[:, w] = hits
    return out


def robust_z(a: Counts, b: Counts) -> npt.NDArray[np.float64]:
    """Batch-means z of B - A over the given windows, per replicate."""
    windows = a.shape[1]
    n = windows * WINDOW
    parts = []
    for counts in (a, b):
        rate = counts.sum(axis=1) / n
        resid = counts - rate[:, None] * WINDOW
        parts.append((rate, windows / (windows - 1) * (resid**2).sum(axis=1) / n**2))
    (ra, va), (rb, vb) = parts
    se = np.sqrt(va + vb)
    return np.where(se > 0, (rb - ra) / np.where(se > 0, se, 1.0), 0.0)


def pooled_z(a: Counts, b: Counts) -> npt.NDArray[np.float64]:
    """Pooled two-proportion z of B - A, per replicate."""
    n = a.shape[1] * WINDOW
    ka, kb = a.sum(axis=1), b.sum(axis=1)
    pooled = (ka + kb) / (2 * n)
    se = np.sqrt(pooled * (1 - pooled) * 2 / n)
    return np.where(se > 0, (kb - ka) / n / np.where(se > 0, se, 1.0), 0.0)


def sequential_run(a: Counts, b: Counts, bounds: tuple[float, ...]) -> tuple[float, float]:
    """Mean generations per arm at the verdict and the rejection rate."""
    total = a.shape[1]
    stopped = np.zeros(a.shape[0], dtype=bool)
    used = np.full(a.shape[0], total * WINDOW, dtype=np.float64)
    for k, bound in enumerate(bounds, start=1):
        windows = round(total * k / len(bounds))
        cross = ~stopped & (np.abs(robust_z(a[:, :windows], b[:, :windows])) >= bound)
        used[cross] = windows * WINDOW
        stopped |= cross
    return float(used.mean()), float(stopped.mean())


def design_effect(rng: np.random.Generator, make: object, reps: int = 100) -> float:
    """Variance of window counts over the binomial variance, from a pilot of the process."""
    counts = make(rng, reps, 200, BASE * RATIO)  # type: ignore[operator]
    rate = counts.mean() / WINDOW
    return float(counts.var(axis=1, ddof=1).mean() / (WINDOW * rate * (1 - rate)))


def scenario(name: str, make: object, reps: int, rng: np.random.Generator) -> None:
    """Print fixed-n and sequential figures for one failure process."""
    deff = 1.0 if name == "independent" else design_effect(rng, make)
    n_fixed = n_per_arm(BASE, RATIO, ALPHA, POWER, deff)
    design = design_sequential(LOOKS, ALPHA, POWER)
    fixed_windows = -(-n_fixed // WINDOW)
    max_windows = -(-round(n_fixed * design.inflation) // WINDOW)
    critical = norm.isf(ALPHA / 2)
    test = pooled_z if name == "independent" else robust_z
    print(f"\n{name}: design effect {deff:.2f}, {reps} replicates per hypothesis")
    for label, ratio in (("H1 0.2% vs 0.3%", RATIO), ("H0 0.2% vs 0.2%", 1.0)):
        start = time.perf_counter()
        a = make(rng, reps, max_windows, BASE)  # type: ignore[operator]
        b = make(rng, reps, max_windows, BASE * ratio)  # type: ignore[operator]
        fixed = float((np.abs(test(a[:, :fixed_windows], b[:, :fixed_windows])) >= critical).mean())
        mean_n, rejected = sequential_run(a, b, design.boundaries)
        print(
            f"  {label}: fixed-n {fixed_windows * WINDOW} per arm, rejects {fixed:.1%} | "
            f"sequential ({LOOKS} looks, n max {max_windows * WINDOW}) mean n {mean_n:,.0f} "
            f"per arm ({mean_n / (fixed_windows * WINDOW):.0%} of fixed), rejects {rejected:.1%}"
            f"  [{time.perf_counter() - start:.0f} s]"
        )


def main() -> None:
    """Run both scenarios and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--reps", type=int, default=200, help="replicates per hypothesis (x5 independent)"
    )
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    design = design_sequential(LOOKS, ALPHA, POWER)
    print(f"O'Brien-Fleming boundaries {[round(b, 3) for b in design.boundaries]}")
    print(
        f"n max inflation {design.inflation:.4f}; analytic E[n]/n max under H1 "
        f"{design.expected_fraction_h1:.3f}, under H0 {design.expected_fraction_h0:.3f}"
    )
    scenario("independent", independent_counts, args.reps * 5, rng)
    scenario("bursty", bursty_counts, args.reps, rng)


if __name__ == "__main__":
    main()
