"""Apply a pre-registered plan's decision rule to a comparison, listing every deviation."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from soakgate.errors import PlanError
from soakgate.stats.compare import Arm, Comparison, compare_arms
from soakgate.stats.plan import Decision, Plan, plan_sha256
from soakgate.stats.sequential import SequentialRule, sequential_look
from soakgate.stats.verdict import INDETERMINATE


def plan_deviations(plan: Plan, comparison: Comparison) -> list[str]:
    """Each way a comparison departs from the plan (arms, alpha, n, blocks, test)."""
    found = []
    labels = tuple(label.partition("@")[0] for label in comparison.labels)  # label@target
    if labels != plan.arms:
        found.append(f"arms {comparison.labels} are not the planned {plan.arms}")
    if comparison.alpha != plan.alpha:
        found.append(f"comparison alpha {comparison.alpha} differs; the plan's {plan.alpha} used")
    if plan.sequential is None and plan.n_per_arm is not None:
        for summary, label in zip((comparison.a, comparison.b), comparison.labels, strict=True):
            if summary.n < plan.n_per_arm:
                found.append(f"arm {label}: n={summary.n} is below the planned {plan.n_per_arm}")
    blocks = min(comparison.verdict.blocks)
    if plan.blocks is not None and blocks < plan.blocks:
        found.append(
            f"{comparison.verdict.design}: {blocks} replicate blocks per arm, the plan asks "
            f"for {plan.blocks}"
        )
    if plan.test != "auto" and comparison.verdict_test != plan.test:
        found.append(
            f"plan's test {plan.test} used; without the plan the tool would use "
            f"{comparison.verdict_test} ({comparison.reason})"
        )
    return found


def _planned_test(plan: Plan, comparison: Comparison) -> str:
    name = comparison.verdict_test if plan.test == "auto" else plan.test
    if name not in comparison.tests:
        raise PlanError(f"the plan's test {name} cannot be computed from these data")
    return name


def apply_decision(
    plan: Plan, comparison: Comparison, previous_fractions: Sequence[float] = ()
) -> Decision:
    """The verdict by the plan's rule; sequential plans also take earlier looks' fractions.

    With the tool's own test (`auto`), an indeterminate verdict (one run that cannot resolve its
    dependence) is never turned into `differ`: the plan's verdict is `indeterminate` too."""
    deviations = plan_deviations(plan, comparison)
    name = _planned_test(plan, comparison)
    result = comparison.tests[name]
    digest = plan_sha256(plan)
    unresolved = plan.test == "auto" and comparison.verdict.verdict == INDETERMINATE
    if plan.sequential is None:
        differ = result.p_value < plan.alpha
        verdict = "differ" if differ else "no_difference"
        sign = "<" if differ else ">="
        reason = f"{name} p={result.p_value:.4g} {sign} alpha {plan.alpha}"
        if unresolved:
            verdict, reason = "indeterminate", f"{reason}, but {comparison.reason}"
        return Decision(verdict, name, result.p_value, tuple(deviations), reason, digest)
    return _sequential(plan, comparison, previous_fractions, deviations, digest)


def _sequential(
    plan: Plan,
    comparison: Comparison,
    previous: Sequence[float],
    deviations: list[str],
    digest: str,
) -> Decision:
    assert plan.sequential is not None
    rule = plan.sequential
    # The boundary is judged on the verdict's own statistic, with its degrees of freedom.
    name = comparison.verdict_test if plan.test == "auto" else _planned_test(plan, comparison)
    if name == "poisson_exact":
        name = "pooled_z"
        deviations.append("no time-ordered sequence: pooled z used instead of a robust t")
    n_now = min(comparison.a.n, comparison.b.n)
    if n_now > rule.n_max_per_arm:
        deviations.append(f"n={n_now} per arm exceeds the planned n max {rule.n_max_per_arm}")
    if len(previous) + 1 > rule.looks:
        deviations.append(f"look {len(previous) + 1} exceeds the planned {rule.looks} looks")
    result = comparison.tests[name]
    own = name == comparison.verdict_test
    verdict, reason = sequential_look(
        rule, plan.alpha, result, own and comparison.verdict, n_now, previous
    )
    return Decision(verdict, name, result.p_value, tuple(deviations), reason, digest)


def look_due(rule: SequentialRule, look: int) -> int:
    """Generations per arm at which the 1-based `look` of the rule is judged."""
    return math.ceil(look / rule.looks * rule.n_max_per_arm - 1e-9)


def judge_look(
    plan: Plan, seq_a: npt.NDArray[np.bool_], seq_b: npt.NDArray[np.bool_], earlier: list[float]
) -> tuple[Decision, Comparison]:
    """One look of a sequential plan on both arms' flags so far, in time order: the verdict's
    own statistic against the boundary, with the earlier looks' information fractions. The
    soak's monitor, `compare --plan` (through `replay_looks`) and the plan's Monte Carlo all
    judge a look here, so that one look of one set of rows has one verdict. The descriptive
    clustering tests are for reports, not looks."""
    arm_a, arm_b = (Arm.from_sequence(plan.arms[0], seq_a), Arm.from_sequence(plan.arms[1], seq_b))
    comparison = compare_arms(arm_a, arm_b, alpha=plan.alpha, gap_permutations=0, seed=len(earlier))
    return apply_decision(plan, comparison, earlier), comparison


@dataclass(frozen=True, slots=True)
class Replay:
    """A sequential plan applied to stored rows look by look, as the soak's monitor did."""

    decision: Decision
    """The first look that stopped, else the last look the rows reached."""
    comparison: Comparison
    """The arms at that look (its first `n_per_arm` clean generations each)."""
    look: int
    """1-based index of that look."""
    n_per_arm: int
    """Generations per arm the look judged."""
    verdicts: tuple[str, ...]
    """Each look's verdict, in order (all `continue` but perhaps the last)."""


def replay_looks(
    plan: Plan, seq_a: npt.NDArray[np.bool_], seq_b: npt.NDArray[np.bool_]
) -> Replay | None:
    """Walk a sequential plan's scheduled looks over two arms' time-ordered flags and stop at
    the first that decides: the plan's verdict on these rows whether or not anyone looked while
    they were collected. Rows past the deciding look (requests in flight when it stopped the
    soak) are not part of it. None when the rows reach no look."""
    rule = plan.sequential
    if rule is None:
        raise PlanError("looks are replayed for a sequential plan only")
    fractions: list[float] = []
    verdicts: list[str] = []
    found: Replay | None = None
    for look in range(1, rule.looks + 1):
        n = look_due(rule, look)
        if min(len(seq_a), len(seq_b)) < n:
            break
        decision, comparison = judge_look(plan, seq_a[:n], seq_b[:n], fractions)
        fractions.append(min(n / rule.n_max_per_arm, 1.0))
        verdicts.append(decision.verdict)
        found = Replay(decision, comparison, look, n, tuple(verdicts))
        if decision.verdict != "continue":
            break
    return found
