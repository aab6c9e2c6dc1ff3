"""Bench (issue 26, item 4): a paired side-by-side verdict, measured before anything ships.

Arms soaked at the same time (one `soakgate run` with two targets) can be compared window by
window: the prototype here cuts both arms' runs into the same 40 stretches, takes the
differences of their failure counts, and judges their mean with a t over 12 batches of those
differences (11 df); its dependence safeguard is an exact permutation check of the differences'
autocorrelation at lags 1-4 (199 shuffles of the 40 stretches), judged at the level the shipped
one-run check uses for the pair's failures (`dependence.check_level`): correlated, and the
verdict is INDETERMINATE. It is measured on every process of the battery, with the shipped
one-run verdict (`compare_outcomes`) beside it. Nothing here is used by soakgate itself.

Run: `nice -n 10 python bench/bench_paired.py [--reps 400] [--jobs 2]`.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.processes import APART, by_name, selected, simulate_pair

RATE, RATIO, LENGTHS = 0.002, 1.5, (13_000, 40_000)
Floats = npt.NDArray[np.float64]


def _autocorrelation(values: Floats) -> Floats:
    """Sum of lag 1-4 autocorrelations of each row."""
    residual = values - values.mean(axis=-1, keepdims=True)
    denominator = (residual * residual).sum(axis=-1)
    numerator = sum(
        (residual[..., lag:] * residual[..., :-lag]).sum(axis=-1) for lag in range(1, 5)
    )
    result: Floats = np.where(
        denominator > 0, numerator / np.where(denominator > 0, denominator, 1), 0
    )
    return result


def paired_verdict(a: npt.NDArray[np.bool_], b: npt.NDArray[np.bool_], seed: int) -> str:
    """The prototype: `differ`, `no difference` or `indeterminate`."""
    from scipy.special import stdtr

    from soakgate.stats.dependence import bin_counts, check_level

    differences = (bin_counts(b, 40) - bin_counts(a, 40)).astype(np.float64)
    rng = np.random.default_rng(seed)
    shuffled = np.array([rng.permutation(differences) for _ in range(199)])
    observed = float(_autocorrelation(differences))
    p_check = (1 + int((_autocorrelation(shuffled) >= observed - 1e-12).sum())) / 200
    if p_check <= check_level(int(a.sum() + b.sum())):
        return "indeterminate"
    batches = bin_counts(b, 12).astype(np.float64) - bin_counts(a, 12)
    spread = batches.std(ddof=1)
    if spread == 0.0:
        return "no difference"
    t = batches.mean() / (spread / math.sqrt(12))
    return "differ" if 2 * stdtr(11, -abs(t)) < 0.05 else "no difference"


def cell(
    name: str, n: int, ratio: float, reps: int, seed: int
) -> tuple[str, int, float, list[str], list[str]]:
    """Paired and shipped verdicts of `reps` simultaneous pairs."""
    from soakgate.stats import compare_outcomes

    rng = np.random.default_rng(seed)
    paired, shipped = [], []
    for i in range(reps):
        (a,), (b,) = simulate_pair(by_name(name), rng, 1, n, RATE, RATE * ratio)
        paired.append(paired_verdict(a, b, i))
        shipped.append(compare_outcomes(a, b).verdict)
    return name, n, ratio, paired, shipped


def _share(words: list[str], word: str) -> str:
    p = words.count(word) / len(words)
    return f"{100 * p:5.1f} ± {100 * math.sqrt(p * (1 - p) / len(words)):3.1f}"


def main() -> None:
    """Every process at both lengths, under equal rates and a 1.5x ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--reps", type=int, default=400)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--processes", help="comma-separated subset of the battery")
    args = parser.parse_args()
    names = selected(args.processes)
    work = [(p, n, r) for n in LENGTHS for p in names for r in (1.0, RATIO)]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(cell, p, n, r, args.reps, 26_300 + i)
                   for i, (p, n, r) in enumerate(work)]  # fmt: skip
        results = {(f.result()[0], f.result()[1], f.result()[2]): f.result() for f in futures}
    for n in LENGTHS:
        print(f"\none run per arm soaked side by side, {n:,} requests per arm, {args.reps} pairs")
        print(f"  {'process':<14} paired: false alarms %  indeterminate %  power %   |  "
              "shipped: false alarms %  power %")  # fmt: skip
        for name in names:
            _, _, _, p0, s0 = results[(name, n, 1.0)]
            _, _, _, p1, s1 = results[(name, n, RATIO)]
            mark = " (rates apart)" if name in APART else ""
            print(f"  {name:<14} {_share(p0, 'differ'):>21}  {_share(p0, 'indeterminate'):>15}  "
                  f"{_share(p1, 'differ'):>7}   |  {_share(s0, 'differ'):>22}  "
                  f"{_share(s1, 'differ'):>7}{mark}")  # fmt: skip


if __name__ == "__main__":
    main()
