"""The designs `plan` weighs against each other, each with the power its verdict delivers and
the question it answers.

- one run per arm (and its sequential form with looks): cheap to set up, but with one server
  instance per arm it answers for *these two instances*, never for the configurations; both arms
  side by side in one run (`--side-by-side`) answer the same question, judged as `compare`
  judges the targets of one run: window by window where the pairing's checks allow
  (`stats.paired`), a drift both arms share then cancelling, else as one run per arm;
- replicate blocks, every block on a freshly started server: answers for the configurations —
  for *a fresh server over its first m requests*, or, after a warm-up soaked and not counted,
  for *a server after w requests*. Where failures need state that builds up with uptime, those
  are different questions, and a plan says which one each design answers.

Without a pilot the process is the one the user states (`models.assumed_model`); with a pilot,
only blocks are sized, from what the pilot vouches for (`stats.pilot`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from soakgate.stats.delivered import (
    Blocks,
    Design,
    OneRun,
    SequentialRun,
    SideBySide,
    delivered,
    soaked,
)
from soakgate.stats.models import FailureModel
from soakgate.stats.pilot import PilotEstimate
from soakgate.stats.sequential import SequentialRule
from soakgate.stats.sizing import (
    VERIFY_REPS,
    Sized,
    size_blocks,
    size_one_run,
    size_sequential,
    solve_length,
)
from soakgate.stats.verdict import CONFIGURATIONS, INSTANCES

SIDE_BY_SIDE = "side by side in one run"
PAIRED_ANSWER = "soaked at the same time (window by window where the pairing's checks allow)"
BLOCK_COUNTS = (8, 16, 32, 64)  # per arm, tried in turn when the user fixes none, until more
# blocks stop saving requests (the fewest requests wins)
BUDGET_BLOCKS = (4, 8, 16)  # per arm, tried for a given budget (most power wins)


@dataclass(frozen=True, slots=True)
class Question:
    """What the user wants to know: the ratio to detect, at which level and power."""

    rate: float
    ratio: float
    alpha: float
    power: float


@dataclass(frozen=True, slots=True)
class Option:
    """One design plan can recommend."""

    label: str
    """Short name: `one run per arm`, `replicate blocks`, ..."""
    scope: str
    """`instances` or `configurations` (as `Verdict.scope`)."""
    answers: str
    """The question its verdict answers, in words."""
    sized: Sized | None
    """The design and its delivered power (None: not sized, see `note`)."""
    note: str = ""
    """Why it was not sized."""
    sized_for_power: bool = True
    """Sized to reach the power asked (False: judged at a given budget)."""

    @property
    def power(self) -> float:
        """Its delivered power (0 when not sized)."""
        return self.sized.delivered.power if self.sized else 0.0

    @property
    def reached(self) -> bool:
        """Sized, and delivering the power asked."""
        return self.sized is not None and self.sized.reached

    @property
    def cost(self) -> float:
        """Requests soaked per arm, warm-ups included (inf when not sized)."""
        return soaked(self.sized.design) if self.sized else math.inf

    def line(self) -> str:
        """One line: the design, what it soaks, its power and the question it answers."""
        if self.sized is None:
            return f"{self.label}: {self.note}"
        design, got = self.sized.design, self.sized.delivered
        if isinstance(design, OneRun | SideBySide):
            shape = f"{design.n:,} requests per arm"
        elif isinstance(design, Blocks):
            warm = f" after a warm-up of {design.warmup:,}" if design.warmup else ""
            shape = (
                f"{design.blocks} per arm of {design.length:,} counted requests{warm} "
                f"({soaked(design):,} soaked per arm)"
            )
        else:
            rule = design.rule
            shape = (
                f"{rule.looks} looks up to {rule.n_max_per_arm:,} per arm (mean "
                f"{got.mean_n:,.0f} at the verdict)"
            )
        missed = self.sized_for_power and not self.sized.reached
        short = " (short of the power asked)" if missed else ""
        return f"{self.label}: {shape}, power {got.line()}{short}; answers for {self.answers}"


def _blocks_answer(warmup: int, length: int, uptime_matters: bool) -> str:
    if not uptime_matters:
        return "the configurations (a freshly started server per block)"
    if warmup:
        return f"the configurations, on a server after {warmup:,} requests (the next {length:,})"
    return f"the configurations, on a fresh server over its first {length:,} requests"


def assumed_options(
    model: FailureModel, question: Question, n: int | None, blocks: int | None,
    length: int | None, looks: int | None, side_by_side: bool = False,
) -> list[Option]:  # fmt: skip
    """One run, replicate blocks, (with `looks`) looks and (with `side_by_side`) both arms in
    one run judged window by window, under a stated process: sized for the power, or judged
    at `n` requests per arm."""
    q = question
    instances = "these two server instances"
    options = []
    if n is None:
        one = size_one_run(model, q.rate, q.ratio, q.alpha, q.power)
        block = size_blocks(model, q.rate, q.ratio, q.alpha, q.power, blocks, length)
    else:
        one = _at(model, OneRun(n), q)
        counts = (blocks,) if blocks else BUDGET_BLOCKS
        tried = [_at(model, Blocks(k, max(1, n // k)), q) for k in counts if n // k >= 1]
        block = max(tried, key=lambda s: s.delivered.power)
    options.append(Option("one run per arm", INSTANCES, instances, one))
    if side_by_side:
        paired = (
            size_one_run(model, q.rate, q.ratio, q.alpha, q.power, side_by_side=True)
            if n is None
            else _at(model, SideBySide(n), q)
        )
        options.append(Option(SIDE_BY_SIDE, INSTANCES, f"{instances}, {PAIRED_ANSWER}", paired))
    options.append(Option("replicate blocks", CONFIGURATIONS, _blocks_answer(0, 0, False), block))
    if looks is not None:
        if n is None:
            seq = size_sequential(model, q.rate, q.ratio, q.alpha, q.power, looks)
        else:
            seq = _at(model, SequentialRun(SequentialRule(looks, n)), q)
        options.append(Option(f"sequential, {looks} looks", INSTANCES, instances, seq))
    return options


def _at(model: FailureModel, design: Design, q: Question) -> Sized:
    got = delivered(model, design, q.ratio, q.alpha, VERIFY_REPS[type(design)])
    return Sized(design, got, got.power >= q.power - got.standard_error)


def pilot_options(
    pilot: PilotEstimate, question: Question, n: int | None, blocks: int | None,
    length: int | None, looks: int | None, side_by_side: bool = False,
) -> list[Option]:  # fmt: skip
    """Replicate blocks from what the pilot vouches for, from a fresh start and after the
    warm-up its uptime law calls for; one run per arm and looks are not sized from a pilot."""
    curve = pilot.long_range.curve
    reach = curve[-1].window if curve else pilot.span
    why = (
        "not sized from a pilot: its verdict depends on correlation over stretches a tenth of "
        f"the run long, and this pilot measures windows of up to {reach:,} requests"
    )
    options = [Option("one run per arm", INSTANCES, "these two server instances", None, why)]
    if side_by_side:
        options.append(Option(SIDE_BY_SIDE, INSTANCES, "", None, why))
    if looks is not None:
        options.append(Option(f"sequential, {looks} looks", INSTANCES, "", None, why))
    warmups = [0]
    if math.isfinite(pilot.uptime.warmup):
        warmups.append(math.ceil(pilot.uptime.warmup / 100.0) * 100)
    uptime_matters = len(warmups) > 1 or not pilot.uptime.steady_within
    for warmup in warmups:
        label = "blocks after a warm-up" if warmup else "blocks from a fresh start"
        sized = _pilot_blocks(pilot, question, n, blocks, length, warmup)
        counted = sized.design.length if sized and isinstance(sized.design, Blocks) else 0
        answer = _blocks_answer(warmup, counted, uptime_matters)
        note = "" if sized else f"the pilot vouches for no such blocks ({_reach(pilot)})"
        options.append(Option(label, CONFIGURATIONS, answer, sized, note, n is None))
    return options


def _reach(pilot: PilotEstimate) -> str:
    return (
        f"its runs of up to {pilot.span:,} requests, rate not levelled off in them"
        if not pilot.uptime.steady_within
        else f"its runs of up to {pilot.span:,} requests"
    )


def _pilot_blocks(
    pilot: PilotEstimate, q: Question, n: int | None, blocks: int | None, length: int | None,
    warmup: int,
) -> Sized | None:  # fmt: skip
    counts: Sequence[int] = (blocks,) if blocks else (BUDGET_BLOCKS if n else BLOCK_COUNTS)
    found: list[Sized] = []
    for count in counts:
        if n is not None or length is not None:
            # a budget of n per arm holds the warm-ups too: every design is weighed at the same
            # requests soaked (a warm-up that leaves no counted request is no design for it)
            m = length or (n or 0) // count - warmup
            if m < 1:
                continue
            model = pilot.blocks(warmup, m)
            if model is not None:
                found.append(_at(model, Blocks(count, m, warmup), q))
            continue
        guess = max(1, int(pilot_guess(pilot, q) / count))

        def make(m: int, count: int = count) -> tuple[FailureModel, Blocks] | None:
            model = pilot.blocks(warmup, m)
            return None if model is None else (model, Blocks(count, m, warmup))

        ceiling = pilot.longest(warmup)
        sized = solve_length(make, q.ratio, q.alpha, q.power, guess, 1, ceiling)
        if sized is None:
            continue
        cheaper = [s for s in found if s.reached and soaked(s.design) <= soaked(sized.design)]
        found.append(sized)
        if sized.reached and cheaper:
            break  # more blocks stopped saving requests
    if not found:
        return None
    if n is not None:
        return max(found, key=lambda s: s.delivered.power)
    reached = [s for s in found if s.reached] or found
    return min(reached, key=lambda s: soaked(s.design))


def pilot_guess(pilot: PilotEstimate, q: Question) -> float:
    """A first guess at counted requests per arm (the z test's n times the design effect)."""
    from soakgate.stats.power import n_per_arm

    rate = max(pilot.rate, 1e-9)
    if not 0.0 < rate * q.ratio < 1.0:
        return float(pilot.span)
    return n_per_arm(rate, q.ratio, q.alpha, q.power, pilot.long_range.design_effect)
