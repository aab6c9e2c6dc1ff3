"""Read the designs `soakgate plan` prints, and soak them at full length as soakgate judges
them: the tests' own check that each printed power is delivered."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
from bench.processes import Process, simulate_pair

from soakgate.stats import compare_outcomes
from soakgate.stats.verdict import DIFFER, Outcomes, decide

_POWER = r"power ([\d.]+)% ± ([\d.]+)%"
_ONE_RUN = re.compile(rf"one run per arm: ([\d,]+) requests per arm, {_POWER}")
_SIDE_BY_SIDE = re.compile(rf"side by side in one run: ([\d,]+) requests per arm, {_POWER}")
_BLOCKS = re.compile(
    r"(replicate blocks|blocks from a fresh start|blocks after a warm-up): (\d+) per arm of "
    r"([\d,]+) counted requests(?: after a warm-up of ([\d,]+))? \([\d,]+ soaked per arm\), "
    + _POWER
)
_LOOKS = re.compile(
    rf"sequential, (\d+) looks: \d+ looks up to ([\d,]+) per arm \(mean ([\d,]+) at the "
    rf"verdict\), {_POWER}"
)


@dataclass(frozen=True)
class Printed:
    """One design line of `plan`'s output."""

    kind: str
    """`one run`, `looks`, or the block line's label."""
    blocks: int
    length: int
    """Requests per arm (one run), per block, or n max (looks)."""
    warmup: int
    power: float
    error: float
    mean_n: int = 0


def _int(text: str | None) -> int:
    return int(text.replace(",", "")) if text else 0


def designs(output: str) -> list[Printed]:
    """Every design line with a power in `output`."""
    found = [
        Printed("one run", 1, _int(m[1]), 0, float(m[2]) / 100, float(m[3]) / 100)
        for m in _ONE_RUN.finditer(output)
    ]
    found += [
        Printed("side by side", 1, _int(m[1]), 0, float(m[2]) / 100, float(m[3]) / 100)
        for m in _SIDE_BY_SIDE.finditer(output)
    ]
    found += [
        Printed(m[1], int(m[2]), _int(m[3]), _int(m[4]), float(m[5]) / 100, float(m[6]) / 100)
        for m in _BLOCKS.finditer(output)
    ]
    for m in _LOOKS.finditer(output):
        power, error = float(m[4]) / 100, float(m[5]) / 100
        found.append(Printed("looks", int(m[1]), _int(m[2]), 0, power, error, _int(m[3])))
    return found


def soak(printed: Printed, process: Process, rate: float, ratio: float, reps: int,
         seed: int) -> tuple[float, float]:  # fmt: skip
    """Share of `reps` full-length soaks of the design judged DIFFER, and its standard error:
    one run per arm, both arms side by side in one run (each request's completion time at its
    arm's pace, jittered, the arms' clocks offset: `compare` pairs their windows), or blocks of
    freshly started servers (the warm-up soaked, then dropped)."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(reps):
        fresh = printed.kind not in ("one run", "side by side")
        a, b = simulate_pair(process, rng, printed.blocks, printed.warmup + printed.length,
                             rate, rate * ratio, fresh)  # fmt: skip
        a, b = [s[printed.warmup :] for s in a], [s[printed.warmup :] for s in b]
        if printed.kind == "side by side":
            arms = [_timed(arm[0], rng) for arm in (a, b)]
            hits += decide(arms[0], arms[1]).verdict == DIFFER
            continue
        hits += (
            compare_outcomes(a[0], b[0]).differ
            if printed.blocks == 1
            else compare_outcomes(a, b).differ
        )
    share = hits / reps
    return share, math.sqrt(max(share * (1 - share), 1 / reps) / reps)


def _timed(sequence: np.ndarray, rng: np.random.Generator) -> Outcomes:
    """One arm of a run whose targets ran side by side: the i-th request to end ends near i
    seconds (the arm's own offset, a jitter of a quarter second), as a soak of two equally fast
    targets stores them (in the order they ended, with their completion times)."""
    jittered = np.arange(len(sequence)) + rng.random() + rng.normal(0.0, 0.25, len(sequence))
    return Outcomes(int(sequence.sum()), len(sequence), sequence, times=np.sort(jittered))
