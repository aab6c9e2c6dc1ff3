"""Every failure outcome per unit, and the gates, as plain cells and JSON-ready values: what each
report format shows first (terminal, JSON, CSV, Markdown, HTML)."""

from __future__ import annotations

import math
from typing import Any

from soakgate.report.formatting import percent
from soakgate.report.gate import Gate, outcome_words
from soakgate.report.outcomes import PerRequest, UnitOutcomes
from soakgate.stats.outcomes import (
    CROSSTALK,
    INCONSISTENT,
    INVALID_STRUCTURE,
    TWIN_MISMATCH,
    divergence_words,
)

OUTCOME_HEADERS = (
    "unit", "requests", "server errors", "crashes", "collapses", "crosstalk", "invalid structure",
    "inconsistent", "twin mismatch", "suspect", "divergence", "any failure",
)  # fmt: skip
_OPTIONAL = {
    "invalid structure": INVALID_STRUCTURE, "inconsistent": INCONSISTENT,
    "twin mismatch": TWIN_MISMATCH,
}  # fmt: skip
"""Columns shown only where some unit ran their check."""
OUTCOME_NOTE = (
    "requests: those that say something about the server (not cancelled, not soakgate's own "
    "errors, not refused as invalid); server errors among them; crashes the guard recorded, per "
    "hour up under load, with the requests lost to them; collapses among answered generations; "
    "crosstalk: answered generations carrying another request's canary or prompt (runs that "
    "checked); invalid structure: answers to structured prompts that break their JSON schema, "
    "regex or tool calls (one the budget cut: that can no longer be completed); inconsistent: "
    "answers whose log-probabilities or usage cannot be right (runs that asked for them); "
    "twin mismatch: second requests of twin pairs (same body and seed) whose answer is not the "
    "first's, beside the pairs sent at rest before the soak; "
    "suspect among reference-scored ones; divergence: compared greedy answers that "
    "diverged from the reference, beside the reference against itself; any failure: a server "
    "error, collapse, failed check or suspect generation"
)


def _share(outcome: PerRequest | None) -> str:
    if outcome is None or not outcome.n:
        return "-"
    return f"{outcome.events:,}/{outcome.n:,} ({percent(outcome.events / outcome.n, 1)})"


def _crashes(o: UnitOutcomes) -> str:
    crash = o.crash
    if crash is None:
        return "not watched"
    per_hour = "" if math.isnan(crash.per_hour) else f" ({crash.per_hour:.3g}/h)"
    return f"{crash.crashes}{per_hour}, {o.crash_lost} lost" if crash.crashes else "0"


def _divergence(o: UnitOutcomes) -> str:
    d = o.divergence
    if d is None:
        return "-"
    mine = divergence_words(d.positions, d.unit_word)
    own = f"; reference itself {int((d.own >= 0).sum())}/{len(d.own)}" if len(d.own) else ""
    return mine + own


def _twins(o: UnitOutcomes) -> str:
    """Twin mismatches under load, and at rest (the stack's own, measured before the soak)."""
    shown = _share(o.checks.get(TWIN_MISMATCH))
    rest = o.twins_at_rest
    if shown == "-" or rest is None:
        return shown
    return f"{shown}; at rest {rest.mismatched}/{rest.pairs}"


def twin_reading(o: UnitOutcomes) -> str | None:
    """What a unit's twin mismatches under load say, read against its pairs at rest (None: the
    unit sent no twins), by a one-sided Fisher exact test of "more under load". Pairs that
    differ at rest mean the stack does not always repeat a seeded request even alone (seeds
    not honoured, a prompt cache's other arithmetic, nondeterministic kernels); more under load
    than at rest points at load itself (batch-dependent kernels, or corruption)."""
    twins, rest = o.checks.get(TWIN_MISMATCH), o.twins_at_rest
    if twins is None or not twins.n:
        return None
    load = f"{o.name}: {twins.events:,}/{twins.n:,} twin pairs differ under load"
    if rest is None or not rest.pairs:
        return f"{load}; no pairs at rest to read them against"
    at_rest = f"{rest.mismatched}/{rest.pairs} at rest"
    if not twins.events and not rest.mismatched:
        return f"{load}, {at_rest}: seeded requests repeated, under load and alone"
    from scipy.stats import fisher_exact

    table = [
        [twins.events, twins.n - twins.events],
        [rest.mismatched, rest.pairs - rest.mismatched],
    ]
    p_value = float(fisher_exact(table, alternative="greater").pvalue)
    alone = ("; the stack does not always repeat a seeded request even alone"
             if rest.mismatched else "")  # fmt: skip
    if p_value < 0.05:
        return (
            f"{load}, {at_rest}: more under load than at rest (one-sided Fisher p = "
            f"{p_value:.3g}){alone}: load changes seeded answers (batch-dependent kernels do "
            "that by themselves; corruption too): judge it against a reference "
            "configuration with compare --outcome twin_mismatch"
        )
    limit = ""
    if not rest.mismatched:  # what 0 of R at rest lets the test show at all
        limit = (
            f"; {rest.pairs} pairs at rest, none differing, cannot show a rate under load "
            f"below about {1 - 0.05 ** (1 / rest.pairs):.0%} (more: --twin-at-rest)"
        )
    return (f"{load}, {at_rest}: not shown to be more under load than at rest (one-sided Fisher "
            f"p = {p_value:.3g}){alone}{limit}")  # fmt: skip


