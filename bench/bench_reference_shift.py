"""Bench (issue 28): corruption that shifts every token a little, per generation and per unit.

The mock serves text from its bigram model and answers `prompt_logprobs` with it, so a mock is
a candidate and a reference of one model. Its control `--shift-rate R --shift-temperature T`
draws a share R of answers whole from a flattened distribution (each likely token's probability
raised to 1/T): fluent, no word outside the model's likely ones, every token a little less
likely. This bench runs the mock's own code paths in process (its injector, `make_plan`, and
the log-probabilities its `prompt_logprobs` answer holds) at the volume a verdict needs:

- a calibration of the shipped default size (5,000 samples of a clean mock), the per-generation
  threshold at the default false-flag rate (0.001, `reference.calibrate`), and its 90th
  percentile, which the unit-level verdict uses (`stats.shift.score_shift`);
- a unit of 2,000 scored generations from a candidate with the control on 1 request in 10, and
  one from a clean mock (another seed), judged by the unit-level verdict;
- per generation: the share of the control's generations flagged, and of clean ones.

Controls: the shift at T = 2 and T = 1.5, and the existing one-wrong-token control
(`--fluent-rate`, 1-3 unlikely words) for comparison. Answers of 64 tokens, prompts from the
built-in set. Every rate with its Monte Carlo SE.

Run: `nice -n 10 python bench/bench_reference_shift.py [--reps 200] [--jobs 2]`.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TOKENS, CALIBRATION, UNIT, RATE = 64, 5000, 2000, 0.001
CONTROLS = {
    "shift T=2": {"shift_rate": 0.1, "shift_temperature": 2.0},
    "shift T=1.5": {"shift_rate": 0.1, "shift_temperature": 1.5},
    "one wrong token": {"fluent_rate": 0.1},
}


def _generations(
    options: dict[str, float], seed: int, count: int
) -> tuple[list[tuple[float, float]], list[bool]]:
    """Scores (worst token's surprisal and the mean surprisal under the mock's model) of `count`
    answers of a mock with `options`, and whether each was corrupted, through the mock's own
    code."""
    from soakgate.mockserver import lm
    from soakgate.mockserver.config import MockConfig
    from soakgate.mockserver.inject import Injector
    from soakgate.mockserver.plan import Sampling, make_plan
    from soakgate.prompts import builtin_prompts

    config = MockConfig(seed=seed, output_tokens=TOKENS, **options)  # type: ignore[arg-type]
    injector = Injector(config)
    prompts = builtin_prompts()
    scores, corrupted = [], []
    for i in range(count):
        sampling = Sampling("completions", prompts[i % len(prompts)].text, TOKENS, 1.0, None,
                            False, False, None, False, True)  # fmt: skip
        decision = injector.decide()
        plan = make_plan(config, f"r{seed}-{i}", sampling, decision, injector.rng)
        before, surprisals = sampling.last_prompt_token(), []
        for token in plan.token_ids:
            surprisals.append(-lm.logprob_and_rank(before, token)[0])
            before = token
        scores.append((max(surprisals), sum(surprisals) / len(surprisals)))
        corrupted.append(decision.shift or bool(plan.fluent_positions))
    return scores, corrupted


def one_rep(control: str, rep: int) -> tuple[str, str, str, list[int]]:
    """(control, candidate's unit verdict, clean unit's verdict, per-generation counts) for one
    calibration and two units. Counts: corrupted rows, of them flagged by the shipped score (the
    worst token), flagged by a mean-surprisal threshold at the same rate; clean rows, flagged
    by each."""
    from soakgate.reference.calibrate import calibrate
    from soakgate.stats.shift import score_shift

    base = 1_000_000 * (1 + list(CONTROLS).index(control)) + 1000 * rep
    calibration, _ = _generations({}, base + 1, CALIBRATION)
    made = calibrate([w for w, _ in calibration], RATE, [m for _, m in calibration])
    mean_threshold = calibrate([m for _, m in calibration], RATE).threshold
    cutoff = made.mean_quantiles["p90"]
    scores, corrupted = _generations(CONTROLS[control], base + 2, UNIT)
    clean_scores, _ = _generations({}, base + 3, UNIT)
    candidate = score_shift(np.array([m for _, m in scores]), cutoff, CALIBRATION).verdict
    clean = score_shift(np.array([m for _, m in clean_scores]), cutoff, CALIBRATION).verdict
    counts = [0] * 6
    for (worst, mean), bad in [*zip(scores, corrupted, strict=True),
                               *((s, False) for s in clean_scores)]:  # fmt: skip
        at = 0 if bad else 3
        counts[at] += 1
        counts[at + 1] += worst > made.threshold
        counts[at + 2] += mean > mean_threshold
    return control, candidate, clean, counts


def _rate(hits: int, total: int) -> str:
    p = hits / total if total else math.nan
    return f"{100 * p:5.1f} ± {100 * math.sqrt(p * (1 - p) / total):3.1f}%" if total else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    random.seed(0)
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        work = [(control, rep) for control in CONTROLS for rep in range(args.reps)]
        results = list(pool.map(one_rep, *zip(*work, strict=True)))
    print(
        f"{args.reps} calibrations of {CALIBRATION:,} per control; units of {UNIT:,} scored "
        f"generations, {TOKENS} tokens each, the control on 1 request in 10; rate {RATE}"
    )
    print(f"  {'control':<16} {'unit SHIFTED':>15} {'clean unit':>15} | flagged per generation, "
          "corrupted: worst token / mean; clean: worst token / mean")  # fmt: skip
    for control in CONTROLS:
        mine = [r for r in results if r[0] == control]
        shifted = sum(r[1] == "shifted" for r in mine)
        false_units = sum(r[2] == "shifted" for r in mine)
        c = [sum(r[3][i] for r in mine) for i in range(6)]
        print(f"  {control:<16} {_rate(shifted, len(mine)):>15} {_rate(false_units, len(mine)):>15}"
              f" | {_rate(c[1], c[0])} / {_rate(c[2], c[0])}; "
              f"{100 * c[4] / c[3]:.3f}% / {100 * c[5] / c[3]:.3f}% of {c[3]:,}")  # fmt: skip


if __name__ == "__main__":
    main()
