"""The power a design delivers: the verdict soakgate will apply, simulated under a failure model.

A design is what `plan` can recommend: one run per arm (`OneRun`), both arms in one run side by
side (`SideBySide`: judged window by window where the pairing's checks allow), replicate blocks
of freshly started servers (`Blocks`), or a sequential run with looks (`SequentialRun`); each may
soak a warm-up that is not counted. `delivered` draws `reps` pairs of arms from a model
(`stats.models`), B's hazards times the ratio, and counts how often the verdict is DIFFER: the
one-run and block verdicts are `verdict.decide` itself (on segment counts: `stats.segments`),
a sequential run's looks are judged by the same `decision.sequential_look` the soak's monitor
calls, with the monitor's seeds. Seeded: the same question gives the same figure.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from soakgate.stats.models import FailureModel
from soakgate.stats.segments import (
    SEGMENTS,
    blocks_verdict,
    one_run_verdict,
    side_by_side_verdict,
)
from soakgate.stats.sequential import SequentialRule, sequential_look
from soakgate.stats.verdict import DIFFER, INDETERMINATE

SEED = 26  # every plan's Monte Carlo starts here: the same question prints the same figures


@dataclass(frozen=True, slots=True)
class OneRun:
    """One run per arm of `n` counted requests, after `warmup` soaked but not counted."""

    n: int
    warmup: int = 0


@dataclass(frozen=True, slots=True)
class SideBySide:
    """Both arms soaked at the same time, `n` counted requests each (the targets of one run),
    after `warmup`: `compare` pairs their windows of wall-clock time (`stats.paired`)."""

    n: int
    warmup: int = 0


@dataclass(frozen=True, slots=True)
class Blocks:
    """`blocks` freshly started servers per arm, each soaked `warmup` + `length` requests of
    which the last `length` are counted."""

    blocks: int
    length: int
    warmup: int = 0


@dataclass(frozen=True, slots=True)
class SequentialRun:
    """One run per arm judged at `rule.looks` equally spaced looks up to `rule.n_max_per_arm`."""

    rule: SequentialRule
    warmup: int = 0


Design = OneRun | SideBySide | Blocks | SequentialRun


@dataclass(frozen=True, slots=True)
class Delivered:
    """What a design delivers under a model, by simulation."""

    power: float
    """Share of simulated pairs the verdict calls DIFFER."""
    standard_error: float
    """Monte Carlo standard error of `power`."""
    indeterminate: float
    """Share of simulated pairs the verdict calls INDETERMINATE."""
    reps: int
    """Simulated pairs."""
    mean_n: float
    """Mean counted requests per arm at the verdict (less than planned only for looks)."""

    def line(self) -> str:
        """`80.4% ± 1.3` style, with the indeterminate share when there is one."""
        text = f"{self.power:.1%} ± {self.standard_error:.1%}"
        if self.indeterminate >= 0.005:
            text += f" ({self.indeterminate:.0%} indeterminate)"
        return text


def counted(design: Design) -> int:
    """Counted requests per arm at the end of the design (n max for looks)."""
    if isinstance(design, OneRun | SideBySide):
        return design.n
    if isinstance(design, Blocks):
        return design.blocks * design.length
    return design.rule.n_max_per_arm


def soaked(design: Design) -> int:
    """Requests per arm the design soaks, warm-ups included (n max for looks)."""
    if isinstance(design, Blocks):
        return design.blocks * (design.length + design.warmup)
    return counted(design) + design.warmup


def _one_run(
    model: FailureModel, design: OneRun | SideBySide, ratio: float, alpha: float, reps: int,
    seed: int,
) -> tuple[list[str], list[int]]:  # fmt: skip
    rng = np.random.default_rng(seed)
    a = model.counts(rng, reps, design.warmup, design.n, SEGMENTS, 1.0)
    b = model.counts(rng, reps, design.warmup, design.n, SEGMENTS, ratio)
    judge = side_by_side_verdict if isinstance(design, SideBySide) else one_run_verdict
    words = [judge(a[i], b[i], alpha).verdict for i in range(reps)]
    return words, [design.n] * reps


def _blocks(
    model: FailureModel, design: Blocks, ratio: float, alpha: float, reps: int, seed: int
) -> tuple[list[str], list[int]]:
    rng = np.random.default_rng(seed)
    shape = (reps, design.blocks)
    a = model.counts(rng, reps * design.blocks, design.warmup, design.length, 1, 1.0)
    b = model.counts(rng, reps * design.blocks, design.warmup, design.length, 1, ratio)
    a, b = a.reshape(shape), b.reshape(shape)
    words = [blocks_verdict(a[i], b[i], design.length, alpha).verdict for i in range(reps)]
    return words, [counted(design)] * reps


def _sequential(
    model: FailureModel, design: SequentialRun, ratio: float, alpha: float, reps: int, seed: int
) -> tuple[list[str], list[int]]:
    from soakgate.stats.segments import compact_sequence, segment_width
    from soakgate.stats.verdict import Outcomes, decide

    rule = design.rule
    rng = np.random.default_rng(seed)
    total = rule.looks * SEGMENTS
    a = model.counts(rng, reps, design.warmup, rule.n_max_per_arm, total, 1.0)
    b = model.counts(rng, reps, design.warmup, rule.n_max_per_arm, total, ratio)
    words, used = [], []
    for i in range(reps):
        width = segment_width(a[i], b[i])
        fractions: list[float] = []
        for look in range(1, rule.looks + 1):
            parts = [arm[i, : look * SEGMENTS] for arm in (a, b)]
            runs = [compact_sequence(part, width) for part in parts]
            outcomes = [Outcomes(int(p.sum()), len(r), r) for p, r in zip(parts, runs, strict=True)]
            # the monitor judges look k with seed k - 1 (`stats.decision.judge_look`)
            verdict = decide(outcomes[0], outcomes[1], alpha, len(fractions))
            n_now = math.ceil(look / rule.looks * rule.n_max_per_arm - 1e-9)
            word, _ = sequential_look(rule, alpha, verdict.result, verdict, n_now, fractions)
            fractions.append(min(n_now / rule.n_max_per_arm, 1.0))
            if word != "continue":
                break
        words.append({"differ": DIFFER, "indeterminate": INDETERMINATE}.get(word, word))
        used.append(n_now)
    return words, used


@functools.lru_cache(maxsize=512)
def delivered(
    model: FailureModel,
    design: Design,
    ratio: float,
    alpha: float = 0.05,
    reps: int = 1000,
    seed: int = SEED,
) -> Delivered:
    """Power of the verdict soakgate applies to `design`, when failures follow `model` and arm
    B's hazards are `ratio` times arm A's (ratio 1: the false-alarm rate)."""
    if isinstance(design, OneRun | SideBySide):
        words, used = _one_run(model, design, ratio, alpha, reps, seed)
    elif isinstance(design, Blocks):
        words, used = _blocks(model, design, ratio, alpha, reps, seed)
    else:
        words, used = _sequential(model, design, ratio, alpha, reps, seed)
    power = sum(word == DIFFER for word in words) / reps
    unresolved = sum(word == INDETERMINATE for word in words) / reps
    error = math.sqrt(max(power * (1.0 - power), 1.0 / reps) / reps)
    return Delivered(power, error, unresolved, reps, float(np.mean(used)))
