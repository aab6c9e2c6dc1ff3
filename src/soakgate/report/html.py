"""The self-contained HTML report (jinja2, autoescaped; figures as SVG data URIs).

Model output is untrusted: it reaches the page only through autoescaped template variables,
never `|safe`, and a Content-Security-Policy forbids script and any network fetch besides.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soakgate import __version__
from soakgate.errors import UsageError
from soakgate.records import Generation
from soakgate.report.comparisons import ComparisonReport, why_not_compared
from soakgate.report.formatting import percent
from soakgate.report.model import Analysis
from soakgate.report.tables import HEADERS, display_rows

EXEMPLAR_CHARS = 1200  # enough to see the collapse, short enough to keep the file small
# Spec-decode windows arrive every few seconds for hours: they are plotted, not listed.
PLOTTED_EVENTS = frozenset({"spec_decode"})
EVENT_ROWS = 300
"""Events listed at most (a days-long soak records telemetry every few seconds); the rest are
counted by kind under the table and are all in `report --format json`."""


@dataclass(frozen=True, slots=True)
class Exemplar:
    """A collapsed generation as the report shows it (text still raw: the template escapes)."""

    unit: str
    """`label@target`."""
    request_id: str
    """The generation's request id (to find it in the database or an export)."""
    at: str
    """When it was requested, UTC."""
    flags: str
    """Detectors that flagged it."""
    evidence: str
    """The detectors' details as JSON, cut short."""
    text: str
    """The generated text, cut to EXEMPLAR_CHARS; untrusted."""
    truncated: bool
    """Whether the text was cut."""
    context: tuple[str, ...] = ()
    """What surrounded it (`soakgate report DB --collapse ID`, report/collapse.py)."""


def _when(at: float) -> str:
    return datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def exemplar_text(g: Generation) -> tuple[str, bool]:
    """What an exemplar shows: its text (cut to EXEMPLAR_CHARS), or a placeholder saying why
    there is none; and whether it was cut."""
    if g.text is None:
        return "(text not stored)", False
    if g.text == "":
        tokens = (
            ""
            if g.completion_tokens is None
            else f"; the server reported {g.completion_tokens} tokens"
        )
        return f"(empty text{tokens}: flagged by {', '.join(g.flags)})", False
    return g.text[:EXEMPLAR_CHARS], len(g.text) > EXEMPLAR_CHARS


def exemplars(analysis: Analysis) -> list[Exemplar]:
    """The first few collapsed generations of every unit, and its first run-like collapse
    (`!!!!`) when those are not (load.exemplar_ids chose them)."""
    found = []
    rows = analysis.columns.exemplars
    for unit in analysis.units:
        if unit.aggregate:
            continue
        for part in analysis.slices(unit.label, unit.target):
            for row_id in part.collapsed_ids:
                g = rows.get(int(row_id))
                if g is None:
                    continue
                text, cut = exemplar_text(g)
                found.append(Exemplar(
                    unit.name, g.request_id, _when(g.started_at), ", ".join(g.flags),
                    json.dumps(g.details, default=str)[:300], text, cut,
                    analysis.columns.contexts.get(int(row_id), ()),
                ))  # fmt: skip
    return found


def _figures(analysis: Analysis) -> dict[str, Any]:
    from soakgate.report import bins, figures

    timelines = []
    for unit in analysis.units:
        data = None if unit.aggregate else bins.timeline(analysis, unit)
        if data is not None:
            timelines.append({"name": unit.name, "uri": figures.timeline(data)})
    has_rates = any(u.rate is not None for u in analysis.units)
    speed = bins.throughput(analysis)
    return {
        "forest": figures.forest_plot(analysis) if has_rates else None,
        "timelines": timelines,
        "throughput": figures.throughput(speed) if speed is not None else None,
    }


def _event_rows(analysis: Analysis) -> tuple[list[dict[str, str]], str]:
    """The events table (notable kinds first, at most EVENT_ROWS, in time order) and a line
    counting what was left out, by kind."""
    from collections import Counter

    from soakgate.report.bins import QUIET_EVENTS

    listed = [e for e in analysis.events if e.kind not in PLOTTED_EVENTS]
    notable = [e for e in listed if e.kind not in QUIET_EVENTS][:EVENT_ROWS]
    rest = [e for e in listed if e.kind in QUIET_EVENTS][: EVENT_ROWS - len(notable)]
    shown = sorted(notable + rest, key=lambda e: e.at)
    left = Counter(e.kind for e in listed) - Counter(e.kind for e in shown)
    note = ", ".join(f"{count} {kind}" for kind, count in sorted(left.items()))
    rows = [
        {
            "at": _when(e.at), "kind": e.kind, "target": e.target or "-", "run": e.run_id,
            "data": json.dumps(e.data, sort_keys=True, default=str)[:400],
        }
        for e in shown
    ]  # fmt: skip
    return rows, (
        f"Not listed: {note} (all of them: soakgate report --format json)" if note else ""
    )


