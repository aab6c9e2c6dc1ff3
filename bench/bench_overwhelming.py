"""Bench (issue 26 item 3): what the release gate's "not cleared" rule costs and buys.

One run per arm withholds a verdict (INDETERMINATE) when its failures are correlated between
stretches. The gate used to pass every INDETERMINATE outcome; it now fails one whose own test's
Holm-adjusted p is at or below alpha x `OVERWHELMING_FRACTION` (0.001 at 0.05) with B's rate
higher (`stats.outcomes.OutcomeComparison.not_cleared`). Each pair of arms here is one outcome
judged as `soakgate compare --outcome collapse --fail-on-differ` judges it: `compare_outcomes`
(the verdict with its shipped defaults), then `adjust_family` and the gate's rule, so the figures
are the shipped code's, not a re-implementation.

Per process of `bench/processes.py` and per setting (requests per arm : failure rate), equal
arms (ratio 1: every failed gate is a false alarm) and, with `--ratio R`, B at R times A's rate:

- `differ`: the gate fails on a DIFFER with B worse (what it did before the rule);
- `not cleared`: INDETERMINATE with B higher at adjusted p <= 0.001 (what the rule adds);
- `gate fails`: their sum, what the gate does now; each with its Monte Carlo SE.

Run: `nice -n 10 python bench/bench_overwhelming.py [--reps 300] [--jobs N]`; `--quick` is
smoke size.
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

PROCESSES = ("independent", "reset-2000", "reset-5000", "fixed-resets", "regimes",
             "long-regimes", "self-exciting")  # fmt: skip
SETTINGS = "13000:0.002,40000:0.002,2000:0.1"
CHUNK = 50


@dataclass(frozen=True, slots=True)
class Work:
    """One chunk of replicate pairs of one cell."""

    process: str
    n: int
    rate: float
    ratio: float
    reps: int
    seed: int


def _chunk(work: Work) -> tuple[Work, int, int]:
    from soakgate.stats import compare_outcomes
    from soakgate.stats.outcomes import COLLAPSE, OutcomeComparison, adjust_family, rate_direction

    rng = np.random.default_rng(work.seed)
    a_runs, b_runs = simulate_pair(by_name(work.process), rng, work.reps, work.n, work.rate,
                                   work.rate * work.ratio)  # fmt: skip
    differ = not_cleared = 0
    for i, (a, b) in enumerate(zip(a_runs, b_runs, strict=True)):
        verdict = compare_outcomes(a, b, seed=work.seed + i)
        events, exposure = (int(a.sum()), int(b.sum())), (float(len(a)), float(len(b)))
        item = OutcomeComparison(COLLAPSE, events, exposure, verdict,
                                 rate_direction(events, exposure), sum(events) > 0)  # fmt: skip
        adjust_family([item], verdict.alpha)
        differ += item.worse
        not_cleared += item.not_cleared and not item.worse
    return work, differ, not_cleared


def _work(reps: int, processes: list[str], settings: list[tuple[int, float]],
          ratios: list[float], seed: int) -> Iterator[Work]:  # fmt: skip
    for n, rate in settings:
        for ratio in ratios:
            for process in processes:
                for start in range(0, reps, CHUNK):
                    seed += 1
                    yield Work(process, n, rate, ratio, min(CHUNK, reps - start), seed)


def _pct(count: int, total: int) -> str:
    p = count / total if total else math.nan
    return f"{100 * p:5.1f} +- {100 * math.sqrt(p * (1 - p) / total):.1f}%"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=300, help="replicate pairs per cell")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--processes", default=",".join(PROCESSES))
    parser.add_argument("--settings", default=SETTINGS, help="n:rate,... (requests per arm)")
    parser.add_argument("--ratio", type=float, default=None, help="also B at this rate ratio")
    parser.add_argument("--seed", type=int, default=26_300)
    parser.add_argument("--quick", action="store_true", help="smoke size: 20 pairs, 2 cells")
    args = parser.parse_args()
    processes = args.processes.split(",")
    settings = [(int(n), float(r)) for n, r in (s.split(":") for s in args.settings.split(","))]
    reps = args.reps
    if args.quick:
        reps, processes, settings = 20, processes[:2], settings[:1]
    ratios = [1.0] + ([args.ratio] if args.ratio else [])
    totals: dict[tuple[int, float, float, str], list[int]] = {}
    work = list(_work(reps, processes, settings, ratios, args.seed))
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for cell, differ, not_cleared in pool.map(_chunk, work):
            key = (cell.n, cell.rate, cell.ratio, cell.process)
            counts = totals.setdefault(key, [0, 0, 0])
            counts[0] += cell.reps
            counts[1] += differ
            counts[2] += not_cleared
    print(f"{reps} pairs per cell, seed {args.seed}; one outcome per pair, alpha 0.05")
    print(f"{'n per arm':>9} {'rate':>6} {'ratio':>5} {'process':<14} {'differ (before)':>16} "
          f"{'not cleared':>16} {'gate fails now':>16}")  # fmt: skip
    for (n, rate, ratio, process), (total, differ, unresolved) in totals.items():
        print(f"{n:>9,} {rate:>6g} {ratio:>5g} {process:<14} {_pct(differ, total):>16} "
              f"{_pct(unresolved, total):>16} {_pct(differ + unresolved, total):>16}")  # fmt: skip


if __name__ == "__main__":
    main()
