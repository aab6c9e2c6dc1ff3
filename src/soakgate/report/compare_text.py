"""Plain-text rendering of comparisons, shared by `soakgate compare` and the reports."""

from __future__ import annotations

import math

from soakgate.report.comparisons import (
    MISMATCH_LABEL,
    ComparisonReport,
    DifferentialComparison,
    rates_differ,
)
from soakgate.report.formatting import percent
from soakgate.stats.clustering import ClusteringResult
from soakgate.stats.rates import RateSummary
from soakgate.stats.robust import TestResult

STATISTIC_NAMES = {
    "pooled_z": "z", "fisher": "odds ratio", "poisson_exact": "events in B",
    "batch_means": "t", "episodes": "t", "quasi_poisson": "t",
}  # fmt: skip


def rate_line(name: str, rate: RateSummary) -> str:
    """`name: k / n = rate [low, high]`."""
    text = (
        f"{name}: {rate.events:,} / {rate.n:,} = {percent(rate.rate)} "
        f"[{percent(rate.ci_low)}, {percent(rate.ci_high)}] (exact 95%)"
    )
    if rate.upper_bound_one_sided is not None:
        text += f", one-sided 95% upper bound {percent(rate.upper_bound_one_sided)}"
    return text


def test_line(test: TestResult) -> str:
    """One test: statistic, df, p and its note."""
    df = f", df {test.df:.1f}" if test.df is not None else ""
    note = f"  ({test.note})" if test.note else ""
    stat = STATISTIC_NAMES.get(test.name, "statistic")
    return f"{test.name:<14} {stat} = {test.statistic:.4g}{df}, p = {test.p_value:.4g}{note}"


def clustering_line(name: str, result: ClusteringResult | None) -> str:
    """Clustering verdict of one arm, with the long-range design effect and effective n."""
    if result is None:
        return f"{name}: no time-ordered sequence"
    rising = ""
    if result.long_range is not None and result.long_range.still_rising:
        rising = " (still rising at an eighth of the run: a lower bound)"
    return (
        f"{name}: {result.reason}; long-range design effect {result.design_effect:.2f}{rising}, "
        f"effective n {result.effective_n:,.0f}"
    )


def ratio_text(value: float) -> str:
    """A ratio to 3 significant digits; `undefined (no events)` for NaN."""
    return "undefined (no events)" if math.isnan(value) else f"{value:.3g}"


VERDICT_WORDS = {"differ": "DIFFER", "no difference": "no significant difference",
                 "indeterminate": "INDETERMINATE"}  # fmt: skip


def verdict_word(report: ComparisonReport) -> str:
    """DIFFER, no significant difference or INDETERMINATE (Holm-adjusted in a family)."""
    c = report.comparison
    if c.verdict.verdict == "indeterminate":
        return VERDICT_WORDS["indeterminate"]
    return "DIFFER" if rates_differ(report) else "no significant difference"


def verdict_line(report: ComparisonReport) -> str:
    """The verdict in words, Holm-adjusted in a family."""
    c = report.comparison
    word = verdict_word(report)
    if report.adjusted_p is not None:
        return f"verdict: {word} (Holm-adjusted p = {report.adjusted_p:.4g}, alpha {c.alpha})"
    return f"verdict: {word} ({c.verdict_test} p = {c.p_value:.4g}, alpha {c.alpha})"


def differential_lines(differential: DifferentialComparison) -> list[str]:
    """The divergence-rate comparison; never a finding when a reference baseline was not clean."""
    c = differential.comparison
    lines = [
        "  differential check (greedy rows against each arm's reference; rate = divergent share):",
        "    " + rate_line(f"A {c.labels[0]}", c.a),
        "    " + rate_line(f"B {c.labels[1]}", c.b),
        f"    difference B-A: {percent(c.difference)} "
        f"[{percent(c.difference_ci[0])}, {percent(c.difference_ci[1])}]",
        *[f"    {test_line(t)}" for t in c.tests.values()],
        f"    verdict test: {c.verdict_test}, because {c.reason}",
    ]
    if differential.uninformative:
        lines.append("    differential verdict: UNINFORMATIVE, no finding ("
                     + "; ".join(differential.uninformative) + ")")  # fmt: skip
    else:
        word = VERDICT_WORDS[c.verdict.verdict]
        lines.append(f"    differential verdict: {word} ({c.verdict_test} p = {c.p_value:.4g})")
    return lines


def render_comparison(report: ComparisonReport) -> str:
    """Everything `compare` prints for one pair of arms."""
    c = report.comparison
    lines = [f"*** {MISMATCH_LABEL}: {report.mismatch} ***"] if report.mismatch else []
    lines += [
        f"compare {c.labels[1]} (B) against {c.labels[0]} (A, reference)",
        "  " + rate_line(f"A {c.labels[0]}", c.a),
        "  " + rate_line(f"B {c.labels[1]}", c.b),
        f"  difference B-A: {percent(c.difference)} "
        f"[{percent(c.difference_ci[0])}, {percent(c.difference_ci[1])}]",
        f"  rate ratio B/A: {ratio_text(c.ratio)} "
        f"[{ratio_text(c.ratio_ci[0])}, {ratio_text(c.ratio_ci[1])}] (95%)",
        "  tests:",
        *[f"    {test_line(t)}" for t in c.tests.values()],
        "  clustering (descriptive; the verdict does not depend on it):",
        "    " + clustering_line(f"A {c.labels[0]}", c.clustering[0]),
        "    " + clustering_line(f"B {c.labels[1]}", c.clustering[1]),
        f"  verdict test: {c.verdict_test}, because {c.reason}",
        "  " + verdict_line(report),
    ]
    if report.decision is not None:
        d = report.decision
        lines.append(f"  plan verdict: {d.verdict.upper()} by {d.test}: {d.reason}")
        lines += [f"  plan deviation: {item}" for item in d.deviations] or [
            "  plan deviations: none"
        ]
    lines += [f"  {note}" for note in report.notes]
    if report.differential is not None:
        lines += differential_lines(report.differential)
    if report.latency is not None:
        lines += [f"  {line}" for line in report.latency.lines(c.alpha)]
    if report.mismatch:
        lines.append(f"*** {MISMATCH_LABEL} ***")
    return "\n".join(lines)
