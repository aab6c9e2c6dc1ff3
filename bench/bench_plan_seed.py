"""Bench (issue 26): the issue's seed figures -- what `soakgate plan` promised against what the
verdict it applies delivers. Reads the promises from the text `plan` prints (so the same script
measures any version of the code) and simulates the designs with `compare_outcomes` / the
monitor's own sequential looks.

Rows:
- pilot-blocks: `plan --pilot (2 runs x 20,000) --ratio 1.5 --blocks 8` on clustered processes;
  the 8 blocks it prints are simulated fresh (restarted servers), ratio 1.5;
- one-run: the one-run n `plan --baseline-rate 0.01 --ratio 2` prints (independent requests);
- n13000: `plan --baseline-rate 0.002 --ratio 1.5 --n 13000` (independent);
- sequential: `plan --baseline-rate 0.002 --ratio 1.5 --sequential --looks 5` (independent and
  self-exciting), with the mean n at the verdict over the fixed design's n;
- budget13000: 13,000 per arm as one run vs 8 restarted blocks of 1,625, and the pooled z.

Run: `nice -n 10 python bench/bench_plan_seed.py [--pilots 150] [--reps 1000]`.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.processes import by_name, sequential_verdict, simulate, simulate_pair

CLUSTERED = ("reset-1000", "reset-2000", "reset-5000", "self-exciting", "regimes")


def _share(hits: int, reps: int) -> str:
    p = hits / reps
    return f"{100 * p:5.1f} ± {100 * math.sqrt(p * (1 - p) / reps):3.1f}"


def _plan_text(*, pilot: list[np.ndarray] | None = None, **fields: object) -> str:
    from soakgate.stats.planning import PlanRequest, pilot_estimate, plan_summary

    estimate = pilot_estimate("sim", pilot) if pilot is not None else None
    request = PlanRequest(pilot=estimate, **fields)  # type: ignore[arg-type]
    return plan_summary(request)


def pilot_blocks(pilots: int, trials: int, seed: int) -> None:
    from soakgate.stats import compare_outcomes

    print("\npilot (2 runs x 20,000, rate 0.2%) -> plan --ratio 1.5 --blocks 8 -> 8 fresh blocks")
    print(f"  {'process':<14} promised %   delivered %   mean block length")
    for name in CLUSTERED:
        process, rng = by_name(name), np.random.default_rng(seed)
        promised, hits, total, lengths = [], 0, 0, []
        for _ in range(pilots):
            pilot = simulate(process, rng, 2, 20_000, 0.002)
            if sum(int(s.sum()) for s in pilot) == 0:
                continue
            text = _plan_text(pilot=pilot, baseline_rate=None, ratio=1.5, blocks=8)
            for length, warmup, power in _block_lines(text):
                promised.append(power)
                lengths.append(length)
                for _ in range(trials):
                    a, b = simulate_pair(process, rng, 8, warmup + length, 0.002, 0.003, True)
                    a, b = [x[warmup:] for x in a], [x[warmup:] for x in b]
                    hits += compare_outcomes(a, b, seed=total).differ
                    total += 1
        print(f"  {name:<14} {np.mean(promised):9.1f}   {_share(hits, total):>11}   "
              f"{np.mean(lengths):>12,.0f}")  # fmt: skip


OLD_BLOCKS = re.compile(r"8 blocks per arm of ([\d,]+) requests.*?power ([\d.]+)%")
NEW_BLOCKS = re.compile(
    r"8 per arm of ([\d,]+) counted requests(?: after a warm-up of ([\d,]+))?.*?power ([\d.]+)%"
)


def _block_lines(text: str) -> list[tuple[int, int, float]]:
    """(block length, warm-up, promised %) of every 8-block design printed (either version)."""
    found = [(_int(m[1]), _int(m[2]), float(m[3])) for m in NEW_BLOCKS.finditer(text)]
    return found or [(_int(m[1]), 0, float(m[2])) for m in OLD_BLOCKS.finditer(text)]


def _int(text: str | None) -> int:
    return int(text.replace(",", "")) if text else 0


def one_run(reps: int, rate: float, ratio: float, n: int, label: str, seed: int) -> None:
    from soakgate.stats import compare_outcomes
    from soakgate.stats.naive import pooled_z_test

    rng = np.random.default_rng(seed)
    differ = indeterminate = z_hits = 0
    for i in range(reps):
        a, b = rng.random(n) < rate, rng.random(n) < rate * ratio
        verdict = compare_outcomes(a, b, seed=i)
        differ += verdict.differ
        indeterminate += verdict.verdict == "indeterminate"
        z_hits += pooled_z_test(int(a.sum()), n, int(b.sum()), n).p_value < 0.05
    print(f"  {label}: n {n:,} per arm, delivered {_share(differ, reps)} %, indeterminate "
          f"{_share(indeterminate, reps)} %, pooled z {_share(z_hits, reps)} %")  # fmt: skip


def blocks_at(reps: int, rate: float, ratio: float, blocks: int, length: int, seed: int) -> None:
    from soakgate.stats import compare_outcomes

    rng = np.random.default_rng(seed)
    hits = sum(
        compare_outcomes(
            list(rng.random((blocks, length)) < rate),
            list(rng.random((blocks, length)) < rate * ratio),
        ).differ
        for _ in range(reps)
    )
    print(f"  {blocks} blocks x {length:,} per arm: delivered {_share(hits, reps)} %")


def sequential(reps: int, name: str, seed: int) -> None:
    from soakgate.stats.plan import make_plan
    from soakgate.stats.power import n_per_arm

    plan = make_plan("bench", ["A", "B"], 0.002, 1.5, looks=5)  # sized as `plan --sequential`
    assert plan.sequential is not None
    n_max = plan.sequential.n_max_per_arm
    process, rng = by_name(name), np.random.default_rng(seed)
    hits, used = 0, 0
    for _ in range(reps):
        (a,), (b,) = simulate_pair(process, rng, 1, n_max, 0.002, 0.003)
        verdict, n = sequential_verdict(plan, a, b)
        hits += verdict == "differ"
        used += n
    fixed = n_per_arm(0.002, 1.5)
    print(
        f"  {name}: n max {n_max:,}, delivered {_share(hits, reps)} % (promised 80), mean n "
        f"{used / reps:,.0f} = {used / reps / fixed:.3f} of the fixed design's {fixed:,}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pilots", type=int, default=150, help="pilots per clustered process")
    parser.add_argument("--trials", type=int, default=4, help="simulated soaks per pilot")
    parser.add_argument("--reps", type=int, default=1000, help="pairs per independent cell")
    parser.add_argument("--seq-reps", type=int, default=500, help="pairs per sequential cell")
    parser.add_argument("--only", help="comma-separated rows: pilot,onerun,n,seq,budget")
    args = parser.parse_args()
    only = set((args.only or "pilot,onerun,n,seq,budget").split(","))
    start = time.perf_counter()
    if "onerun" in only:
        text = _plan_text(baseline_rate=0.01, ratio=2.0)
        old = re.search(r"as compare judges it.*?n per arm (\d+)", text)
        new = re.search(r"one run per arm: ([\d,]+) requests per arm, power ([\d.]+)%", text)
        n, promised = (_int(new[1]), new[2]) if new else (_int(old[1]) if old else 0, "80")
        print(f"plan --baseline-rate 0.01 --ratio 2 --power 0.8, one run per arm (promised "
              f"{promised}%)")  # fmt: skip
        one_run(args.reps, 0.01, 2.0, n, "independent", 26_001)
    if "n" in only:
        text = _plan_text(baseline_rate=0.002, ratio=1.5, n=13_000)
        found = re.search(r"power with n=13000 per arm: ([\d.]+)%", text) or re.search(
            r"one run per arm: 13,000 requests per arm, power ([\d.]+)%", text
        )
        print(f"\nplan --baseline-rate 0.002 --ratio 1.5 --n 13000 promises "
              f"{found.group(1) if found else text!r}% for one run per arm")  # fmt: skip
        one_run(args.reps, 0.002, 1.5, 13_000, "independent", 26_002)
    if "budget" in only:
        print("\n13,000 per arm as 8 restarted blocks (independent, 0.2% vs 0.3%)")
        blocks_at(args.reps, 0.002, 1.5, 8, 1_625, 26_003)
    if "seq" in only:
        print("\nplan --baseline-rate 0.002 --ratio 1.5 --sequential --looks 5")
        for name in ("independent", "self-exciting"):
            sequential(args.seq_reps, name, 26_004)
    if "pilot" in only:
        pilot_blocks(args.pilots, args.trials, 26_005)
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
