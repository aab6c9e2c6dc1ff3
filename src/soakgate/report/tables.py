"""Summary rows of an analysis and their text renderings: rich table, JSON, CSV, Markdown."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import re
from collections.abc import Sequence
from typing import Any

from soakgate.report.comparisons import ComparisonReport, why_not_compared
from soakgate.report.formatting import percent
from soakgate.report.model import Analysis, Unit
from soakgate.report.outcomes import UnitOutcomes
from soakgate.report.uptime import uptime_json, uptime_lines
from soakgate.stats.outcomes import CROSSTALK, INCONSISTENT, INVALID_STRUCTURE, TWIN_MISMATCH

COLUMNS = (
    "label", "target", "aggregate", "requests", "n", "collapses", "rate", "ci_low", "ci_high",
    "upper_95_if_zero", "errors", "errors_by_class", "tok_s", "clean_tok_s", "duration_s",
    "runs", "clustered", "design_effect", "effective_n", "clustering_reason",
    "gateway_retried", "gateway_retried_clean", "gateway_retries",
)  # fmt: skip
"""A unit's own columns; the CSV adds OUTCOME_COLUMNS after them."""


def unit_row(unit: Unit) -> dict[str, Any]:
    """One summary row: every figure of a unit (or aggregate) as plain JSON-ready values."""
    rate, clustering = unit.rate, unit.clustering
    return {
        "label": unit.label, "target": unit.target, "aggregate": unit.aggregate,
        "requests": unit.requests, "n": unit.n, "collapses": unit.collapses,
        "rate": rate.rate if rate else None, "ci_low": rate.ci_low if rate else None,
        "ci_high": rate.ci_high if rate else None,
        "upper_95_if_zero": rate.upper_bound_one_sided if rate else None,
        "errors": unit.errors, "errors_by_class": dict(sorted(unit.errors_by_class.items())),
        "tok_s": unit.tok_s, "clean_tok_s": unit.clean_tok_s, "duration_s": unit.duration_s,
        "runs": len(unit.run_ids),
        "clustered": clustering.clustered if clustering else None,
        "design_effect": clustering.design_effect if clustering else None,
        "effective_n": clustering.effective_n if clustering else None,
        "clustering_reason": clustering.reason if clustering else None,
        # answers a gateway retried upstream, apart from the clean and error counts above
        "gateway_retried": unit.gateway.rows if unit.gateway else 0,
        "gateway_retried_clean": unit.gateway.clean if unit.gateway else 0,
        "gateway_retries": unit.gateway.retries if unit.gateway else 0,
    }  # fmt: skip


OUTCOME_COLUMNS = (
    "judged_requests", "server_errors", "crashes", "crashes_per_hour", "requests_lost_to_crashes",
    "crosstalk", "checked", "invalid_structure", "structure_judged", "inconsistent",
    "numbers_judged", "twin_mismatch", "twins_judged", "suspect", "scored",
    "divergent", "compared", "any_failure",
)  # fmt: skip


def _outcome_columns(outcomes: UnitOutcomes) -> dict[str, Any]:
    """The flat outcome figures a summary row carries (report/outcome_table.py has them all)."""
    crash, d = outcomes.crash, outcomes.divergence
    suspect, crosstalk = outcomes.suspect, outcomes.checks.get(CROSSTALK)
    structure = outcomes.checks.get(INVALID_STRUCTURE)
    numbers = outcomes.checks.get(INCONSISTENT)
    twins = outcomes.checks.get(TWIN_MISMATCH)
    per_hour = crash.per_hour if crash is not None and crash.hours > 0 else None
    return {
        "judged_requests": outcomes.judged, "server_errors": outcomes.error.events,
        "crashes": crash.crashes if crash else None, "crashes_per_hour": per_hour,
        "requests_lost_to_crashes": outcomes.crash_lost,
        "crosstalk": crosstalk.events if crosstalk else None,
        "checked": crosstalk.n if crosstalk else None,
        "invalid_structure": structure.events if structure else None,
        "structure_judged": structure.n if structure else None,
        "inconsistent": numbers.events if numbers else None,
        "numbers_judged": numbers.n if numbers else None,
        "twin_mismatch": twins.events if twins else None,
        "twins_judged": twins.n if twins else None,
        "suspect": suspect.events if suspect else None, "scored": suspect.n if suspect else None,
        "divergent": int((d.positions >= 0).sum()) if d else None,
        "compared": len(d.positions) if d else None,
        "any_failure": outcomes.any_failure(suspect is not None).events,
    }  # fmt: skip


