"""Bench (issue 26): does every power `soakgate plan` prints come true?

Two parts, each design simulated at full length from the failure processes of
`bench/processes.py` and judged exactly as soakgate judges it (`compare_outcomes` for one run
and for blocks, the monitor's own `judge_look` for looks):

A. plans without a pilot, where the process simulated is the one the plan assumes
   (independent requests; 5 adjacent rows collapsing together with `--design-effect 5`): the
   one-run n, the blocks, the looks' n max, and the powers printed for `--n`;
B. plans from pilots simulated as a user's (2 runs x 20,000 requests, each on a freshly started
   server, long-run rate 0.2%) for every process of the battery: each block design the plan
   prints with a power (from a fresh start, after a warm-up; reaching the power asked or not)
   is soaked `--trials` times per pilot on freshly started servers at a 1.5x ratio. Promised:
   the mean over pilots of the power printed; delivered: the share of all those soaks judged
   DIFFER, with its Monte Carlo SE (pilots as clusters).

Run: `nice -n 10 python bench/bench_plan.py [--pilots 60] [--trials 8] [--reps 1000] [--jobs 2]`
(`--part A` or `--part B`, `--processes a,b` for a subset; `--part T` times what `plan`
computes, each plan in a fresh process). Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.processes import by_name, selected, sequential_verdict, simulate, simulate_pair

RATE, RATIO, POWER, ALPHA = 0.002, 1.5, 0.8, 0.05
PILOT_RUNS, PILOT_LENGTH = 2, 20_000


@dataclass(slots=True)
class Cell:
    """Promised figures and delivered soaks of one (process, design) cell."""

    promised: list[float] = field(default_factory=list)
    soaked: list[int] = field(default_factory=list)
    hits: list[int] = field(default_factory=list)  # per pilot (or per cell): DIFFER soaks
    trials: list[int] = field(default_factory=list)
    offered: int = 0  # pilots whose plan printed this design with a power
    reached: int = 0  # ... and that power reached the power asked
    pilots: int = 0

    def delivered(self) -> tuple[float, float]:
        """Share DIFFER over all soaks and its SE, pilots taken as clusters."""
        total, hits = sum(self.trials), sum(self.hits)
        if not total:
            return math.nan, math.nan
        p = hits / total
        if len(self.trials) < 2:
            return p, math.sqrt(p * (1 - p) / total)
        shares = np.array(self.hits) - p * np.array(self.trials)
        k = len(self.trials)
        return p, math.sqrt(k / (k - 1) * float((shares**2).sum())) / total


def _soak_blocks(process: str, rng: np.random.Generator, blocks: int, length: int,
                 warmup: int) -> bool:  # fmt: skip
    from soakgate.stats import compare_outcomes

    a, b = simulate_pair(by_name(process), rng, blocks, warmup + length, RATE, RATE * RATIO, True)
    return compare_outcomes([s[warmup:] for s in a], [s[warmup:] for s in b]).differ


def pilot_work(process: str, pilots: int, trials: int, seed: int) -> dict[str, Cell]:
    """Plans from `pilots` simulated pilots, each design soaked `trials` times."""
    from soakgate.stats.delivered import Blocks, soaked
    from soakgate.stats.options import Question, pilot_options
    from soakgate.stats.pilot import pilot_estimate

    rng = np.random.default_rng(seed)
    cells: dict[str, Cell] = defaultdict(Cell)
    for _ in range(pilots):
        runs = simulate(by_name(process), rng, PILOT_RUNS, PILOT_LENGTH, RATE, True)
        if sum(int(s.sum()) for s in runs) == 0:
            continue
        pilot = pilot_estimate("sim", runs)
        question = Question(pilot.rate, RATIO, ALPHA, POWER)
        for option in pilot_options(pilot, question, None, None, None, None):
            cell = cells[option.label]
            cell.pilots += 1
            design = option.sized.design if option.sized else None
            if not isinstance(design, Blocks) or not option.sized:
                continue  # not printed with a power (the pilot vouches for no such blocks)
            cell.offered += 1
            cell.reached += option.sized.reached
            cell.promised.append(option.sized.delivered.power)
            cell.soaked.append(soaked(design))
            hits = sum(
                _soak_blocks(process, rng, design.blocks, design.length, design.warmup)
                for _ in range(trials)
            )
            cell.hits.append(hits)
            cell.trials.append(trials)
    return dict(cells)


ASSUMED = (
    # (process simulated, rate, ratio, design effect the plan is told, --n or None)
    ("independent", 0.002, 1.5, 1.0, None),
    ("independent", 0.002, 1.5, 1.0, 13_000),
    ("independent", 0.01, 2.0, 1.0, None),
    ("batch-5", 0.002, 1.5, 5.0, None),
)


def assumed_work(index: int, reps: int, seed: int) -> dict[str, Cell]:
    """One plan without a pilot: each design it prints, simulated `reps` times."""
    from soakgate.stats.delivered import SequentialRun
    from soakgate.stats.models import assumed_model
    from soakgate.stats.options import Question, assumed_options

    process, rate, ratio, spread, n = ASSUMED[index]
    question = Question(rate, ratio, ALPHA, POWER)
    options = assumed_options(assumed_model(rate, spread), question, n, None, None, 5)
    rng = np.random.default_rng(seed)
    cells: dict[str, Cell] = {}
    for option in options:
        assert option.sized is not None
        design, cell = option.sized.design, Cell()
        cell.promised.append(option.sized.delivered.power)
        hits, used = 0, 0
        count = reps // 2 if isinstance(design, SequentialRun) else reps
        for _ in range(count):
            differ, n = _soak(by_name(process), rng, design, rate, ratio)
            hits += differ
            used += n
        cell.hits.append(hits)
        cell.trials.append(count)
        cell.soaked.append(round(used / count))  # mean counted n per arm at the verdict
        cells[f"{option.label}: {_shape(design)}"] = cell
    return cells


def _soak(process: object, rng: np.random.Generator, design: object, rate: float,
          ratio: float) -> tuple[bool, int]:  # fmt: skip
    from soakgate.stats import compare_outcomes
    from soakgate.stats.delivered import Blocks, OneRun
    from soakgate.stats.plan import make_plan

    if isinstance(design, OneRun):
        (a,), (b,) = simulate_pair(process, rng, 1, design.n, rate, rate * ratio)  # type: ignore[arg-type]
        return compare_outcomes(a, b).differ, design.n
    if isinstance(design, Blocks):
        a, b = simulate_pair(process, rng, design.blocks, design.length, rate, rate * ratio, True)  # type: ignore[arg-type]
        return compare_outcomes(a, b).differ, design.blocks * design.length
    rule = design.rule  # type: ignore[attr-defined]
    plan = make_plan("bench", ["A", "B"], rate, ratio, looks=rule.looks,
                     n_max_per_arm=rule.n_max_per_arm)  # fmt: skip
    (a,), (b,) = simulate_pair(process, rng, 1, rule.n_max_per_arm, rate, rate * ratio)  # type: ignore[arg-type]
    verdict, n = sequential_verdict(plan, a, b)
    return verdict == "differ", n


def _shape(design: object) -> str:
    from soakgate.stats.delivered import Blocks, OneRun

    if isinstance(design, OneRun):
        return f"{design.n:,} per arm"
    if isinstance(design, Blocks):
        return f"{design.blocks} x {design.length:,}"
    return f"5 looks, n max {design.rule.n_max_per_arm:,}"  # type: ignore[attr-defined]


def _pct(value: float) -> str:
    return f"{100 * value:5.1f}"


def _print_assumed(results: dict[int, dict[str, Cell]]) -> None:
    print("\nA. plans without a pilot: the process simulated is the one the plan assumes")
    print(f"  {'plan':<44} {'design':<44} promised %   delivered %    mean n/arm")
    for index, cells in sorted(results.items()):
        process, rate, ratio, spread, n = ASSUMED[index]
        flags = f"{process}: --baseline-rate {rate:g} --ratio {ratio:g}"
        flags += f" --design-effect {spread:g}" if spread > 1 else ""
        flags += f" --n {n}" if n else ""
        for label, cell in cells.items():
            p, se = cell.delivered()
            print(f"  {flags:<44} {label:<44} {_pct(cell.promised[0]):>9}   "
                  f"{_pct(p)} ± {100 * se:3.1f}   {cell.soaked[0]:>10,}")  # fmt: skip
            flags = ""


PILOT_HEADER = (
    f"  {'process':<14} {'design':<26} printed/reached/pilots   promised %   delivered %    "
    "mean soaked/arm   short by"
)


def _print_pilots(results: dict[str, dict[str, Cell]], names: list[str]) -> None:
    print(f"\nB. plans from pilots ({PILOT_RUNS} runs x {PILOT_LENGTH:,}, fresh servers, rate "
          f"{RATE:.1%}), soaked at ratio {RATIO:g}; power asked {POWER:.0%}")  # fmt: skip
    print(PILOT_HEADER)
    for name in names:
        _print_process(name, results.get(name, {}))


def _print_process(name: str, cells: dict[str, Cell], out: TextIO = sys.stdout) -> None:
    for label, cell in sorted(cells.items()):
        if label.startswith(("one run", "sequential")):
            continue
        p, se = cell.delivered()
        promised = float(np.mean(cell.promised)) if cell.promised else math.nan
        short = promised - p
        flag = "  <-- more than 3 points" if short > 0.03 else ""
        soaked_mean = float(np.mean(cell.soaked)) if cell.soaked else math.nan
        counts = f"{cell.offered}/{cell.reached}/{cell.pilots}"
        print(f"  {name:<14} {label:<26} {counts:>14}          "
              f"{_pct(promised):>9}    {_pct(p)} ± {100 * se:3.1f}   {soaked_mean:>14,.0f}"
              f"   {100 * short:6.1f}{flag}", file=out, flush=True)  # fmt: skip


def main() -> None:
    """Run the parts asked, in parallel over processes, and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pilots", type=int, default=60, help="pilots per process")
    parser.add_argument("--trials", type=int, default=8, help="soaks of each design per pilot")
    parser.add_argument("--reps", type=int, default=1000, help="soaks per design in part A")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes")
    parser.add_argument("--part", choices=("A", "B", "AB", "T"), default="AB")
    parser.add_argument("--processes", help="comma-separated subset of the battery (part B)")
    parser.add_argument("--chunk", type=int, default=10, help="pilots per unit of work")
    args = parser.parse_args()
    names = selected(args.processes)
    if args.part == "T":
        timing()
        return
    start = time.perf_counter()
    assumed: dict[int, dict[str, Cell]] = {}
    pilots: dict[str, dict[str, Cell]] = defaultdict(dict)
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = {}
        if "A" in args.part:
            for index in range(len(ASSUMED)):
                futures[pool.submit(assumed_work, index, args.reps, 26_100 + index)] = ("A", index)
        if "B" in args.part:
            for p_index, name in enumerate(names):
                for c_index, first in enumerate(range(0, args.pilots, args.chunk)):
                    size = min(args.chunk, args.pilots - first)
                    seed = 26_200 + 100 * p_index + c_index
                    futures[pool.submit(pilot_work, name, size, args.trials, seed)] = ("B", name)
        pending = defaultdict(int)
        for part, key in futures.values():
            pending[(part, key)] += 1
        for done, future in enumerate(as_completed(futures), start=1):
            part, key = futures[future]
            result = future.result()
            if part == "A":
                assumed[key] = result  # type: ignore[index]
            else:
                _merge(pilots[key], result)  # type: ignore[index]
            pending[(part, key)] -= 1
            print(f"[{done}/{len(futures)}, {time.perf_counter() - start:.0f} s] {part} {key}",
                  file=sys.stderr, flush=True)  # fmt: skip
            if part == "B" and not pending[(part, key)]:  # early sight of a finished process
                print(PILOT_HEADER, file=sys.stderr)
                _print_process(str(key), pilots[key], sys.stderr)
    if assumed:
        _print_assumed(assumed)
    if pilots:
        _print_pilots(pilots, names)
    print(f"\n{time.perf_counter() - start:.0f} s")


