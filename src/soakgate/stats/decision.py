"""Apply a pre-registered plan's decision rule to a comparison, listing every deviation."""

from __future__ import annotations

from collections.abc import Sequence

from soakgate.errors import PlanError
from soakgate.stats.compare import Comparison
from soakgate.stats.plan import Decision, Plan, plan_sha256
from soakgate.stats.sequential import sequential_look
from soakgate.stats.verdict import INDETERMINATE


def _deviations(plan: Plan, comparison: Comparison) -> list[str]:
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
    deviations = _deviations(plan, comparison)
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