def summary_rows(analysis: Analysis) -> list[dict[str, Any]]:
    """Rows in report order: each label's units, then its aggregate; each with its outcomes."""
    from soakgate.report.outcomes import analysis_outcomes

    return [
        {**unit_row(u), **_outcome_columns(o)}
        for u, o in zip(analysis.units, analysis_outcomes(analysis), strict=True)
    ]


def rate_cell(row: dict[str, Any]) -> str:
    """`rate [low, high]`, plus the one-sided bound when there were no collapses."""
    if row["rate"] is None:
        return "-"
    text = f"{percent(row['rate'])} [{percent(row['ci_low'])}, {percent(row['ci_high'])}]"
    if row["upper_95_if_zero"] is not None:
        text += f" (≤ {percent(row['upper_95_if_zero'])} one-sided)"
    return text


def clustering_cell(row: dict[str, Any]) -> str:
    """`clustered`/`independent` with design effect and effective n; '-' for aggregates."""
    if row["clustered"] is None:
        return "-"
    word = "CLUSTERED" if row["clustered"] else "no clustering"
    return f"{word} (deff {row['design_effect']:.2f}, n_eff {row['effective_n']:,.0f})"


def errors_cell(row: dict[str, Any]) -> str:
    """`total (class: k, ...)`, and the answers a gateway retried upstream."""
    by_class = ", ".join(f"{k}: {v}" for k, v in row["errors_by_class"].items())
    text = f"{row['errors']} ({by_class})" if by_class else str(row["errors"])
    return text + gateway_note(row)


def gateway_note(row: dict[str, Any]) -> str:
    """`; gateway retried k (c clean)` for a unit whose answers a gateway retried, else ''."""
    if not row["gateway_retried"]:
        return ""
    return f"; gateway retried {row['gateway_retried']} ({row['gateway_retried_clean']} clean)"


def display_rows(analysis: Analysis) -> list[list[str]]:
    """The human table: one list of cell strings per row, in HEADERS order."""
    cells = []
    for row in summary_rows(analysis):
        target = "ALL (aggregate)" if row["aggregate"] else row["target"]
        cells.append([
            row["label"], target, f"{row['n']:,}", str(row["collapses"]), rate_cell(row),
            errors_cell(row), f"{row['tok_s']:,.0f}", f"{row['clean_tok_s']:,.0f}",
            f"{row['duration_s']:,.0f}", clustering_cell(row),
        ])  # fmt: skip
    return cells


HEADERS = (
    "label", "target", "n", "collapses", "rate [95% CI]", "errors", "tok/s", "clean tok/s",
    "duration s", "clustering",
)  # fmt: skip


NARROW = 150
"""Below this many columns the table drops two columns, shortens the errors cell and breaks
long cells onto two lines."""
VERY_NARROW = 110
"""Below this many it drops tok/s as well and draws no vertical rules."""
_NARROW_DROPPED = ("clean tok/s", "duration s")


def short_errors(row: dict[str, Any]) -> str:
    """`total` or `total (commonest class: k, +m kinds)`: the errors cell of a narrow table."""
    by_class = sorted(row["errors_by_class"].items(), key=lambda item: (-item[1], item[0]))
    note = gateway_note(row).replace("; ", "\n")
    if not by_class:
        return str(row["errors"]) + note
    (name, count), more = by_class[0], len(by_class) - 1
    return f"{row['errors']}\n({name}: {count}" + (f", +{more} kinds)" if more else ")") + note


def verdict_block(analysis: Analysis, comparisons: Sequence[ComparisonReport]) -> list[str]:
    """What a report opens with: a heading, one line per comparison (or why there is none),
    the note on the ratio intervals, each gate's line, and the methodology warnings."""
    from soakgate.report.verdicts import RATIO_NOTE, verdict_lines

    lines = verdict_lines(list(comparisons), why_not_compared(analysis))
    if comparisons:
        base = comparisons[0].comparison.labels[0]
        family = ", Holm-adjusted" if len(comparisons) > 1 else ""
        lines = [f"verdict on collapses (every label against {base}{family}):", *lines]
        lines.append(f"(ratio intervals: {RATIO_NOTE})")
    gates = [r.gate.headline() for r in comparisons if r.gate is not None]
    if gates:
        lines += ["every outcome (crashes, errors, collapses, crosstalk, suspect, divergence, any "
                  "failure; "
                  "Holm across outcomes and labels):", *gates]  # fmt: skip
    count = len(analysis.warnings)
    if count:
        lines.append(f"{count} methodology warning(s):")
    return lines + [f"warning: {w}" for w in analysis.warnings]


