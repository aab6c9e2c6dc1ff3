"""The answer first: one line per comparison (DIFFER / no difference / INDETERMINATE, the rates,
the ratio with its interval, the design the verdict rests on), for the top of every report."""

from __future__ import annotations

import math
from typing import Any

from soakgate.report.compare_text import verdict_word
from soakgate.report.comparisons import ComparisonReport
from soakgate.report.formatting import percent
from soakgate.stats.verdict import SCOPE_WORDS

_WORDS = {"DIFFER": "differ", "INDETERMINATE": "indeterminate",
          "no significant difference": "no difference"}  # fmt: skip
RATIO_NOTE = "95%, as if requests were independent; the verdict is not"


def _ratio(value: float) -> str:
    return "-" if math.isnan(value) else ("inf" if math.isinf(value) else f"{value:.3g}")


def design_words(report: ComparisonReport) -> str:
    """The design and the test the verdict rests on, in a few words."""
    v = report.comparison.verdict
    design = f"{v.design} ({v.blocks[0]} + {v.blocks[1]})" if v.blocks != (0, 0) else v.design
    p = report.adjusted_p if report.adjusted_p is not None else v.p_value
    which = "Holm p" if p != v.p_value else "p"
    return (
        f"{design}, {v.test} {which} = {p:.3g}, worth ~{v.effective_n:,.0f} requests per arm; "
        f"about {SCOPE_WORDS[v.scope]}"
    )


def verdict_cells(report: ComparisonReport) -> dict[str, str]:
    """The verdict line's parts: verdict, comparison, rates, ratio, design."""
    c = report.comparison
    low, high = c.ratio_ci
    return {
        "verdict": verdict_word(report),
        "comparison": f"{c.labels[1]} vs {c.labels[0]}",
        "rates": f"{percent(c.b.rate)} vs {percent(c.a.rate)}",
        "ratio": f"{_ratio(c.ratio)} [{_ratio(low)}, {_ratio(high)}]",
        "design": design_words(report),
    }


def verdict_line(report: ComparisonReport) -> str:
    """One line: `DIFFER: B vs A: rates, ratio [interval]; design, test, p`."""
    cells = verdict_cells(report)
    mismatch = " (UNIT MISMATCH)" if report.mismatch else ""
    return (
        f"{cells['verdict']}: {cells['comparison']}{mismatch}: {cells['rates']} collapsed, "
        f"ratio {cells['ratio']}; {cells['design']}"
    )


def verdict_lines(reports: list[ComparisonReport], why_none: str | None) -> list[str]:
    """Every comparison's line, or one line saying why nothing was compared."""
    if not reports:
        return [f"no verdict: {why_none}"] if why_none else []
    return [verdict_line(r) for r in reports]


def verdict_dict(report: ComparisonReport) -> dict[str, Any]:
    """A comparison's verdict as JSON-ready values."""
    c, v = report.comparison, report.comparison.verdict
    return {
        "a": c.labels[0], "b": c.labels[1], "verdict": _WORDS[verdict_word(report)],
        "rate_a": c.a.rate, "rate_b": c.b.rate, "n_a": c.a.n, "n_b": c.b.n,
        "events_a": c.a.events, "events_b": c.b.events, "ratio": c.ratio,
        "ratio_ci": list(c.ratio_ci), "ratio_ci_note": RATIO_NOTE, "difference": c.difference,
        "difference_ci": list(c.difference_ci), "design": v.design, "blocks": list(v.blocks),
        "test": v.test, "p_value": v.p_value, "adjusted_p": report.adjusted_p,
        "effective_n": v.effective_n, "reason": v.reason, "mismatch": report.mismatch,
        "scope": v.scope, "line": verdict_line(report),
    }  # fmt: skip
