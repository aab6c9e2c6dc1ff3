"""Bench (issue 14): is `soakgate compare`'s verdict honest when failures cluster?

For each failure process of `bench/processes.py` (independent; a hazard that grows since a
reset, at several reset scales; self-exciting; long regimes; batch-coincident; per-prompt
rates; a slow drift shared by both arms, and drifts of each arm apart), simulates pairs of
arms and judges each pair exactly as `soakgate compare` does with its defaults
(`soakgate.stats.compare_outcomes`). It prints:

- one run per arm, 13,000 and 40,000 requests: the false-alarm rate (equal rates, 0.2%), the
  power at a 1.5x ratio, and the share of INDETERMINATE verdicts, with Monte Carlo SEs;
- 8 replicate blocks per arm of 5,000 requests (each block a freshly restarted server): the
  same, beside an oracle z test that knows each arm's true variance (estimated from the
  simulated replicates themselves);
- `run --plan --until-verdict` with the README's plan (0.2% vs 0.3%, 5 looks): false alarms
  and power of the sequential looks (the monitor's own look code), with the mean n used.

`--dense` (issue 25) judges the same processes where failures are dense: one run per arm of 2,000
and 5,000 requests at 2%, and of 2,000 at 10%, at equal rates, 1.5x and 5x; each DIFFER is
counted by the test that decided it, and the share decided on episodes is shown apart (issue
25 measured a rule for "overwhelming" dense evidence with this table and rejected it).

Run: `nice -n 10 python bench/bench_calibration.py [--reps 1000] [--jobs N]`; `--quick` is a
smoke-size run. Work is split into chunks over `--jobs` processes; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `bench.processes` from anywhere

from bench.processes import APART, BATTERY, by_name, selected, sequential_verdict, simulate_pair

RATE, RATIO, ALPHA = 0.002, 1.5, 0.05
RUN_LENGTHS = (13_000, 40_000)
BLOCKS, BLOCK_LENGTH = 8, 5_000
SEQUENTIAL = ("independent", "self-exciting", "reset-2000")
CHUNK = 100  # replicates per unit of work


@dataclass(frozen=True, slots=True)
class Work:
    """One chunk of replicates of one cell."""

    design: str  # "run", "blocks" or "sequential"
    process: str
    size: int  # requests per arm (run) or per block (blocks); n max (sequential)
    ratio: float
    reps: int
    seed: int
    without_episodes: bool = False  # the verdict as before issue 25 (no decision on episodes)
    rate: float = RATE  # arm A's long-run failure rate


@dataclass(slots=True)
class Tally:
    """Verdict counts of one cell, and (blocks) each replicate's two rates for the oracle."""

    reps: int = 0
    verdicts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    rates: list[tuple[float, float]] = field(default_factory=list)
    tests: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # DIFFERs by test
    used: float = 0.0  # sequential: generations per arm at the verdict, summed

    def share(self, verdict: str) -> tuple[float, float]:
        """Share of replicates with this verdict and its Monte Carlo standard error."""
        p = self.verdicts.get(verdict, 0) / self.reps if self.reps else math.nan
        return p, math.sqrt(p * (1.0 - p) / self.reps) if self.reps else math.nan


def _run_chunk(work: Work) -> tuple[Work, Tally]:
    from soakgate.stats import compare_outcomes

    if work.without_episodes:  # the "before" column: episodes never decide
        import soakgate.stats.verdict

        soakgate.stats.verdict._episode_verdict = lambda *args, **kwargs: None  # type: ignore[assignment]
    rng = np.random.default_rng(work.seed)
    process = by_name(work.process)
    tally = Tally()
    if work.design == "sequential":
        return work, _sequential_chunk(work, rng)
    for i in range(work.reps):
        if work.design == "run":
            rate = work.rate
            (a,), (b,) = simulate_pair(process, rng, 1, work.size, rate, rate * work.ratio)
        else:
            a, b = simulate_pair(process, rng, BLOCKS, work.size, RATE, RATE * work.ratio, True)
            tally.rates.append(tuple(float(np.mean(x)) for x in (a, b)))  # type: ignore[arg-type]
        verdict = compare_outcomes(a, b, alpha=ALPHA, seed=work.seed * 1000 + i)
        tally.verdicts[verdict.verdict] += 1
        if verdict.differ:
            tally.tests[verdict.test] += 1
        tally.reps += 1
    return work, tally


def _sequential_chunk(work: Work, rng: np.random.Generator) -> Tally:
    """The README plan's looks, judged by the monitor's own `judge_look`."""
    from soakgate.stats.plan import make_plan

    plan = make_plan("bench", ["A", "B"], RATE, RATIO, alpha=ALPHA, looks=5)
    rule = plan.sequential
    assert rule is not None
    process = by_name(work.process)
    tally = Tally()
    for _ in range(work.reps):
        (a,), (b,) = simulate_pair(process, rng, 1, rule.n_max_per_arm, RATE, RATE * work.ratio)
        verdict, n = sequential_verdict(plan, a, b)
        tally.verdicts[verdict] += 1
        tally.used += n
        tally.reps += 1
    return tally