def render_table(
    analysis: Analysis, comparisons: Sequence[ComparisonReport] = (), width: int | None = None
) -> str:
    """The verdicts and methodology warnings, then the rich table, as text `width` columns wide:
    by default the terminal's width ($COLUMNS, then the terminal itself), 200 when output is
    not a terminal. Every line fits the width.
    Rich wraps cells within their columns; below NARROW columns the rate, target and
    clustering cells take two lines and `clean tok/s` and `duration s` are left to
    --format json/csv (said under the table)."""
    import shutil

    from rich import box
    from rich.table import Table

    from soakgate.terminal import TextConsole

    width = width or shutil.get_terminal_size((200, 24)).columns
    narrow, very = width < NARROW, width < VERY_NARROW
    dropped = (*_NARROW_DROPPED, "tok/s") if very else _NARROW_DROPPED
    headers = [h for h in HEADERS if not (narrow and h in dropped)]
    table = Table(
        title="soakgate report (n = answered generations; aggregates are not units)",
        box=box.SIMPLE_HEAD if very else box.HEAVY_HEAD, pad_edge=not very,
    )  # fmt: skip
    for header in headers:
        figure = header in ("n", "collapses", "tok/s", "clean tok/s", "duration s")
        table.add_column(header, overflow="fold", justify="right" if figure else "left")
    for cells, figures in zip(display_rows(analysis), summary_rows(analysis), strict=True):
        row = dict(zip(HEADERS, cells, strict=True))
        if narrow:  # break at the natural places, so rich need not break words
            row["errors"] = str(figures["errors"]) if very else short_errors(figures)
            row["target"] = row["target"].replace(" (", "\n(")
            row["rate [95% CI]"] = row["rate [95% CI]"].replace(" [", "\n[").replace(" (≤", "\n(≤")
            row["clustering"] = row["clustering"].replace(" (", "\n(")
            if very:  # `CLUSTERED\n(deff 2.19)`: the effective n is in json/csv
                row["clustering"] = row["clustering"].split(", n_eff")[0].replace(
                    "no clustering", "none"
                ) + (")" if ", n_eff" in row["clustering"] else "")
        style = "dim" if cells[1].startswith("ALL") else None
        table.add_row(*(row[h] for h in headers), style=style)
    console = TextConsole(file=io.StringIO(), width=width, record=True, color_system=None)
    for line in verdict_block(analysis, comparisons):
        console.print(line)
    _print_outcomes(analysis, console)
    console.print(table)
    if narrow:
        console.print(
            f"({', '.join(dropped)} and errors by class: --format json or csv, or a "
            f"terminal of {NARROW}+ columns)",
        )  # fmt: skip
    _print_latency(analysis, console)
    if analysis.probes is not None:
        _print_probes(analysis, console)
    _print_placement(analysis, console)
    for line in uptime_lines(analysis):
        console.print(line, markup=False, highlight=False)  # wrapped to the width
    return console.export_text()


def _print_latency(analysis: Analysis, console: Any) -> None:
    """Latency, TTFT and TPOT per unit (report/latency.py), when any answered row was timed."""
    from rich.table import Table

    from soakgate.report.latency import HEADERS as LATENCY_HEADERS
    from soakgate.report.latency import NOTE, TITLE, table_rows, unit_latencies

    rows = unit_latencies(analysis)
    if not rows:
        return
    table = Table(title=TITLE)
    for header in LATENCY_HEADERS:
        table.add_column(header, overflow="fold")
    for cells in table_rows(rows):
        table.add_row(*cells)
    console.print(table)
    console.print(NOTE, markup=False, highlight=False)