def _verdicts(analysis: Analysis, comparisons: list[ComparisonReport]) -> dict[str, Any]:
    """The verdict block at the top of the page."""
    from soakgate.report.verdicts import RATIO_NOTE, verdict_cells

    rows = [verdict_cells(c) for c in comparisons]
    return {"rows": rows, "none": None if rows else why_not_compared(analysis),
            "ratio_note": RATIO_NOTE,
            "base": comparisons[0].comparison.labels[0] if comparisons else None}  # fmt: skip


def _comparison_rows(comparisons: list[ComparisonReport]) -> list[dict[str, Any]]:
    """The comparisons table: one row per comparison, its tests and notes beside it."""
    from soakgate.report import compare_text as ct

    found = []
    for report in comparisons:
        c = report.comparison
        found.append({
            "cells": [
                f"{c.labels[1]} vs {c.labels[0]}", ct.verdict_word(report),
                ct.rate_line("A", c.a)[3:], ct.rate_line("B", c.b)[3:],
                f"{percent(c.difference)} [{percent(c.difference_ci[0])}, "
                f"{percent(c.difference_ci[1])}]",
                f"{ct.ratio_text(c.ratio)} [{ct.ratio_text(c.ratio_ci[0])}, "
                f"{ct.ratio_text(c.ratio_ci[1])}]",
                ct.verdict_line(report).removeprefix("verdict: "), c.verdict.design,
            ],
            "reason": c.reason,
            "tests": [ct.test_line(t) for t in c.tests.values()],
            "clustering": [ct.clustering_line(f"A {c.labels[0]}", c.clustering[0]),
                           ct.clustering_line(f"B {c.labels[1]}", c.clustering[1])],
            "notes": [*report.notes, *(ct.differential_lines(report.differential)
                                        if report.differential else [])],
            "mismatch": report.mismatch,
        })  # fmt: skip
    return found


COMPARISON_HEADERS = ("comparison (B vs A)", "verdict", "A: collapsed / n = rate [95% CI]",
                      "B: collapsed / n = rate [95% CI]", "difference B-A", "ratio B/A [95%]",
                      "verdict test", "design")  # fmt: skip


def _probe_context(analysis: Analysis) -> dict[str, Any]:
    """Tables, verdict lines and figures of the differential check, sweeps, spec-decode, looks."""
    from soakgate.report import figures
    from soakgate.report import probe_tables as pt
    from soakgate.report.probes import Probes, SpecSeries
    from soakgate.report.replays import REPLAY_HEADERS, REPLAY_NOTE
    from soakgate.report.searches import SEARCH_HEADERS, SEARCH_NOTE

    probes = analysis.probes or Probes()
    by_target: dict[str, list[SpecSeries]] = {}
    for series in probes.spec:
        if series.accepted:
            by_target.setdefault(series.target, []).append(series)
    sweeps = [
        {"title": pt.sweep_title(s), "verdict": pt.sweep_verdict(s), "uri": figures.sweep_plot(s),
         "rows": [pt.level_cells(lv, lv.concurrency in s.acceptance_collapses) for lv in s.levels]}
        for s in probes.sweeps
    ]  # fmt: skip
    return {
        "differential": {
            "headers": pt.DIFFERENTIAL_HEADERS,
            "rows": [pt.differential_cells(d) for d in probes.differential],
            "uninformative": [d.name for d in probes.differential if not d.informative],
        },
        "sweeps": {"headers": pt.SWEEP_HEADERS, "found": sweeps},
        "spec": {
            "collapses": [c.line() for c in probes.spec_collapses],
            "lines": pt.spec_lines(probes),
            "absent": probes.spec_absent,
            "plots": [
                {"target": t, "uri": figures.acceptance_plot(t, group)}
                for t, group in by_target.items()
            ],
        },
        "looks": {"headers": pt.LOOK_HEADERS, "rows": [pt.look_cells(x) for x in probes.looks]},
        "replays": {
            "headers": REPLAY_HEADERS,
            "note": REPLAY_NOTE,
            "rows": [r.cells() for r in probes.replays],
        },
        "searches": {
            "headers": SEARCH_HEADERS,
            "note": SEARCH_NOTE,
            "found": [
                {"name": w.name, "answer": w.answer(), "rows": [p.cells() for p in w.probes]}
                for w in probes.searches
            ],
        },
        "reference": {
            "headers": pt.REFERENCE_HEADERS,
            "note": pt.REFERENCE_NOTE,
            "rows": [pt.reference_cells(u) for u in probes.reference],
            "units": [
                {"name": u.name, "uri": figures.reference_plot(u), "worst": _worst(u.worst)}
                for u in probes.reference
                if len(u.scores)
            ],
        },
    }