TIMED = (
    ("plan --baseline-rate 0.002 --ratio 1.5", {"baseline_rate": 0.002, "ratio": 1.5}),
    ("plan --baseline-rate 0.002 --ratio 1.5 --n 13000",
     {"baseline_rate": 0.002, "ratio": 1.5, "n": 13_000}),
    ("plan --baseline-rate 0.002 --ratio 1.5 --sequential",
     {"baseline_rate": 0.002, "ratio": 1.5, "looks": 5}),
    ("plan --pilot (2 x 20,000, reset-2000) --ratio 1.5", {"baseline_rate": None, "ratio": 1.5}),
)  # fmt: skip


def timing() -> None:
    """Wall and CPU seconds of what `soakgate plan` computes, each in a fresh process."""
    print("time of `soakgate plan` (its library call, in a fresh process: nothing cached)")
    for label, fields in TIMED:
        with ProcessPoolExecutor(max_workers=1) as pool:  # a new process: an empty cache
            wall, cpu = pool.submit(_timed, fields, "pilot" in label).result()
        print(f"  {label:<52} {wall:6.1f} s wall, {cpu:6.1f} s CPU", flush=True)


def _timed(fields: dict[str, object], pilot: bool) -> tuple[float, float]:
    from soakgate.stats.pilot import pilot_estimate
    from soakgate.stats.planning import PlanRequest, plan_summary

    estimate = None
    if pilot:
        runs = simulate(by_name("reset-2000"), np.random.default_rng(5), 2, 20_000, RATE, True)
        estimate = pilot_estimate("sim", runs)
    wall, cpu = time.perf_counter(), time.process_time()
    plan_summary(PlanRequest(pilot=estimate, **fields))  # type: ignore[arg-type]
    return time.perf_counter() - wall, time.process_time() - cpu


def _merge(into: dict[str, Cell], part: dict[str, Cell]) -> None:
    for label, cell in part.items():
        target = into.setdefault(label, Cell())
        target.promised += cell.promised
        target.soaked += cell.soaked
        target.hits += cell.hits
        target.trials += cell.trials
        target.offered += cell.offered
        target.reached += cell.reached
        target.pilots += cell.pilots


if __name__ == "__main__":
    main()
