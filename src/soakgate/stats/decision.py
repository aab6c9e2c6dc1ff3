"""Apply a pre-registered plan's decision rule to a comparison, listing every deviation."""

from __future__ import annotations

from collections.abc import Sequence

from soakgate.errors import PlanError
from soakgate.stats.compare import Comparison
from soakgate.stats.plan import Decision, Plan, plan_sha256


def _deviations(plan: Plan, comparison: Comparison) -> list[str]:
    found = []
    if tuple(comparison.labels) != plan.arms:
        found.append(f"arms {comparison.labels} are not the planned {plan.arms}")
    if comparison.alpha != plan.alpha:
        found.append(f"comparison alpha {comparison.alpha} differs; the plan's {plan.alpha} used")
    if plan.sequential is None and plan.n_per_arm is not None:
        for summary, label in zip((comparison.a, comparison.b), comparison.labels, strict=True):
            if summary.n < plan.n_per_arm:
                found.append(f"arm {label}: n={summary.n} is below the planned {plan.n_per_arm}")
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
    """The verdict by the plan's rule; sequential plans also take earlier looks' fractions."""
    deviations = _deviations(plan, comparison)
    name = _planned_test(plan, comparison)
    result = comparison.tests[name]
    digest = plan_sha256(plan)
    if plan.sequential is None:
        differ = result.p_value < plan.alpha
        verdict = "differ" if differ else "no_difference"
        sign = "<" if differ else ">="
        reason = f"{name} p={result.p_value:.4g} {sign} alpha {plan.alpha}"
        return Decision(verdict, name, result.p_value, tuple(deviations), reason, digest)
    return _sequential(plan, comparison, previous_fractions, deviations, digest)


def _sequential(
    plan: Plan,
    comparison: Comparison,
    previous: Sequence[float],
    deviations: list[str],
    digest: str,
) -> Decision:
    from soakgate.stats.sequential import sequential_decision

    assert plan.sequential is not None
    rule = plan.sequential
    # The plan's boundary is on the window-robust z; fall back to pooled z only as a deviation.
    name = "batch_means" if "batch_means" in comparison.tests else "pooled_z"
    if name != "batch_means":
        deviations.append("no time-ordered sequence: pooled z used instead of window-robust z")
    n_now = min(comparison.a.n, comparison.b.n)
    if n_now > rule.n_max_per_arm:
        deviations.append(f"n={n_now} per arm exceeds the planned n max {rule.n_max_per_arm}")
    fractions = [*previous, min(n_now / rule.n_max_per_arm, 1.0)]
    if len(fractions) > rule.looks:
        deviations.append(f"look {len(fractions)} exceeds the planned {rule.looks} looks")
    result = comparison.tests[name]
    z_values = [0.0] * (len(fractions) - 1) + [result.statistic]
    try:
        step = sequential_decision(fractions, z_values, plan.alpha, rule.futility_z)
    except ValueError as exc:
        raise PlanError(f"looks cannot be judged: {exc}") from None
    verdict = {"reject": "differ", "accept": "no_difference"}.get(step.action, "continue")
    return Decision(verdict, name, result.p_value, tuple(deviations), step.reason, digest)
