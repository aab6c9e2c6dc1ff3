"""Comparisons between arms of a database: `label` or `label@target`, checked for unit match.

An arm covering several targets (a data-parallel aggregate) is a different unit from one
target; comparing them produces false "improvements", so it is refused unless the user
asks for it, and then every output says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from soakgate.errors import UnitMismatchError, UsageError
from soakgate.report.gate import Gate, GateOptions
from soakgate.report.latency import LatencyComparison
from soakgate.report.model import Analysis, ClusteringOptions, Unit
from soakgate.stats.compare import AdjustedComparison, Arm, Comparison
from soakgate.stats.plan import Decision, Plan

MISMATCH_LABEL = "UNIT MISMATCH (allowed by --allow-unit-mismatch): not a like-for-like comparison"


@dataclass(frozen=True, slots=True)
class DifferentialComparison:
    """Divergence rates of two arms against their references, compared like collapse rates."""

    comparison: Comparison
    """Divergent / compared per arm, with the same tests as collapse rates."""
    uninformative: tuple[str, ...]
    """Why the verdict is no finding (an arm's reference baseline was not clean); empty if none."""


@dataclass(slots=True)
class ComparisonReport:
    """One comparison as shown: the statistics plus what is questionable about it."""

    comparison: Comparison
    """Rates, tests and the verdict's choice (A = reference)."""
    units: tuple[Unit, Unit]
    """The arms' units (or aggregates)."""
    mismatch: str | None = None
    """Why the units differ, when allowed anyway."""
    adjusted_p: float | None = None
    """Holm-adjusted p-value in a --baseline family."""
    adjusted_significant: bool | None = None
    """Rejected after Holm."""
    decision: Decision | None = None
    """The plan's verdict, with --plan."""
    notes: list[str] = field(default_factory=list)
    """Other lines worth printing (e.g. which ledger entry registered the plan)."""
    differential: DifferentialComparison | None = None
    """The arms' differential-check divergence rates compared, when both have compared rows."""
    gate: Gate | None = None
    """Every outcome of B judged against A's (report/gate.py), when attached."""
    latency: LatencyComparison | None = None
    """B's latencies against A's (report/latency.py), when attached."""


def rates_differ(report: ComparisonReport) -> bool:
    """The verdict test finds the rates differ: Holm-adjusted in a --baseline family, else as
    the comparison ran it."""
    if report.adjusted_significant is not None:
        return report.adjusted_significant
    return bool(report.comparison.significant)


def differs(report: ComparisonReport) -> bool:
    """The verdict that counts is DIFFER: the plan's decision under --plan, else the test's."""
    if report.decision is not None:
        return report.decision.verdict == "differ"
    return rates_differ(report)


def parse_arm(spec: str) -> tuple[str, str | None]:
    """`label` or `label@target` -> (label, target or None)."""
    label, sep, target = spec.partition("@")
    if not label or (sep and not target):
        raise UsageError(f"arm {spec!r} must be LABEL or LABEL@TARGET")
    return label, target or None


def resolve(analysis: Analysis, spec: str) -> Unit:
    """The unit (or aggregate) an arm spec names; a UsageError lists what exists."""
    label, target = parse_arm(spec)
    unit = analysis.unit(label, target)
    if unit is None or unit.rate is None:
        known = ", ".join(u.name for u in analysis.units if u.rate is not None) or "nothing"
        raise UsageError(f"no answered generations for {spec!r} in the database (have: {known})")
    return unit


def unit_mismatch(a: Unit, b: Unit, matched: bool = False) -> str | None:
    """Why two arms are not the same kind of unit (None when they are)."""
    if len(a.targets) != len(b.targets) and 1 in (len(a.targets), len(b.targets)):
        return (
            f"{a.name} covers {len(a.targets)} target(s) and {b.name} covers {len(b.targets)}: "
            "an aggregate over several targets against one target"
        )
    if matched and set(a.targets) != set(b.targets):
        return (
            f"the plan says matched targets, but {a.name} ran on {', '.join(a.targets)} and "
            f"{b.name} on {', '.join(b.targets)}"
        )
    return None


def design_notes(analysis: Analysis, units: Sequence[Unit], comparison: Comparison) -> list[str]:
    """Which design the verdict used, and for blocks whether the servers were restarted."""
    from soakgate.stats.verdict import BLOCKS

    verdict = comparison.verdict
    if verdict.design != BLOCKS:
        runs = [len(u.slices) for u in units]
        return [f"design: {verdict.design} ({runs[0]} + {runs[1]} run(s) of a target)"]
    campaign_runs = {r.run_id for r in analysis.runs if r.campaign}
    slices = [s for u in units for s in u.slices if s.n > 0]
    restarted = sum(s.run_id.partition("/")[0] in campaign_runs for s in slices)  # run/target
    blocks = f"{verdict.blocks[0]} + {verdict.blocks[1]} blocks (one per run and target)"
    if restarted == len(slices):
        return [f"design: replicate blocks, {blocks}: campaign blocks, servers restarted between"]
    return [
        f"design: replicate blocks, {blocks}; {len(slices) - restarted} of them are not campaign "
        "blocks: the test assumes the blocks share no state (separate servers, or servers "
        "restarted between runs)"
    ]


def to_arm(unit: Unit) -> Arm:
    """A stats arm: counts, the time-ordered sequence and per-run replicates."""
    replicates = tuple((s.collapses, s.n) for s in unit.slices if s.n > 0)
    return Arm(unit.name, unit.collapses, unit.n, unit.sequence, replicates, unit.clustering,
               unit.times)  # fmt: skip


def _checked(a: Unit, b: Unit, allow: bool, matched: bool = False) -> str | None:
    why = unit_mismatch(a, b, matched)
    if why and not allow:
        raise UnitMismatchError(f"refusing to compare: {why} (--allow-unit-mismatch to force)")
    return why


def compare_units(
    analysis: Analysis,
    spec_a: str,
    spec_b: str,
    options: ClusteringOptions | None = None,
    allow_unit_mismatch: bool = False,
    alpha: float = 0.05,
) -> ComparisonReport:
    """Compare arm B with reference arm A (`label` or `label@target`)."""
    from soakgate.stats.compare import compare_arms

    options = options or ClusteringOptions()
    a, b = resolve(analysis, spec_a), resolve(analysis, spec_b)
    if a is b:
        raise UsageError(f"{spec_a} and {spec_b} are the same arm")
    why = _checked(a, b, allow_unit_mismatch)
    comparison = compare_arms(
        to_arm(a), to_arm(b), alpha, window=options.window,
        gap_permutations=options.gap_permutations, hmm_replicates=options.hmm_replicates,
        seed=options.seed,
    )  # fmt: skip
    notes = design_notes(analysis, (a, b), comparison)
    return ComparisonReport(comparison, (a, b), why, notes=notes)


def compare_baseline(
    analysis: Analysis,
    baseline: str,
    options: ClusteringOptions | None = None,
    allow_unit_mismatch: bool = False,
    alpha: float = 0.05,
) -> list[ComparisonReport]:
    """Every other label against the baseline, Holm-adjusted (method='holm', explicitly)."""
    from soakgate.stats.compare import compare_with_baseline

    options = options or ClusteringOptions()
    base = resolve(analysis, baseline)
    others = [resolve(analysis, label) for label in analysis.labels if label != base.label]
    if not others:
        raise UsageError(f"no label other than {base.label} to compare with")
    whys = [_checked(base, other, allow_unit_mismatch) for other in others]
    adjusted: Sequence[AdjustedComparison] = compare_with_baseline(
        _clustered(to_arm(base), alpha, options), [to_arm(o) for o in others], alpha,
        options.window,
        options.gap_permutations, options.hmm_replicates, options.seed,
    )  # fmt: skip
    reports = []
    for item, other, why in zip(adjusted, others, whys, strict=True):
        notes = design_notes(analysis, (base, other), item.comparison)
        reports.append(ComparisonReport(
            item.comparison, (base, other), why, item.adjusted_p, item.significant, notes=notes
        ))  # fmt: skip
    return reports


def _clustered(arm: Arm, alpha: float, options: ClusteringOptions) -> Arm:
    """The arm with its clustering verdict computed once, as `compare_arms` computes it for arm
    A (a baseline is arm A of every comparison of its family)."""

    from soakgate.stats.clustering import clustering_verdict

    if arm.clustering is not None or arm.sequence is None:
        return arm
    result = clustering_verdict(
        arm.sequence, alpha, options.window, gap_permutations=options.gap_permutations,
        hmm_replicates=options.hmm_replicates, seed=options.seed,
    )  # fmt: skip
    return replace(arm, clustering=result)


def _first_generations(analysis: Analysis, units: Sequence[Unit]) -> dict[str, float]:
    """Run id -> start of its first generation, over every run the units draw on."""
    firsts: dict[str, float] = {}
    for unit in units:
        for target in unit.targets:
            for part in analysis.slices(unit.label, target):
                first = float(part.started.min())
                firsts[part.run_id] = min(firsts.get(part.run_id, first), first)
    return firsts


def _sequential_decision(
    analysis: Analysis, plan: Plan, units: tuple[Unit, Unit], comparison: Comparison
) -> tuple[Decision, list[str]]:
    """A sequential plan's verdict on stored rows: its scheduled looks replayed over each arm's
    answered generations in stored order (the order answers arrived), exactly as the soak's
    monitor judged them (one look of one set of rows has one verdict), with the full comparison's
    deviations; and notes on rows past the deciding look and on looks recorded during the soak
    that the replay contradicts."""
    from soakgate.stats.decision import apply_decision, plan_deviations, replay_looks

    rule = plan.sequential
    assert rule is not None
    a, b = units
    seq_a, seq_b = a.stored_sequence, b.stored_sequence  # the order the monitor judged
    if seq_a is None or seq_b is None:
        return apply_decision(plan, comparison), []
    replay = replay_looks(plan, seq_a, seq_b)
    if replay is None:
        full = apply_decision(plan, comparison)
        n_first = math.ceil(rule.n_max_per_arm / rule.looks - 1e-9)
        reason = (
            f"no look reached: look 1 of {rule.looks} is due at n={n_first:,} per arm, the arms "
            f"have {min(a.n, b.n):,}"
        )
        return replace(full, verdict="continue", reason=reason), []
    d = replay.decision
    deviations = plan_deviations(plan, comparison)  # of all the rows: arms, alpha, blocks, test
    deviations += [x for x in d.deviations if x not in deviations]
    reason = f"look {replay.look} of {rule.looks} at n={replay.n_per_arm:,} per arm: {d.reason}"
    notes = []
    past = min(a.n, b.n) - replay.n_per_arm
    if d.verdict != "continue" and past > 0:
        notes.append(
            f"the plan decided at look {replay.look} (n={replay.n_per_arm:,} per arm); up to "
            f"{past:,} generations per arm stored after it (requests in flight when it stopped, "
            "or a soak that went on) are described above but are not part of the plan's verdict"
        )
    run_ids = {r for u in units for r in u.run_ids}
    recorded = [e.data for e in analysis.events if e.kind == "look" and e.run_id in run_ids]
    for data in recorded:
        index = data.get("look")
        if not isinstance(index, int) or not 1 <= index <= len(replay.verdicts):
            continue
        again = replay.verdicts[index - 1]
        if data.get("verdict") != again:
            deviations.append(
                f"look {index} recorded {data.get('verdict')} during the soak; the stored rows "
                f"give {again}"
            )
    decision = replace(d, deviations=tuple(deviations), reason=reason)
    return decision, notes


def compare_with_plan(
    analysis: Analysis,
    plan_path: str | Path,
    options: ClusteringOptions | None = None,
    allow_unit_mismatch: bool = False,
    arms: tuple[str | None, str | None] | None = None,
) -> ComparisonReport:
    """Apply exactly a registered plan's rule to its two arms (`arms`, when given, must be
    them, in order); refuse an unregistered plan."""
    from soakgate.report.checks import check_registration
    from soakgate.stats.compare import compare_arms
    from soakgate.stats.decision import apply_decision
    from soakgate.stats.plan import plan_sha256, read_plan

    options = options or ClusteringOptions()
    plan: Plan = read_plan(plan_path)
    if arms is not None and tuple(arms) != plan.arms:
        given = " ".join(str(arm) for arm in arms if arm)
        raise UsageError(
            f"the plan compares {plan.arms[1]} (B) against {plan.arms[0]} (A): give "
            f"`{plan.arms[0]} {plan.arms[1]}` or no arms with --plan, not `{given}`"
        )
    digest = plan_sha256(plan)
    a, b = resolve(analysis, plan.arms[0]), resolve(analysis, plan.arms[1])
    used = check_registration(
        digest, analysis.ledger, _first_generations(analysis, (a, b)), analysis.runs
    )
    why = _checked(a, b, allow_unit_mismatch, plan.matched_targets)
    comparison = compare_arms(
        to_arm(a), to_arm(b), plan.alpha, window=options.window,
        gap_permutations=options.gap_permutations, hmm_replicates=options.hmm_replicates,
        seed=options.seed,
    )  # fmt: skip
    notes = design_notes(analysis, (a, b), comparison)
    if plan.sequential is None:
        decision = apply_decision(plan, comparison)
    else:
        decision, looked = _sequential_decision(analysis, plan, (a, b), comparison)
        notes.extend(looked)
    notes.append(f"plan {digest[:12]}... registered in ledger entries {[e.index for e in used]}")
    return ComparisonReport(comparison, (a, b), why, decision=decision, notes=notes)


def compare_divergence(
    analysis: Analysis, a: Unit, b: Unit, alpha: float = 0.05,
    options: ClusteringOptions | None = None,
) -> DifferentialComparison | None:  # fmt: skip
    """Compare the arms' divergence rates when both sent greedy rows to a reference."""
    from soakgate.report.probes import differential_unit
    from soakgate.stats.compare import compare_arms

    options = options or ClusteringOptions()
    left, right = differential_unit(analysis, a), differential_unit(analysis, b)
    if left is None or right is None or not left.compared or not right.compared:
        return None
    arms = [Arm(u.name, u.divergent, u.compared, u.sequence) for u in (left, right)]
    comparison = compare_arms(
        arms[0], arms[1], alpha, window=options.window,
        gap_permutations=options.gap_permutations, hmm_replicates=options.hmm_replicates,
        seed=options.seed,
    )  # fmt: skip
    why = tuple(f"{u.name}: {u.verdict}" for u in (left, right) if not u.informative)
    references = [u.divergence.reference if u.divergence else None for u in (left, right)]
    if references[0] != references[1]:  # (unrecorded on both, by older soakgates: alike)
        shown = " and ".join(f"{u.name} with {r or 'an unrecorded reference'}"
                             for u, r in zip((left, right), references, strict=True))  # fmt: skip
        why += (f"not compared with one reference ({shown}): each arm is judged against its "
                "own reference's divergence from itself",)  # fmt: skip
    return DifferentialComparison(comparison, why)


def attach_differential(
    analysis: Analysis, reports: Sequence[ComparisonReport], options: ClusteringOptions | None
) -> None:
    """Add the differential comparison to every report whose arms both have compared rows."""
    for report in reports:
        a, b = report.units
        report.differential = compare_divergence(analysis, a, b, report.comparison.alpha, options)


def attach_gates(
    analysis: Analysis, reports: Sequence[ComparisonReport], alpha: float,
    options: ClusteringOptions | None = None, gate: GateOptions | None = None,
) -> None:  # fmt: skip
    """Judge every outcome of each report's B against its A, all in one Holm family."""
    from soakgate.report.gate import judge
    from soakgate.report.outcomes import analysis_outcomes

    outcomes = {o.name: o for o in analysis_outcomes(analysis)}
    pairs = [(outcomes[r.units[0].name], outcomes[r.units[1].name]) for r in reports]
    seed = (options or ClusteringOptions()).seed
    for report, judged in zip(reports, judge(pairs, alpha, seed, gate), strict=True):
        report.gate = judged


def default_comparisons(
    analysis: Analysis, options: ClusteringOptions | None
) -> list[ComparisonReport]:
    """Every label against the first one (Holm), when all labels are the same kind of unit,
    with the differential and every outcome's gate attached."""
    labels = analysis.labels
    if len(labels) < 2:
        return []
    arms = [analysis.unit(label) for label in labels]
    if any(a is None or a.rate is None for a in arms):
        return []
    if any(unit_mismatch(arms[0], a) for a in arms[1:] if a is not None and arms[0] is not None):
        return []
    reports = compare_baseline(analysis, labels[0], options)
    attach_differential(analysis, reports, options)
    attach_gates(analysis, reports, reports[0].comparison.alpha if reports else 0.05, options)
    return reports


def why_not_compared(analysis: Analysis) -> str | None:
    """Why `default_comparisons` compares nothing (None when it compares something)."""
    labels = analysis.labels
    if len(labels) < 2:
        return f"one label ({labels[0]}): nothing to compare" if labels else "no labels"
    arms = [analysis.unit(label) for label in labels]
    empty = [
        label for label, arm in zip(labels, arms, strict=True) if arm is None or arm.rate is None
    ]
    if empty:
        return f"no answered generations for {', '.join(empty)}"
    first = arms[0]
    assert first is not None
    for arm in arms[1:]:
        assert arm is not None
        why = unit_mismatch(first, arm)
        if why:
            return f"labels are not the same kind of unit ({why}); compare LABEL@TARGET arms"
    return None
