"""What `soakgate plan` prints: n per arm, the replicate-block design it recommends, a pilot's
design effect, and the written pre-registration."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from soakgate.errors import UsageError
from soakgate.stats.dependence import LongRangeEstimate, long_range_design_effect
from soakgate.stats.plan import make_plan, write_plan
from soakgate.stats.power import block_design, check_design, n_per_arm

BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class PilotEstimate:
    """What an earlier soak says about the failure process a plan must allow for."""

    source: str
    """Where the pilot came from (database and label), for the printed line."""
    sequences: int
    """Time-ordered runs it pools (one per run and target)."""
    n: int
    """Clean generations in them."""
    events: int
    """Collapses in them."""
    long_range: LongRangeEstimate
    """Their variance-time curve and the design effect it implies."""

    @property
    def rate(self) -> float:
        """Collapse rate of the pilot."""
        return self.events / self.n if self.n else 0.0

    def line(self) -> str:
        """One line describing the estimate."""
        estimate = self.long_range
        rising = " (still rising at an eighth of the run: a lower bound)"
        bound = rising if estimate.still_rising else ""
        return (
            f"pilot {self.source}: {self.sequences} run(s), {self.events:,} / {self.n:,} collapsed "
            f"({self.rate:.4%}); long-range design effect {estimate.design_effect:.2f} at "
            f"windows of {estimate.window:,} requests{bound}"
        )


def pilot_estimate(source: str, sequences: Sequence[BoolArray]) -> PilotEstimate:
    """The pilot's rate and long-range design effect, pooled over its runs (never joined)."""
    usable = [s for s in sequences if len(s) > 0]
    if not usable:
        raise UsageError(f"pilot {source} holds no clean generations")
    n = sum(len(s) for s in usable)
    events = int(sum(int(s.sum()) for s in usable))
    return PilotEstimate(source, len(usable), n, events, long_range_design_effect(usable))


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


def plan_summary(request: PlanRequest) -> str:
    """The text `soakgate plan` prints; writes the plan file when asked."""
    rate, design_effect = _resolved(request)
    check_design(rate, request.ratio, request.alpha, request.power)
    lines = [request.pilot.line()] if request.pilot else []
    lines += _figures(rate, request.ratio, request.alpha, request.power, design_effect, request.n)
    block_asked = request.blocks is not None or request.requests_per_block is not None
    if request.n is None:
        lines.append(_blocks_line(request, rate, design_effect, block_asked))
    if request.write is not None and (not request.arms or not request.hypothesis):
        raise UsageError("--write needs --arms A B and --hypothesis TEXT")
    if request.looks is not None or request.write is not None or block_asked:
        plan = make_plan(
            hypothesis=request.hypothesis or "", arms=request.arms or ("A", "B"),
            baseline_rate=rate, ratio=request.ratio, alpha=request.alpha, power=request.power,
            design_effect=design_effect, looks=request.looks, test=request.test,
            blocks=request.blocks, requests_per_block=request.requests_per_block,
            matched_targets=request.matched_targets,
        )  # fmt: skip
        if plan.sequential:
            n_max = plan.sequential.n_max_per_arm
            lines.append(f"sequential, {request.looks} looks: n max per arm {n_max}")
        if request.write is not None:
            lines.append(f"wrote {request.write} (sha256 {write_plan(plan, request.write)})")
    return "\n".join(lines)


def _blocks_line(request: PlanRequest, rate: float, design_effect: float, asked: bool) -> str:
    try:
        blocks, per_block, got = block_design(
            rate, request.ratio, request.alpha, request.power, design_effect,
            request.blocks, request.requests_per_block,
        )  # fmt: skip
    except UsageError as exc:
        if asked:
            raise
        # a recommendation the figures cannot support is said, not a failure of the plan
        return f"recommended: replicate blocks; but {exc}"
    design = (
        f"{blocks} blocks per arm of {per_block:,} requests ({blocks * per_block:,} per arm), "
        f"power {got:.1%}, quasi-Poisson t on {2 * blocks - 2} df"
    )
    if asked:
        return f"replicate-block design: {design}"
    return (
        f"recommended: replicate blocks, servers restarted between blocks (valid whatever state "
        f"builds up inside a block): {design} (add --blocks {blocks} to write it into a plan)"
    )


def _figures(
    baseline_rate: float,
    ratio: float,
    alpha: float,
    power: float,
    design_effect: float,
    n: int | None,
) -> list[str]:
    """n per arm, or for a given n the achieved power and the smallest detectable ratio."""
    from soakgate.stats.power import achieved_power, detectable_ratio

    rates = f"{baseline_rate:g} vs {baseline_rate * ratio:g} (ratio {ratio:g})"
    setting = f"two-sided alpha {alpha:g}, design effect {design_effect:g}"
    if n is None:
        needed = n_per_arm(baseline_rate, ratio, alpha, power, design_effect)
        judged = one_run_n(baseline_rate, ratio, alpha, power, design_effect)
        return [
            f"{rates}, {setting}, power {power:.0%}",
            f"n per arm: {needed}",
            f"one run per arm as compare judges it (batch-means t on ~{ONE_RUN_DF:g} df; "
            f"{ONE_RUN_INDETERMINATE:.0%} of runs indeterminate): n per arm {judged}",
        ]
    if n <= 0:
        raise UsageError(f"--n must be positive, got {n}")
    got = achieved_power(baseline_rate, ratio, n, alpha, design_effect)
    smallest = detectable_ratio(baseline_rate, n, alpha, power, design_effect)
    return [
        f"{rates}, {setting}",
        f"power with n={n} per arm: {got:.1%}",
        f"smallest ratio detectable with {power:.0%} power: {smallest:.3g}",
    ]


ONE_RUN_DF = 22.0  # batch-means Welch t over 12 + 12 batches, about 2 x (12 - 1) df
ONE_RUN_INDETERMINATE = 0.05  # share of independent runs the long-range check calls unresolved


def one_run_n(
    baseline_rate: float, ratio: float, alpha: float, power: float, design_effect: float
) -> int:
    """n per arm for `power` as `compare` judges one run per arm: its t over 12 batches per
    arm (about 22 df) and the 5% of resolvable runs its correlation check still refuses."""
    from scipy.stats import nct
    from scipy.stats import t as student_t

    n_z = n_per_arm(baseline_rate, ratio, alpha, power, design_effect)
    from scipy.stats import norm

    critical = float(student_t.isf(alpha / 2.0, ONE_RUN_DF))
    # At n_z the z test's noncentrality is z_(alpha/2) + z_power; it grows with sqrt(n).
    at_n_z = float(norm.isf(alpha / 2.0) + norm.isf(1.0 - power))

    def achieved(n: float) -> float:
        shift = at_n_z * (n / n_z) ** 0.5
        tails = nct.sf(critical, ONE_RUN_DF, shift) + nct.cdf(-critical, ONE_RUN_DF, shift)
        return float(tails) * (1.0 - ONE_RUN_INDETERMINATE)

    low, high = float(n_z), float(n_z)
    while achieved(high) < power:
        low, high = high, high * 1.25
    for _ in range(40):
        middle = (low + high) / 2.0
        low, high = (middle, high) if achieved(middle) < power else (low, middle)
    return int(high + 0.999)
