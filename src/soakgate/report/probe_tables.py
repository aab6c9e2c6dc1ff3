"""Probe findings as plain rows and text: the differential check, sweeps, spec-decode, looks."""

from __future__ import annotations

import math
from typing import Any

from soakgate.probes.sweep import SweepLevel
from soakgate.report.formatting import percent
from soakgate.report.probes import DifferentialUnit, Look, Probes, Sweep
from soakgate.report.reference import ReferenceUnit
from soakgate.report.replays import REPLAY_HEADERS, REPLAY_NOTE
from soakgate.report.searches import SEARCH_HEADERS, SEARCH_NOTE
from soakgate.stats.shift import MIN_ROWS, SHIFTED, TOO_FEW

DIFFERENTIAL_HEADERS = (
    "unit", "compared", "divergent", "divergence rate [95% CI]", "median first divergence",
    "reference baseline", "verdict",
)  # fmt: skip
SWEEP_HEADERS = (
    "concurrency", "requests", "tok/s", "clean tok/s", "latency p50 s", "latency p95 s",
    "collapse rate [95% CI]", "errors", "spec acceptance",
)  # fmt: skip
Section = tuple[str, tuple[str, ...], list[list[str]], str]
REFERENCE_HEADERS = (
    "unit", "scored", "suspect", "suspect rate [95% CI]", "unscored", "score p50 / p99 / max",
    "threshold (calibration)", "as a whole (against the reference's own)",
)  # fmt: skip
REFERENCE_NOTE = (
    "suspect: the reference finds the generation less likely than its own samples allow at the "
    "false-flag rate: a token far in its tail (score: worst token's surprisal, nats), the "
    "generation as a whole (its soak z), or, under a nucleus, a token its position's sampler "
    "would rarely draw (the worst standardized token); details.reference.flagged_by says which; "
    "unscored rows are not clean. As a whole: the unit's soak z (else typicality, else mean "
    "surprisal) against the reference's own, its share above their 90th percentile and its mean "
    "(batch-means t, each at half the level): SHIFTED sees corruption that moves every "
    "generation a little, which the per-generation threshold rarely flags"
)
LOOK_HEADERS = ("run", "look", "fraction", "n per arm", "events", "verdict", "test", "p", "reason")


def differential_dict(unit: DifferentialUnit) -> dict[str, Any]:
    """JSON-ready figures of one unit's differential check."""
    rate, baseline = unit.rate, unit.baseline
    return {
        "unit": unit.name, "aggregate": unit.aggregate, "compared": unit.compared,
        "divergent": unit.divergent, "rate": rate.rate if rate else None,
        "ci_low": rate.ci_low if rate else None, "ci_high": rate.ci_high if rate else None,
        "upper_95_if_zero": rate.upper_bound_one_sided if rate else None,
        "median_first_divergence": unit.median_position, "informative": unit.informative,
        "baseline": None if baseline is None else {
            "pairs": baseline.pairs, "divergent": baseline.divergent, "errors": baseline.errors,
            "informative": baseline.informative, "runs_without": baseline.runs_without,
        },
        "verdict": unit.verdict,
    }  # fmt: skip


def differential_cells(unit: DifferentialUnit) -> list[str]:
    """One display row, in DIFFERENTIAL_HEADERS order."""
    rate = unit.rate
    shown = "-" if rate is None else (
        f"{percent(rate.rate, 2)} [{percent(rate.ci_low, 2)}, {percent(rate.ci_high, 2)}]"
    )  # fmt: skip
    position = "-" if unit.median_position is None else f"{unit.median_position:g}"
    name = f"{unit.name} (aggregate)" if unit.aggregate else unit.name
    base = unit.baseline
    baseline = "not recorded" if base is None else f"{base.divergent}/{base.pairs} diverged"
    if base is not None and base.runs_without:
        baseline += f", {base.runs_without} run(s) unmeasured"
    return [name, str(unit.compared), str(unit.divergent), shown, position, baseline, unit.verdict]


def reference_cells(unit: ReferenceUnit) -> list[str]:
    """One display row, in REFERENCE_HEADERS order."""
    rate, calibration, q = unit.rate, unit.calibration, unit.quantiles
    shown = "-" if rate is None else (
        f"{percent(rate.rate, 2)} [{percent(rate.ci_low, 2)}, {percent(rate.ci_high, 2)}]"
    )  # fmt: skip
    unscored = sum(unit.unscored.values())
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(unit.unscored.items()))
    scores = "-" if not q else f"{q['p50']:.2f} / {q['p99']:.2f} / {q['max']:.2f}"
    threshold = "-"
    if calibration:
        threshold = (f"{calibration.get('threshold', float('nan')):.2f} (n {calibration.get('n')}, "
                     f"rate {calibration.get('false_flag_rate')})")  # fmt: skip
    return [
        unit.name, str(rate.n if rate else 0), str(rate.events if rate else 0), shown,
        f"{unscored} ({reasons})" if unscored else "0", scores, threshold, shift_words(unit),
    ]  # fmt: skip


