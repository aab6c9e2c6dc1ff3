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
from soakgate.records import Event, Generation
from soakgate.report.comparisons import ComparisonReport
from soakgate.report.model import Analysis, Unit
from soakgate.report.tables import HEADERS, display_rows

EXEMPLARS_PER_UNIT = 3
EXEMPLAR_CHARS = 1200  # enough to see the collapse, short enough to keep the file small
# Bookkeeping events stay in the events table but would only clutter the timelines.
QUIET_EVENTS = frozenset(
    {"ended", "started", "telemetry", "note", "spec_decode_absent", "spec_decode",
     "reference_baseline", "server_load"}
)  # fmt: skip
# Spec-decode windows arrive every few seconds for hours: they are plotted, not listed.
PLOTTED_EVENTS = frozenset({"spec_decode", "server_load"})


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


def exemplars(analysis: Analysis, per_unit: int = EXEMPLARS_PER_UNIT) -> list[Exemplar]:
    """The first few collapsed generations of every unit, text cut to EXEMPLAR_CHARS, each
    with its context."""
    from soakgate.report.collapse import exemplar_context

    found = []
    for unit in analysis.units:
        if unit.aggregate:
            continue
        rows = [g for g in analysis.generations[(unit.label, unit.target)] if g.collapsed]
        for g in rows[:per_unit]:
            text = g.text if g.text is not None else "(text not stored)"
            found.append(
                Exemplar(
                    unit.name,
                    g.request_id,
                    _when(g.started_at),
                    ", ".join(g.flags),
                    json.dumps(g.details, default=str)[:300],
                    text[:EXEMPLAR_CHARS],
                    len(text) > EXEMPLAR_CHARS,
                    tuple(exemplar_context(analysis, g)),
                )
            )
    return found


def _unit_events(analysis: Analysis, unit: Unit, rows: list[Generation]) -> list[Event]:
    runs = {g.run_id for g in rows}
    start, end = min(g.started_at for g in rows), max(g.ended_at for g in rows)
    return [
        e
        for e in analysis.events
        if e.run_id in runs
        and e.target in (None, unit.target)
        and start <= e.at <= end
        and e.kind not in QUIET_EVENTS
    ]


def _figures(analysis: Analysis) -> dict[str, Any]:
    from soakgate.report import figures

    timelines = []
    for unit in analysis.units:
        rows = analysis.generations.get((unit.label, unit.target), [])
        if unit.aggregate or not rows:
            continue
        uri = figures.timeline(unit, rows, _unit_events(analysis, unit, rows))
        timelines.append({"name": unit.name, "uri": uri})
    has_rates = any(u.rate is not None for u in analysis.units)
    return {
        "forest": figures.forest_plot(analysis) if has_rates else None,
        "timelines": timelines,
        "throughput": figures.throughput(analysis),
    }


def _event_rows(analysis: Analysis) -> list[dict[str, str]]:
    return [
        {
            "at": _when(e.at), "kind": e.kind, "target": e.target or "-", "run": e.run_id,
            "data": json.dumps(e.data, sort_keys=True, default=str)[:400],
        }
        for e in analysis.events
        if e.kind not in PLOTTED_EVENTS
    ]  # fmt: skip


def _probe_context(analysis: Analysis) -> dict[str, Any]:
    """Tables, verdict lines and figures of the differential check, sweeps, spec-decode, looks."""
    from soakgate.report import figures
    from soakgate.report import probe_tables as pt
    from soakgate.report.probes import Probes, SpecSeries
    from soakgate.report.replays import REPLAY_HEADERS, REPLAY_NOTE

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
    }


def render_html(
    analysis: Analysis, comparisons: list[ComparisonReport] | None = None, title: str = ""
) -> str:
    """The whole report as one HTML string."""
    import jinja2

    from soakgate.report.compare_text import render_comparison

    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("soakgate.report", "templates"),
        autoescape=True,  # unconditionally: model text must never become markup
        undefined=jinja2.StrictUndefined,
    )
    template = environment.get_template("report.html")
    rows = display_rows(analysis)
    return template.render(
        title=title or "soakgate report",
        version=__version__,
        generated=_when(datetime.datetime.now(datetime.UTC).timestamp()),
        headers=HEADERS,
        rows=[{"cells": cells, "aggregate": cells[1].startswith("ALL")} for cells in rows],
        runs=analysis.runs,
        when=_when,
        warnings=analysis.warnings,
        figures=_figures(analysis),
        comparisons=[render_comparison(c) for c in comparisons or []],
        events=_event_rows(analysis),
        exemplars=exemplars(analysis),
        units=[u for u in analysis.units if not u.aggregate],
        probes=_probe_context(analysis),
    )


def write_html(path: str | Path, html: str) -> None:
    """Write the report; an unwritable path is a UsageError."""
    try:
        Path(path).write_text(html, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
