"""Bench (issue 27): how often `soakgate replay`'s verdicts are right and wrong, simulated at the
defaults users get (5 repeats, 10 rows, the background soak at concurrency 8), beside the
classification before issue 27 (any collapse alone: input-triggered; any under load: only under
load).

Each session replays 10 collapsed rows of one run. Alone, each row is sent as the replay does it
(greedy, sampled, control) x 5, one request at a time, so a collapse that follows the server's
request count falls where the count puts it; under load each row's 5 replays and a background of
7 x 5 x 10 requests are drawn from the load rate. Processes: independent collapses at 2%, 20%
and 50% (nothing ties a collapse to anything), one prompt of ten collapsing 90% of the time
(input-triggered), collapses at 30% under load only (load), and the server's requests 6 of every
18 collapsing (state). Per process: the share of sessions in which some row got a verdict that
claims a cause the process does not have, and the share of rows with each verdict, each with its
Monte Carlo error (1.96 standard errors). Run: `python bench/bench_replay.py [--sessions 2000]`.
"""

from __future__ import annotations

import argparse
import math
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from soakgate.probes.reproduce import (
    AS_OTHERS,
    FINDINGS,
    INPUT_TRIGGERED,
    NEVER,
    NO_ANSWER,
    STATE_DRIVEN,
    UNDER_LOAD,
    Evidence,
    Tally,
    classify,
    input_triggered_rows,
    runs_test_p,
)

REPEATS, ROWS, CONCURRENCY = 5, 10, 8
BACKGROUND = (CONCURRENCY - 1) * REPEATS * ROWS


@dataclass(frozen=True)
class Process:
    """When a request collapses: alone (by the server's count and whether it is the replayed
    prompt) and under load; and which causes are true."""

    name: str
    alone: Callable[[random.Random, int, bool, int], bool]
    """(rng, server count, is the replayed prompt, row) -> collapsed."""
    load_rate: Callable[[bool, int], float]
    """(is the replayed prompt, row) -> collapse probability under load."""
    true: frozenset[str]
    """Verdicts that are right for some row of this process."""


def independent(rate: float) -> Process:
    return Process(
        f"independent {rate:.0%}", lambda rng, _n, _r, _row: rng.random() < rate,
        lambda _r, _row: rate, frozenset(),
    )  # fmt: skip


def trigger_rate(replayed: bool, row: int) -> float:
    return 0.9 if replayed and row == 0 else 0.02


PROCESSES = [
    independent(0.02), independent(0.2), independent(0.5),
    Process("input: 1 prompt of 10 at 90%, others 2%",
            lambda rng, _n, r, row: rng.random() < trigger_rate(r, row), trigger_rate,
            frozenset({INPUT_TRIGGERED})),
    Process("load: 30% under load, 0 alone", lambda _rng, _n, _r, _row: False,
            lambda _r, _row: 0.3, frozenset({UNDER_LOAD})),
    Process("state: requests 6 of every 18", lambda _rng, n, _r, _row: n % 18 < 6,
            lambda _r, _row: 6 / 18, frozenset({STATE_DRIVEN})),
]  # fmt: skip


def old_verdict(alone: Tally, under_load: Tally) -> str:
    """The classification before issue 27."""
    if alone.collapsed:
        return INPUT_TRIGGERED
    if under_load.collapsed:
        return UNDER_LOAD
    return NEVER


def session(rng: random.Random, process: Process) -> tuple[list[str], list[str]]:
    """One replay of ROWS rows: the new verdicts and the old ones."""
    count = rng.randrange(18)  # the server's own count when the replay starts
    sequence: list[tuple[int, bool]] = []
    alone = [Tally() for _ in range(ROWS)]
    control = Tally()
    for row in range(ROWS):
        for _ in range(REPEATS):
            for replayed, tally in ((True, alone[row]), (True, alone[row]), (False, control)):
                collapsed = process.alone(rng, count, replayed, row)
                count += 1
                tally.add(collapsed, False)
                sequence.append((row if replayed else -1, collapsed))
    under = [Tally() for _ in range(ROWS)]
    for row in range(ROWS):
        for _ in range(REPEATS):
            under[row].add(rng.random() < process.load_rate(True, row), False)
    background = Tally()
    for _ in range(BACKGROUND):
        background.add(rng.random() < process.load_rate(False, rng.randrange(ROWS)), False)
    load_pool = background
    alone_pool = control
    for row in range(ROWS):
        load_pool, alone_pool = load_pool.plus(under[row]), alone_pool.plus(alone[row])
    triggered = input_triggered_rows(dict(enumerate(alone)), control)
    state_p = runs_test_p([c for owner, c in sequence if owner not in triggered])
    new = [
        classify(Evidence(alone[row], control, under[row], load_pool, alone_pool, state_p,
                          rows=ROWS, runs=1)).verdict
        for row in range(ROWS)
    ]  # fmt: skip
    old = [old_verdict(alone[row], under[row]) for row in range(ROWS)]
    return new, old


def wrong(verdicts: list[str], process: Process, old: bool) -> bool:
    """Whether some row claims a cause the process does not have (the input process: any row
    but the triggering one called input-triggered, or any row called something else it is not)."""
    for row, verdict in enumerate(verdicts):
        if verdict not in FINDINGS:
            continue
        if verdict == INPUT_TRIGGERED and process.true == {INPUT_TRIGGERED}:
            if row != 0:
                return True
        elif verdict not in process.true:
            return True
    return False


def share(k: int, n: int) -> str:
    p = k / n
    return f"{p:6.1%} ± {1.96 * math.sqrt(max(p * (1 - p), 1 / n) / n):.1%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=27)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    began = time.perf_counter()
    print(f"{args.sessions} sessions per process, {ROWS} rows x {REPEATS} repeats, background "
          f"{BACKGROUND} requests; ± is 1.96 Monte Carlo standard errors")  # fmt: skip
    order = (INPUT_TRIGGERED, STATE_DRIVEN, UNDER_LOAD, AS_OTHERS, NEVER, NO_ANSWER)
    for process in PROCESSES:
        new_wrong = old_wrong = 0
        verdicts: Counter[str] = Counter()
        first_row: Counter[str] = Counter()
        for _ in range(args.sessions):
            new, old = session(rng, process)
            new_wrong += wrong(new, process, old=False)
            old_wrong += wrong(old, process, old=True)
            verdicts.update(new)
            first_row[new[0]] += 1
        rows = args.sessions * ROWS
        print(f"\n{process.name}")
        print(f"  sessions with a wrong cause: new {share(new_wrong, args.sessions)}, "
              f"before issue 27 {share(old_wrong, args.sessions)}")  # fmt: skip
        print("  rows: " + ", ".join(f"{v} {share(verdicts[v], rows)}" for v in order
                                     if verdicts[v]))  # fmt: skip
        if process.true == {INPUT_TRIGGERED}:
            print(f"  the triggering row input-triggered: "
                  f"{share(first_row[INPUT_TRIGGERED], args.sessions)}")  # fmt: skip
    print(f"\n({time.perf_counter() - began:.1f} s)")


if __name__ == "__main__":
    main()