def _print_outcomes(analysis: Analysis, console: Any) -> None:
    """Every failure outcome per unit: the first table of the report."""
    from rich.table import Table

    from soakgate.report.outcome_table import OUTCOME_NOTE, outcome_table, twin_readings
    from soakgate.report.outcomes import analysis_outcomes

    table = Table(title="failures per unit (every kind soakgate observes)")
    outcomes = analysis_outcomes(analysis)
    headers, rows = outcome_table(outcomes)
    for header in headers:
        table.add_column(header, overflow="fold")
    for unit, row in zip(outcomes, rows, strict=True):
        table.add_row(*row, style="dim" if unit.unit.aggregate else None)
    console.print(table)
    console.print(OUTCOME_NOTE)
    for line in twin_readings(outcomes):
        console.print(line, markup=False, highlight=False)


def _print_placement(analysis: Analysis, console: Any) -> None:
    """The node each unit ran on (Ray campaigns)."""
    from soakgate.report.placement import placement_lines

    lines = placement_lines(analysis)
    if lines:
        console.print("placement (Ray node and GPU of each unit):")
    for line in lines:
        console.print(f"  {line}", soft_wrap=True)


def _print_probes(analysis: Analysis, console: Any) -> None:
    """Differential check, sweeps, looks, and speculative-decoding collapses as alerts."""
    from rich.table import Table

    from soakgate.report.probe_tables import probe_sections, spec_lines

    assert analysis.probes is not None
    for title, headers, rows, note in probe_sections(analysis.probes):
        table = Table(title=title)
        for header in headers:
            table.add_column(header, overflow="fold")
        for cells in rows:
            table.add_row(*cells)
        console.print(table)
        if note:
            console.print(note)
    for line in spec_lines(analysis.probes):
        console.print(f"spec-decode: {line}")
    for collapse in analysis.probes.spec_collapses:
        console.print(f"ALERT: {collapse.line()}")


def render_json(analysis: Analysis, comparisons: Sequence[ComparisonReport] = ()) -> str:
    """Verdicts, rows, warnings, probe findings and events as one JSON document."""
    from soakgate.report.latency import latency_json
    from soakgate.report.outcome_table import gate_dict, outcome_dict
    from soakgate.report.outcomes import analysis_outcomes
    from soakgate.report.placement import placements
    from soakgate.report.probe_tables import probes_json
    from soakgate.report.verdicts import verdict_dict

    document = {
        "comparisons": [verdict_dict(c) for c in comparisons],
        "gates": [gate_dict(c.gate) for c in comparisons if c.gate is not None],
        "no_comparison": None if comparisons else why_not_compared(analysis),
        "outcomes": [outcome_dict(o) for o in analysis_outcomes(analysis)],
        "units": summary_rows(analysis),
        "warnings": analysis.warnings,
        "probes": probes_json(analysis.probes) if analysis.probes is not None else None,
        "uptime": uptime_json(analysis),
        "latency": latency_json(analysis),
        "events": [
            {"run_id": e.run_id, "at": e.at, "kind": e.kind, "target": e.target, "data": e.data}
            for e in analysis.events
        ],
    }
    if placed := placements(analysis):  # a Ray campaign: the node of each unit
        document["placement"] = [dataclasses.asdict(p) for p in placed]
    return json.dumps(document, indent=2, default=str)


def render_csv(analysis: Analysis, comparisons: Sequence[ComparisonReport] = ()) -> str:
    """One CSV row per unit and aggregate; errors_by_class as JSON in its cell; each unit's
    latency quantiles in seconds (empty for aggregates and untimed units)."""
    from soakgate.report.latency import csv_columns, csv_values, unit_latencies

    timed = {(u.label, u.target): u for u in unit_latencies(analysis)}
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, (*COLUMNS, *OUTCOME_COLUMNS, *csv_columns()),
                            lineterminator="\n")  # fmt: skip
    writer.writeheader()
    for row in summary_rows(analysis):
        latency = csv_values(timed.get((row["label"], row["target"])))
        writer.writerow({**row, "errors_by_class": json.dumps(row["errors_by_class"]), **latency})
    return buffer.getvalue()


_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>&|~#!{}$])")
"""What can open an inline construct, a raw HTML tag or an entity anywhere in a line, and the
table's cell separator, and GitHub's math delimiter (CommonMark: any ASCII punctuation may be
backslash-escaped)."""
_MARKDOWN_BLOCK_START = re.compile(r"^(\d{0,9})((?<=\d)[.)](?=\s|$)|(?<!\d)[-+=])")
"""What opens a block at the start of a line (a list item, an ordered one, a heading's
underline): a list item's text starts its line."""