def _worst(rows: list[Generation]) -> list[dict[str, Any]]:
    """The worst suspect rows: the first implausible token with the text around it (escaped
    by the template), and the others' positions and texts."""
    shown = []
    for g in rows:
        reference = g.details.get("reference", {})
        first = reference.get("first") or {}
        shown.append({
            "request_id": g.request_id, "score": g.reference_score,
            "before": str(first.get("before", "")), "token": str(first.get("token", "")),
            "after": str(first.get("after", "")), "position": first.get("position"),
            "logprob": first.get("logprob"), "rank": first.get("rank"),
            "others": [f"{p}: {t!r} ({lp})" for p, t, lp in reference.get("implausible", [])[1:]],
        })  # fmt: skip
    return shown


def render_html(
    analysis: Analysis, comparisons: list[ComparisonReport] | None = None, title: str = ""
) -> str:
    """The whole report as one HTML string, opening with the verdicts. Text reaches the page
    only through jinja2's autoescape, and the figures' text only as text: matplotlib reads no
    `$...$` in a label or a target's name as mathtext (`text.parse_math` off)."""
    import jinja2
    import matplotlib

    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("soakgate.report", "templates"),
        autoescape=True,  # unconditionally: model text must never become markup
        undefined=jinja2.StrictUndefined,
    )
    template = environment.get_template("report.html")
    rows = display_rows(analysis)
    events, events_note = _event_rows(analysis)
    comparisons = comparisons or []
    with matplotlib.rc_context({"text.parse_math": False}):
        figures = _figures(analysis)
        probes = _probe_context(analysis)
        latency = _latency(analysis)
    return template.render(
        title=title or "soakgate report",
        version=__version__,
        generated=_when(datetime.datetime.now(datetime.UTC).timestamp()),
        headers=HEADERS,
        rows=[{"cells": cells, "aggregate": cells[1].startswith("ALL")} for cells in rows],
        runs=analysis.runs,
        when=_when,
        warnings=analysis.warnings,
        verdicts=_verdicts(analysis, comparisons),
        gates=[
            {"line": r.gate.headline(), "fails": r.gate.fails}
            for r in comparisons
            if r.gate is not None
        ],
        outcomes=_outcomes(analysis),
        figures=figures,
        comparison_headers=COMPARISON_HEADERS,
        comparisons=_comparison_rows(comparisons),
        events=events,
        events_note=events_note,
        exemplars=exemplars(analysis),
        units=[u for u in analysis.units if not u.aggregate],
        probes=probes,
        latency=latency,
    )


def _latency(analysis: Analysis) -> dict[str, Any]:
    """The latency table (each quantile with its interval) and the units' distributions."""
    from soakgate.report import figures
    from soakgate.report.latency import (
        MEASURES,
        NAMES,
        NOTE,
        TITLE,
        seconds_text,
        unit_arrays,
        unit_latencies,
    )  # fmt: skip
    from soakgate.stats.latency import QUANTILES

    rows = unit_latencies(analysis)
    if not rows:
        return {"rows": [], "figure": None}

    def shown(q: Any) -> str:
        return f"{seconds_text(q.value)} [{seconds_text(q.low)}, {seconds_text(q.high)}]"

    headers = ["unit", "answered", "streamed"] + [
        f"{NAMES[m]} p{round(q * 100)} [95%]" for m in MEASURES for q in QUANTILES
    ]
    cells = []
    for row in rows:
        values = [row.name, f"{row.answered:,}", f"{row.streamed:,}"]
        for m in MEASURES:
            found = row.measure(m)
            values += [shown(q) for q in found.quantiles] if found else ["-"] * len(QUANTILES)
        cells.append(values)
    units = {(u.label, u.target): u for u in analysis.units if not u.aggregate}
    series = [(row.name, unit_arrays(analysis, units[(row.label, row.target)])) for row in rows]
    return {"title": TITLE, "note": NOTE, "headers": headers, "rows": cells,
            "figure": figures.latency_plot(series)}  # fmt: skip


def _outcomes(analysis: Analysis) -> dict[str, Any]:
    """The failures-per-unit table (report/outcome_table.py)."""
    from soakgate.report.outcome_table import OUTCOME_NOTE, outcome_table, twin_readings
    from soakgate.report.outcomes import analysis_outcomes

    outcomes = analysis_outcomes(analysis)
    headers, rows = outcome_table(outcomes)
    return {"headers": headers, "rows": rows, "note": OUTCOME_NOTE,
            "twins": twin_readings(outcomes)}  # fmt: skip


def write_html(path: str | Path, html: str) -> None:
    """Write the report whole or not at all (a temporary file beside it, then renamed: a page
    being refreshed during a soak is never seen half-written); an unwritable path is a
    UsageError."""
    import os
    import tempfile

    target = Path(path)
    try:
        handle, temporary = tempfile.mkstemp(
            prefix=f".{target.name}.", suffix=".tmp", dir=target.parent
        )
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(html)
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