def _work(reps: int, seq_reps: int, processes: list[str]) -> Iterator[Work]:
    seed = 14_000
    cells = [("run", p, n) for n in RUN_LENGTHS for p in processes]
    cells += [("blocks", p, BLOCK_LENGTH) for p in processes]
    for design, process, size in cells:
        for ratio in (1.0, RATIO):
            for start in range(0, reps, CHUNK):
                seed += 1
                yield Work(design, process, size, ratio, min(CHUNK, reps - start), seed)
    for process in (p for p in SEQUENTIAL if p in processes):
        for ratio in (1.0, RATIO):
            for start in range(0, seq_reps, CHUNK // 4):
                seed += 1
                yield Work("sequential", process, 0, ratio, min(CHUNK // 4, seq_reps - start), seed)


DENSE_CELLS = ((0.02, 2_000), (0.02, 5_000), (0.10, 2_000))  # (rate of arm A, requests per arm)
DENSE_RATIOS = (1.0, RATIO, 5.0)


def _dense_work(reps: int, processes: list[str]) -> Iterator[Work]:
    seed = 25_000
    for rate, size in DENSE_CELLS:
        for process in processes:
            for ratio in DENSE_RATIOS:
                for start in range(0, reps, CHUNK):
                    seed += 1
                    yield Work("run", process, size, ratio, min(CHUNK, reps - start), seed,
                               rate=rate)  # fmt: skip


def _merge(into: Tally, part: Tally) -> None:
    into.reps += part.reps
    for verdict, count in part.verdicts.items():
        into.verdicts[verdict] += count
    for test, count in part.tests.items():
        into.tests[test] += count
    into.rates.extend(part.rates)
    into.used += part.used


def _pct(value: tuple[float, float]) -> str:
    return f"{100 * value[0]:5.1f} ± {100 * value[1]:3.1f}"


def _oracle(null: Tally, alternative: Tally) -> tuple[float, float]:
    """z test of the rate difference with each arm's variance taken from the simulation."""
    h0, h1 = np.array(null.rates), np.array(alternative.rates)
    var_a, var_b0, var_b1 = h0[:, 0].var(), h0[:, 1].var(), h1[:, 1].var()
    false_alarm = np.abs(h0[:, 1] - h0[:, 0]) / math.sqrt(var_a + var_b0) > 1.959964
    power = np.abs(h1[:, 1] - h1[:, 0]) / math.sqrt(h1[:, 0].var() + var_b1) > 1.959964
    return float(false_alarm.mean()), float(power.mean())


APART_HEADING = (
    "-- each arm on its own drift path: rates differ within the run, equal only across runs --"
)


def _ordered(processes: list[str]) -> list[str]:
    """The null processes first, then those whose arms' rates differ during the run."""
    return [p for p in processes if p not in APART] + [p for p in processes if p in APART]


def _first_apart(processes: list[str]) -> str | None:
    return next((p for p in _ordered(processes) if p in APART), None)


def _print_tables(tallies: dict[tuple[str, str, int, float], Tally], processes: list[str]) -> None:
    header = "false alarms %   indeterminate (H0)   power at 1.5x %   indeterminate (H1)"
    designs = {key[0] for key in tallies}
    for n in RUN_LENGTHS if "run" in designs else ():
        print(f"\none run per arm, {n:,} requests per arm (rate 0.2%, alpha 0.05)")
        print(f"  {'process':<14} {header}")
        for p in _ordered(processes):
            if p == _first_apart(processes):
                print(f"  {APART_HEADING}")
            h0, h1 = tallies[("run", p, n, 1.0)], tallies[("run", p, n, RATIO)]
            cells = (h0.share("differ"), h0.share("indeterminate"))
            cells += (h1.share("differ"), h1.share("indeterminate"))
            widths = (14, 18, 15, 18)
            row = "   ".join(f"{_pct(c):>{w}}" for c, w in zip(cells, widths, strict=True))
            print(f"  {p:<14} {row}")
    if "blocks" not in designs:
        return
    print(f"\n{BLOCKS} replicate blocks per arm of {BLOCK_LENGTH:,} requests, each block restarted")
    print(f"  {'process':<14} false alarms %   power at 1.5x %   oracle z: false alarms %, power %")
    for p in _ordered(processes):
        if p == _first_apart(processes):
            print(f"  {APART_HEADING}")
        h0 = tallies[("blocks", p, BLOCK_LENGTH, 1.0)]
        h1 = tallies[("blocks", p, BLOCK_LENGTH, RATIO)]
        oracle_fa, oracle_power = _oracle(h0, h1)
        print(f"  {p:<14} {_pct(h0.share('differ')):>14}   {_pct(h1.share('differ')):>15}"
              f"   {100 * oracle_fa:5.1f}, {100 * oracle_power:5.1f}")  # fmt: skip
    rows = [(p, r) for p in SEQUENTIAL for r in (1.0, RATIO) if ("sequential", p, 0, r) in tallies]
    if rows:
        print("\nrun --plan --until-verdict, README plan (0.2% vs 0.3%, 5 looks, n max 40,114)")
        print(f"  {'process':<14} {'hypothesis':<14} differ %        indeterminate %   mean n/arm")
        for p, r in rows:
            t = tallies[("sequential", p, 0, r)]
            label = "equal rates" if r == 1.0 else "ratio 1.5"
            print(f"  {p:<14} {label:<14} {_pct(t.share('differ')):>12}   "
                  f"{_pct(t.share('indeterminate')):>15}   {t.used / t.reps:>10,.0f}")  # fmt: skip


def _print_dense(tallies: dict[tuple[str, str, int, float, float], Tally],
                 processes: list[str]) -> None:  # fmt: skip
    """Per cell: false alarms, INDETERMINATE and power at 1.5x and 5x; in brackets the share
    of pairs decided DIFFER on episodes (INDETERMINATE without the episode rule)."""
    rule = "episodes"
    for rate, size in DENSE_CELLS:
        print(f"\none run per arm, {size:,} requests per arm, rate {100 * rate:g}% (alpha 0.05);"
              " [decided on episodes]")  # fmt: skip
        print(f"  {'process':<14} {'false alarms %':>22}   {'indet. (H0)':>12}   "
              f"{'power 1.5x %':>22}   {'power 5x %':>22}   {'indet. 5x':>12}")  # fmt: skip
        for p in _ordered(processes):
            if p == _first_apart(processes):
                print(f"  {APART_HEADING}")
            row = []
            for ratio in DENSE_RATIOS:
                t = tallies[("run", p, size, ratio, rate)]
                by_rule = t.tests.get(rule, 0) / t.reps
                row.append(f"{_pct(t.share('differ')):>13} [{100 * by_rule:4.1f}]")
                if ratio != RATIO:
                    row.append(f"{_pct(t.share('indeterminate')):>12}")
            print(f"  {p:<14} " + "   ".join(row))


def main() -> None:
    """Simulate every cell in parallel chunks and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--reps", type=int, default=1000, help="replicate pairs per cell")
    parser.add_argument("--seq-reps", type=int, help="replicates per sequential cell (= --reps)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes")
    parser.add_argument("--processes", help="comma-separated subset of the battery")
    parser.add_argument("--quick", action="store_true", help="smoke size: 8 reps, 3 processes")
    parser.add_argument(
        "--designs",
        default="run,blocks,sequential",
        help="comma-separated subset of run, blocks, sequential (same seeds)",
    )
    parser.add_argument(
        "--dense",
        action="store_true",
        help="dense failures instead: one run per arm at 2%% and 10%% (2,000 and 5,000 per arm)",
    )
    parser.add_argument(
        "--without-episodes",
        action="store_true",
        help="judge as before issue 25: the correlation check's INDETERMINATE "
        "is never decided on episodes (for the before/after comparison)",
    )
    args = parser.parse_args()
    names = selected(args.processes)
    if args.quick:
        args.reps, args.seq_reps = 8, 4
        names = names if args.processes else ["independent", "reset-2000", "self-exciting"]
    seq_reps = args.seq_reps if args.seq_reps is not None else args.reps
    designs = {d.strip() for d in args.designs.split(",")}
    cells = _dense_work(args.reps, names) if args.dense else _work(args.reps, seq_reps, names)
    work = [dataclasses.replace(w, without_episodes=args.without_episodes)
            for w in cells if w.design in designs]  # fmt: skip
    print(f"bench_calibration: {len(work)} chunks, {args.reps} pairs per cell, {seq_reps} per "
          f"sequential cell, {args.jobs} processes")  # fmt: skip
    for process in BATTERY:
        if process.name in names:
            print(f"  {process.name:<14} {process.description}")
    tallies: dict[tuple[str, str, int, float, float], Tally] = defaultdict(Tally)
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(_run_chunk, w) for w in work]
        for done, future in enumerate(as_completed(futures), start=1):
            w, tally = future.result()
            _merge(tallies[(w.design, w.process, w.size, w.ratio, w.rate)], tally)
            elapsed = time.perf_counter() - start
            where = f"{w.design} {w.process} {w.size or 'n max'} ratio {w.ratio:g}"
            print(
                f"[{done}/{len(work)} chunks, {elapsed:.0f} s] {where}", file=sys.stderr, flush=True
            )
    if args.dense:
        _print_dense(tallies, names)
    else:
        _print_tables({key[:4]: t for key, t in tallies.items()}, names)
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
