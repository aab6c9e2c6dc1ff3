"""What `soakgate plan` prints: the designs it weighs (one run per arm, replicate blocks from a
fresh start or after a warm-up, looks), each with the power the verdict soakgate applies
delivers and the question it answers, the one it recommends, and the written
pre-registration."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from soakgate.errors import UsageError
from soakgate.stats.options import Option, Question, assumed_options, pilot_options
from soakgate.stats.pilot import CONFIDENCE, PilotEstimate, pilot_estimate
from soakgate.stats.plan import make_plan, write_plan
from soakgate.stats.power import MIN_PLAN_BLOCKS, check_design
from soakgate.stats.verdict import CONFIGURATIONS

__all__ = ["PilotEstimate", "PlanRequest", "pilot_estimate", "plan_summary"]


@dataclass(frozen=True, slots=True)
class PlanRequest:
    """Everything `soakgate plan` was asked."""

    baseline_rate: float | None
    ratio: float
    alpha: float = 0.05
    power: float = 0.8
    design_effect: float | None = None
    n: int | None = None
    write: str | Path | None = None
    arms: Sequence[str] | None = None
    hypothesis: str | None = None
    test: str = "auto"
    looks: int | None = None
    blocks: int | None = None
    requests_per_block: int | None = None
    matched_targets: bool = False
    pilot: PilotEstimate | None = None
    side_by_side: bool = False
    """Also size both arms soaked side by side in one run (judged window by window)."""


def _resolved(request: PlanRequest) -> tuple[float, float]:
    """(baseline rate, design effect), taking what the pilot measured where not given."""
    pilot = request.pilot
    if pilot is not None and request.design_effect is not None:
        raise UsageError("give --design-effect or --pilot, not both")
    design_effect = request.design_effect
    if design_effect is None:
        design_effect = pilot.long_range.design_effect if pilot else 1.0
    rate = request.baseline_rate
    if rate is None:
        if pilot is None:
            raise UsageError("give --baseline-rate (or --pilot DB to take it from a soak)")
        if pilot.events == 0:
            raise UsageError(f"pilot {pilot.source} has no collapses: give --baseline-rate")
        rate = pilot.rate
    return rate, design_effect


def _check(request: PlanRequest) -> None:
    if request.n is not None and request.n <= 0:
        raise UsageError(f"--n must be positive, got {request.n}")
    if request.blocks is not None and request.blocks < MIN_PLAN_BLOCKS:
        raise UsageError(f"a block design needs at least {MIN_PLAN_BLOCKS} blocks per arm")
    if request.looks is not None and not 1 <= request.looks <= 20:
        raise UsageError(f"looks must be between 1 and 20, got {request.looks}")
    if request.write is not None and (not request.arms or not request.hypothesis):
        raise UsageError("--write needs --arms A B and --hypothesis TEXT")
    block_asked = request.blocks is not None or request.requests_per_block is not None
    if request.looks is not None and block_asked:
        raise UsageError("a sequential plan looks at one run per arm; drop --blocks")
    if request.pilot is not None and request.write is not None and not block_asked:
        raise UsageError("a plan sized from a pilot is a block design: add --blocks K")


def plan_summary(request: PlanRequest) -> str:
    """The text `soakgate plan` prints; writes the plan file when asked."""
    from soakgate.stats.models import assumed_model

    rate, design_effect = _resolved(request)
    check_design(rate, request.ratio, request.alpha, request.power)
    _check(request)
    question = Question(rate, request.ratio, request.alpha, request.power)
    shape = (request.n, request.blocks, request.requests_per_block, request.looks)
    pilot = request.pilot
    lines = [_header(question, request.n)]
    if pilot is not None:
        lines += [pilot.line(), pilot.uptime.line(), _vouched(pilot)]
        options = pilot_options(pilot, question, *shape, request.side_by_side)
    else:
        model = assumed_model(rate, design_effect)
        lines.append(f"assumed: {model.describe()} (--pilot DB: sized from an earlier soak)")
        options = assumed_options(model, question, *shape, request.side_by_side)
    lines.append("power: the verdict soakgate applies, simulated (± Monte Carlo standard error)")
    lines += [f"  {option.line()}" for option in options]
    if not request.side_by_side and pilot is None:  # a pilot sizes blocks only
        lines.append(
            "  (arms soaked side by side in one run are judged window by window where they can "
            "be: --side-by-side sizes that design too)"
        )
    chosen = _recommended(options, request.n is not None)
    lines.append(_recommendation(chosen, request))
    note = reach_note(options, question)
    if note:
        lines.append(note)
    if request.write is not None:
        lines.append(_write(request, rate, design_effect, options))
    return "\n".join(lines)


def _header(question: Question, n: int | None) -> str:
    q = question
    rates = f"{q.rate:g} vs {q.rate * q.ratio:g} (ratio {q.ratio:g}), two-sided alpha {q.alpha:g}"
    return f"{rates}, {n:,} requests per arm" if n is not None else f"{rates}, power {q.power:.0%}"


def _vouched(pilot: PilotEstimate) -> str:
    return (
        f"assumed: what the pilot vouches for, {CONFIDENCE:.0%} sure of each: every block fails "
        "at least at the pilot's lower bound for the uptimes it counts, and its count varies at "
        "most by the pilot's upper bound for its length (past the pilot's windows, growing with "
        "the square root of the length while the design effect was still rising)"
    )


def _recommended(options: list[Option], budget: bool) -> Option | None:
    """The configuration-level design: the most power for a budget, else the fewest requests
    among those reaching the power; after a warm-up where the pilot's rate rises with uptime."""
    usable = [o for o in options if o.scope == CONFIGURATIONS and o.sized is not None]
    if budget:
        return max(usable, key=lambda o: o.power, default=None)
    reached = [o for o in usable if o.reached]
    steady = [o for o in reached if "after a warm-up" in o.label]
    return min(steady or reached or usable, key=lambda o: o.cost, default=None)