def twin_readings(outcomes: list[UnitOutcomes]) -> list[str]:
    """The units' twin readings (aggregates left out: their pairs are their units')."""
    return [line for o in outcomes if not o.unit.aggregate
            if (line := twin_reading(o)) is not None]  # fmt: skip


def outcome_cells(o: UnitOutcomes) -> list[str]:
    """One display row, in OUTCOME_HEADERS order."""
    name = f"{o.name} (aggregate)" if o.unit.aggregate else o.name
    return [
        name, f"{o.judged:,}", _share(o.error), _crashes(o), _share(o.collapse),
        _share(o.checks.get(CROSSTALK)), _share(o.checks.get(INVALID_STRUCTURE)),
        _share(o.checks.get(INCONSISTENT)), _twins(o),
        _share(o.suspect), _divergence(o),
        _share(o.any_failure(o.suspect is not None)),
    ]  # fmt: skip


def outcome_table(outcomes: list[UnitOutcomes]) -> tuple[tuple[str, ...], list[list[str]]]:
    """The failures-per-unit table's headers and rows (a check's column only where some unit
    ran it)."""
    rows = [outcome_cells(o) for o in outcomes]
    keep = [
        n for n, header in enumerate(OUTCOME_HEADERS)
        if header not in _OPTIONAL or any(_OPTIONAL[header] in o.checks for o in outcomes)
    ]  # fmt: skip
    return tuple(OUTCOME_HEADERS[n] for n in keep), [[row[n] for n in keep] for row in rows]


def _counts(outcome: PerRequest | None) -> dict[str, Any] | None:
    if outcome is None:
        return None
    rate = outcome.rate
    return {
        "events": outcome.events, "n": outcome.n, "rate": rate.rate if rate else None,
        "ci_low": rate.ci_low if rate else None, "ci_high": rate.ci_high if rate else None,
    }  # fmt: skip


def _twin_counts(o: UnitOutcomes) -> dict[str, Any] | None:
    """Twin mismatches under load, with the at-rest pairs beside them."""
    found = _counts(o.checks.get(TWIN_MISMATCH))
    if found is not None:
        rest = o.twins_at_rest
        found["at_rest"] = None if rest is None else {
            "pairs": rest.pairs, "mismatched": rest.mismatched, "errors": rest.errors,
        }  # fmt: skip
        found["reading"] = twin_reading(o)
    return found


def outcome_dict(o: UnitOutcomes) -> dict[str, Any]:
    """Every outcome of a unit as JSON-ready values."""
    crash = o.crash
    d = o.divergence
    return {
        "unit": o.name, "aggregate": o.unit.aggregate, "requests": o.judged,
        "server_errors": _counts(o.error), "collapses": _counts(o.collapse),
        "suspect": _counts(o.suspect), "crosstalk": _counts(o.checks.get(CROSSTALK)),
        "invalid_structure": _counts(o.checks.get(INVALID_STRUCTURE)),
        "inconsistent": _counts(o.checks.get(INCONSISTENT)),
        "twin_mismatch": _twin_counts(o),
        "any_failure": _counts(o.any_failure(o.suspect is not None)),
        "crashes": None if crash is None else {
            "crashes": crash.crashes, "hours_up": crash.hours, "per_hour": _finite(crash.per_hour),
            "per_hour_ci": [_finite(x) for x in crash.per_hour_ci],
            "per_request": crash.per_request.rate if crash.per_request else None,
            "per_request_ci": [crash.per_request.ci_low, crash.per_request.ci_high]
            if crash.per_request else None,
            "requests_lost": o.crash_lost, "causes": o.crash_causes,
        },
        "divergence": None if d is None else {
            "compared": len(d.positions), "divergent": int((d.positions >= 0).sum()),
            "reference_own": len(d.own), "reference_own_divergent": int((d.own >= 0).sum()),
            "reference_own_source": d.own_source, "positions_count": d.unit_word,
        },
    }  # fmt: skip


def _finite(value: float) -> float | None:
    return None if math.isnan(value) or math.isinf(value) else value


def gate_dict(gate: Gate) -> dict[str, Any]:
    """A gate as JSON-ready values: the decision, its line, and every outcome judged."""
    return {
        "baseline": gate.baseline.name, "candidate": gate.candidate.name, "fails": gate.fails,
        "line": gate.headline(), "crashed_alone": gate.crashed_alone,
        "outcomes": [
            {"outcome": o.outcome, "events": list(o.events), "exposure": list(o.exposure),
             "verdict": o.word.lower(), "worse": o.worse, "not_cleared": o.not_cleared,
             "direction": o.direction,
             "p_value": o.verdict.p_value, "adjusted_p": o.adjusted_p, "in_family": o.in_family,
             "test": o.verdict.test, "design": o.verdict.design, "scope": o.verdict.scope,
             "reason": o.verdict.reason, "words": outcome_words(o, gate)}
            for o in gate.outcomes
        ],
    }  # fmt: skip