def shift_words(unit: ReferenceUnit) -> str:
    """`SHIFTED by typicality: 17.2% vs 10.0% expected (t 5.1, p 1e-05)` (the soak z: both of
    its tests, `stats.shift.score_shift_z`), or why there is no such verdict."""
    shift = unit.shift
    if shift is None:
        return "-"
    if shift.verdict == TOO_FEW:
        return f"{TOO_FEW} ({shift.scored} < {MIN_ROWS})"
    word = "SHIFTED" if shift.verdict == SHIFTED else shift.verdict
    share, expected = percent(shift.share, 1), percent(shift.expected, 1)
    if shift.mean is None or shift.expected_mean is None or shift.mean_statistic is None:
        return (f"{word} by {shift.score}: {share} vs {expected} expected "
                f"(t {shift.statistic:.2f}, p {shift.p_value:.3g})")  # fmt: skip
    lower = shift.verdict == SHIFTED and shift.mean_statistic < 0 and shift.mean_p is not None \
        and shift.share_p is not None and shift.mean_p < shift.share_p  # fmt: skip
    why = " (below: more predictable than the reference's own samples)" if lower else ""
    return (f"{word} by {shift.score} (p {shift.p_value:.3g}, the smaller of two tests x 2): "
            f"mean {shift.mean:.3f} vs {shift.expected_mean:.3f} (t {shift.mean_statistic:.2f}, "
            f"p {shift.mean_p:.3g}){why}; above the reference's p90 {share} vs {expected} "
            f"(t {shift.statistic:.2f}, p {shift.share_p:.3g})")  # fmt: skip


def reference_dict(unit: ReferenceUnit) -> dict[str, Any]:
    """JSON-ready figures of one unit's reference scoring."""
    rate = unit.rate
    return {
        "unit": unit.name, "scored": rate.n if rate else 0, "suspect": rate.events if rate else 0,
        "rate": rate.rate if rate else None, "ci_low": rate.ci_low if rate else None,
        "ci_high": rate.ci_high if rate else None,
        "upper_95_if_zero": rate.upper_bound_one_sided if rate else None,
        "unscored": unit.unscored, "quantiles": unit.quantiles, "calibration": unit.calibration,
        "shift": None if unit.shift is None else {
            "verdict": unit.shift.verdict, "above": unit.shift.above, "scored": unit.shift.scored,
            "share": unit.shift.share if unit.shift.scored else None,
            "expected": unit.shift.expected, "p_value": _finite(unit.shift.p_value),
            "statistic": _finite(unit.shift.statistic), "score": unit.shift.score,
            "share_p_value": unit.shift.share_p, "mean": unit.shift.mean,
            "expected_mean": unit.shift.expected_mean,
            "mean_statistic": unit.shift.mean_statistic, "mean_p_value": unit.shift.mean_p,
        },
        "worst": [
            {"request_id": g.request_id, "score": g.reference_score,
             "first": g.details.get("reference", {}).get("first")}
            for g in unit.worst
        ],
    }  # fmt: skip


def level_dict(level: SweepLevel) -> dict[str, Any]:
    """JSON-ready figures of one sweep level."""
    rate = level.collapse_rate
    clean = level.requests - level.errors
    return {
        "concurrency": level.concurrency, "run_id": level.run_id, "requests": level.requests,
        "errors": level.errors, "collapses": level.collapses, "elapsed_s": level.elapsed_s,
        "tok_s": level.tokens_per_s, "clean_tok_s": level.clean_tokens_per_s,
        "latency_p50_s": level.latency_p50_s, "latency_p95_s": level.latency_p95_s,
        "collapse_rate": rate.rate if clean else None,
        "ci_low": rate.ci_low if clean else None, "ci_high": rate.ci_high if clean else None,
        "spec_acceptance": level.spec_acceptance,
    }  # fmt: skip


def level_cells(level: SweepLevel, collapsed: bool) -> list[str]:
    """One display row of a sweep level, in SWEEP_HEADERS order."""
    rate = level.collapse_rate
    shown = "-" if level.requests == level.errors else (
        f"{percent(rate.rate)} [{percent(rate.ci_low)}, {percent(rate.ci_high)}]"
    )  # fmt: skip
    accept = "-" if level.spec_acceptance is None else f"{level.spec_acceptance:.0%}"
    return [
        str(level.concurrency), str(level.requests), f"{level.tokens_per_s:,.0f}",
        f"{level.clean_tokens_per_s:,.0f}", f"{level.latency_p50_s:.3f}",
        f"{level.latency_p95_s:.3f}", shown, str(level.errors),
        accept + (" (COLLAPSED)" if collapsed else ""),
    ]  # fmt: skip