def _recommendation(chosen: Option | None, request: PlanRequest) -> str:
    if chosen is None or chosen.sized is None:
        return (
            "recommended: none of these reaches a verdict on the configurations; soak a longer "
            "pilot, or plan for a larger ratio"
        )
    design = chosen.sized.design
    count = getattr(design, "blocks", 0)
    add = "" if request.blocks is not None else f" (add --blocks {count} to write it into a plan)"
    return (
        f"recommended: {chosen.label}, servers restarted between blocks: it answers for "
        f"{chosen.answers}{add}"
    )


def _write(request: PlanRequest, rate: float, design_effect: float, options: list[Option]) -> str:
    """Write the design the flags name, with the sizes just simulated."""
    from soakgate.stats.delivered import Blocks, OneRun, SequentialRun, SideBySide

    chosen = _recommended(options, request.n is not None)
    named = {type(o.sized.design): o.sized.design for o in options if o.sized is not None}
    block_asked = request.blocks is not None or request.requests_per_block is not None
    sizes: dict[str, int | None] = {}
    blocks = length = None
    if block_asked:
        design = chosen.sized.design if chosen and chosen.sized else None
        if not isinstance(design, Blocks):
            raise UsageError("no block design reaches a verdict here: nothing to write")
        blocks, length = design.blocks, design.length
        sizes["warmup_requests"] = design.warmup or None
    elif request.looks is not None:
        sequential = named[SequentialRun]
        assert isinstance(sequential, SequentialRun)
        sizes["n_max_per_arm"] = sequential.rule.n_max_per_arm
    else:  # both arms in one run side by side where that design was sized (`--side-by-side`)
        one = named[SideBySide] if request.side_by_side else named[OneRun]
        assert isinstance(one, OneRun | SideBySide)
        sizes["n_per_arm"] = one.n
    plan = make_plan(
        hypothesis=request.hypothesis or "", arms=request.arms or ("A", "B"),
        baseline_rate=rate, ratio=request.ratio, alpha=request.alpha, power=request.power,
        design_effect=design_effect, looks=request.looks, test=request.test, blocks=blocks,
        requests_per_block=length, matched_targets=request.matched_targets, **sizes,
    )  # fmt: skip
    assert request.write is not None
    return f"wrote {request.write} (sha256 {write_plan(plan, request.write)})"


FAST_SOAK_PER_S = 1000.0
"""Generations per second per arm of a fast soak (several GPUs): the yardstick of `reach_note`."""
REACHABLE_S = 7 * 86400.0
"""A week of such soaking: past it, a sample size is a sign of a mistyped rate or ratio."""


def reach_note(options: list[Option], question: Question) -> str | None:
    """A sanity note when the cheapest design that reaches the power (or, when none does, the
    largest tried) would take more than a week even at 1,000 generations/s."""
    sized = [o for o in options if o.sized is not None]
    if not sized:
        return None
    reached = [o for o in sized if o.reached]
    cheapest = min(reached or sized, key=lambda o: o.cost)
    days = cheapest.cost / FAST_SOAK_PER_S / 86400.0
    if days * 86400.0 <= REACHABLE_S:
        return None
    span = f"{days / 365.25:,.3g} years" if days > 365.25 else f"{days:,.0f} days"
    what = "is out of reach" if reached else "still falls short of the power, and is out of reach"
    return (
        f"note: {cheapest.cost:.3g} generations per arm {what}: {span} per arm even at "
        f"{FAST_SOAK_PER_S:,.0f} generations/s; check --baseline-rate {question.rate:g} and "
        f"--ratio {question.ratio:g} (a ratio this close to 1, or a rate this small, cannot be "
        "detected by soaking)"
    )