def markdown_text(text: str) -> str:
    """The one place text enters a Markdown document: any string (a label, a target, a model,
    a server's words) shows as itself in a cell, a list item or bold, never as Markdown or
    HTML. Newlines become spaces, control characters escapes (`soakgate.terminal`)."""
    from soakgate.terminal import printable

    flat = printable(text).replace("\n", " ").replace("\t", " ").lstrip()
    return _MARKDOWN_BLOCK_START.sub(r"\1\\\2", _MARKDOWN_SPECIAL.sub(r"\\\1", flat))


def render_markdown(analysis: Analysis, comparisons: Sequence[ComparisonReport] = ()) -> str:
    """The verdicts, then a GitHub-flavoured Markdown table, warnings as a list."""
    from soakgate.report.verdicts import verdict_lines

    lines = [f"**{markdown_text(v)}**" for v in verdict_lines(list(comparisons),
                                                       why_not_compared(analysis))]  # fmt: skip
    lines += [f"**{markdown_text(r.gate.headline())}**" for r in comparisons if r.gate is not None]
    lines += [""] if lines else []
    lines += _markdown_outcomes(analysis)
    lines += ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += [
        "| " + " | ".join(markdown_text(c) for c in cells) + " |"
        for cells in display_rows(analysis)
    ]
    if analysis.warnings:
        lines += ["", "**Methodology warnings**", ""]
        lines += [f"- {markdown_text(w)}" for w in analysis.warnings]
    if analysis.probes is not None:
        lines += _markdown_probes(analysis)
    lines += _markdown_latency(analysis)
    uptime = uptime_lines(analysis)
    if uptime:
        lines += ["", f"**{markdown_text(uptime[0])}**", ""] + [
            f"- {markdown_text(u.strip())}" for u in uptime[1:]
        ]
    return "\n".join(lines) + "\n"


def _markdown_latency(analysis: Analysis) -> list[str]:
    from soakgate.report.latency import HEADERS as LATENCY_HEADERS
    from soakgate.report.latency import NOTE, TITLE, table_rows, unit_latencies

    rows = unit_latencies(analysis)
    if not rows:
        return []
    lines = ["", f"**{markdown_text(TITLE)}**", "", "| " + " | ".join(LATENCY_HEADERS) + " |"]
    lines.append("|" + "---|" * len(LATENCY_HEADERS))
    lines += [
        "| " + " | ".join(markdown_text(c) for c in cells) + " |" for cells in table_rows(rows)
    ]
    return [*lines, "", markdown_text(NOTE)]


def _markdown_outcomes(analysis: Analysis) -> list[str]:
    from soakgate.report.outcome_table import OUTCOME_NOTE, outcome_table, twin_readings
    from soakgate.report.outcomes import analysis_outcomes

    outcomes = analysis_outcomes(analysis)
    headers, rows = outcome_table(outcomes)
    lines = ["**Failures per unit**", "", "| " + " | ".join(headers) + " |"]
    lines.append("|" + "---|" * len(headers))
    lines += ["| " + " | ".join(markdown_text(c) for c in row) + " |" for row in rows]
    twins = [f"- {markdown_text(line)}" for line in twin_readings(outcomes)]
    return [*lines, "", markdown_text(OUTCOME_NOTE), "", *([*twins, ""] if twins else [])]


def _markdown_probes(analysis: Analysis) -> list[str]:
    from soakgate.report.probe_tables import probe_sections, spec_lines

    assert analysis.probes is not None
    lines: list[str] = []
    collapses = analysis.probes.spec_collapses
    if collapses:
        lines += ["", "**Speculative-decoding collapses**", ""]
        lines += [f"- {markdown_text(c.line())}" for c in collapses]
    for title, headers, rows, note in probe_sections(analysis.probes):
        lines += ["", f"**{markdown_text(title)}**", "", "| " + " | ".join(headers) + " |"]
        lines.append("|" + "---|" * len(headers))
        lines += ["| " + " | ".join(markdown_text(c) for c in cells) + " |" for cells in rows]
        lines += ["", markdown_text(note)] if note else []
    spec = spec_lines(analysis.probes)
    if spec:
        lines += ["", "**Speculative-decoding watch**", ""] + [
            f"- {markdown_text(x)}" for x in spec
        ]
    return lines


RENDERERS = {
    "table": render_table, "json": render_json, "csv": render_csv, "markdown": render_markdown,
}  # fmt: skip