def sweep_title(sweep: Sweep) -> str:
    """`sweep ID (label on targets)`."""
    return f"sweep {sweep.sweep_id} ({sweep.label} on {', '.join(sweep.targets)})"


def sweep_verdict(sweep: Sweep) -> str:
    """The saturation point and any acceptance collapse, in words."""
    point = sweep.saturation
    where = f"concurrency {point}" if point else f"not reached up to {sweep.levels[-1].concurrency}"
    text = f"saturation point (throughput gain < {sweep.min_gain:.0%}): {where}"
    if sweep.acceptance_collapses:
        text += f"; speculative acceptance collapsed at concurrency {sweep.acceptance_collapses}"
    return text


def look_cells(look: Look) -> list[str]:
    """One display row of a sequential look, in LOOK_HEADERS order."""
    p = "-" if look.p_value is None else f"{look.p_value:.4g}"
    return [
        look.run_id, str(look.look), f"{look.fraction:.2f}", f"{look.n_per_arm:,}",
        " / ".join(str(e) for e in look.events), look.verdict.upper(), look.test, p, look.reason,
    ]  # fmt: skip


def probes_json(probes: Probes) -> dict[str, Any]:
    """Every probe finding as JSON-ready values."""
    return {
        "differential": [differential_dict(d) for d in probes.differential],
        "sweeps": [
            {"id": s.sweep_id, "label": s.label, "targets": list(s.targets),
             "levels": [level_dict(level) for level in s.levels],
             "saturation_point": s.saturation, "min_gain": s.min_gain,
             "acceptance_collapses": s.acceptance_collapses}
            for s in probes.sweeps
        ],
        "spec_decode": [
            {"run_id": s.run_id, "label": s.label, "target": s.target,
             "windows": [{"start": t, "acceptance": a, "tok_s": v} for t, a, v in s.points],
             "collapses": [{"start": c.at, "reason": c.reason} for c in s.collapses]}
            for s in probes.spec
        ],
        "spec_decode_absent": probes.spec_absent,
        "spec_decode_collapses": [c.line() for c in probes.spec_collapses],
        "looks": [dict(zip(LOOK_HEADERS, look_cells(look), strict=True)) for look in probes.looks],
        "replays": [replay.as_dict() for replay in probes.replays],
        "reference": [reference_dict(unit) for unit in probes.reference],
        "searches": [walk.as_dict() for walk in probes.searches],
    }  # fmt: skip


def probe_sections(probes: Probes) -> list[Section]:
    """(title, headers, rows, note under the table) per section there is data for."""
    sections: list[Section] = []
    if probes.differential:
        rows = [differential_cells(d) for d in probes.differential]
        note = "greedy rows sent to the target and the reference; first divergence in tokens"
        sections.append(("differential check", DIFFERENTIAL_HEADERS, rows, note))
    for sweep in probes.sweeps:
        fallen = set(sweep.acceptance_collapses)
        rows = [level_cells(level, level.concurrency in fallen) for level in sweep.levels]
        sections.append((sweep_title(sweep), SWEEP_HEADERS, rows, sweep_verdict(sweep)))
    if probes.looks:
        rows = [look_cells(look) for look in probes.looks]
        sections.append(("sequential looks", LOOK_HEADERS, rows, ""))
    if probes.replays:
        rows = [replay.cells() for replay in probes.replays]
        sections.append(("replayed collapses", REPLAY_HEADERS, rows, REPLAY_NOTE))
    if probes.reference:
        rows = [reference_cells(unit) for unit in probes.reference]
        sections.append(("reference scoring", REFERENCE_HEADERS, rows, REFERENCE_NOTE))
    for walk in probes.searches:
        rows = [probe.cells() for probe in walk.probes]
        sections.append((f"configuration search {walk.name}", SEARCH_HEADERS, rows,
                         f"{walk.answer()}. {SEARCH_NOTE}"))  # fmt: skip
    return sections


def spec_lines(probes: Probes) -> list[str]:
    """One line per target watched: windows and acceptance range."""
    lines = []
    for s in probes.spec:
        accepted = s.accepted
        span = f"{min(accepted):.0%}-{max(accepted):.0%}" if accepted else "nothing drafted"
        lines.append(
            f"run {s.run_id} ({s.label}@{s.target}): {len(s.points)} windows, acceptance {span}, "
            f"{len(s.collapses)} collapse(s)"
        )
    return lines


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
