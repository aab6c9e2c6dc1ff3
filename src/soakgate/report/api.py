"""What the `report`, `compare` and `export` commands call: database path in, text out.

Each goes load (`load`: columns per unit) -> analyse (`analyze`, `comparisons`: results) ->
render (`tables`, `compare_text`, `html`: text and pages).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from soakgate.errors import StoreError, UsageError
from soakgate.records import CHECKS, Run
from soakgate.report.export import Selection
from soakgate.report.gate import GateOptions
from soakgate.report.model import Analysis, ClusteringOptions
from soakgate.stats.outcomes import COLLAPSE, OUTCOMES, SHIFTED, SUSPECT
from soakgate.store import SqliteStore
from soakgate.store.columns import read_failure

if TYPE_CHECKING:
    from soakgate.report.comparisons import ComparisonReport
    from soakgate.stats.pilot import PilotEstimate

__all__ = [
    "collapse_report", "compare", "default_comparisons", "export", "load_analysis",
    "load_pilot", "report",
]  # fmt: skip


@contextmanager
def existing_store(db: str | Path) -> Iterator[SqliteStore]:
    """Open an existing soakgate database read-only (analysis never creates, migrates or writes
    its input); a database found damaged while it is read is one StoreError line."""
    from soakgate.store import open_analysis

    store = open_analysis(db)
    try:
        yield store
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"cannot read database {db}: {read_failure(exc)}") from None
    finally:
        store.close()


def load_analysis(
    db: str | Path,
    options: ClusteringOptions | None = None,
    clustering: bool = True,
    contexts: bool = False,
) -> Analysis:
    """Analyse a database file (read-only, columns only; see `load.load_path`); `contexts`: also
    what surrounded each exemplar, for the HTML report."""
    from soakgate.report.analyze import analyze_columns
    from soakgate.report.load import load_path

    try:
        columns = load_path(db, contexts)
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"cannot read database {db}: {read_failure(exc)}") from None
    analysis = analyze_columns(columns, options, clustering)
    if not analysis.units:
        raise UsageError(f"{db} holds no generations")
    return analysis


def report(
    db: str | Path,
    fmt: str = "table",
    html: str | Path | None = None,
    options: ClusteringOptions | None = None,
    clustering: bool = True,
) -> str:
    """The report in `fmt`, opening with the verdict of every label against the first (when
    their units match); with `html`, also write the HTML report."""
    from soakgate.report.tables import RENDERERS

    if fmt not in RENDERERS:
        raise UsageError(f"unknown format {fmt!r}; choose from {', '.join(RENDERERS)}")
    analysis = load_analysis(db, options, clustering, contexts=html is not None)
    # The comparisons' own clustering tests are shown only in the HTML page's details; the
    # verdicts never depend on them.
    comparisons = default_comparisons(analysis, options, clustering and html is not None)
    if html is not None:
        from soakgate.report.html import render_html, write_html

        title = f"soakgate report: {Path(db).name}"
        write_html(html, render_html(analysis, comparisons, title=title))
    return RENDERERS[fmt](analysis, comparisons)


def collapse_report(db: str | Path, request_id: str, fmt: str = "table") -> str:
    """`soakgate report DB --collapse ID`: what surrounded one stored generation, as text, or
    as one JSON document with `fmt` json (report/collapse.py)."""
    from soakgate.report.collapse import collapse_context

    with existing_store(db) as store:
        context = collapse_context(store, request_id)
    if fmt == "json":
        return json.dumps(context.as_dict(), indent=2, default=str)
    lines = context.lines()
    lines.append(
        f"  replay it: soakgate replay {db} --collapsed --run {context.row.run_id} --target URL"
    )
    return "\n".join(lines)


def default_comparisons(
    analysis: Analysis, options: ClusteringOptions | None, clustering: bool = True
) -> list[ComparisonReport]:
    """Every label against the first one (Holm), when all labels are the same kind of unit;
    without `clustering`, the comparisons skip the costly clustering tests too."""
    import dataclasses

    from soakgate.report.comparisons import default_comparisons as compare_labels

    options = options or ClusteringOptions()
    if not clustering:
        options = dataclasses.replace(options, gap_permutations=0, hmm_replicates=0)
    return compare_labels(analysis, options)


class CompareResult(NamedTuple):
    """What `soakgate compare` prints, and whether the gate fails (a finding: exit 1 with
    --fail-on-differ)."""

    text: str
    differ: bool


COMPARE_OUTCOMES = ("all", *OUTCOMES)


def compare(
    db: str | Path,
    a: str | None,
    b: str | None,
    baseline: str | None = None,
    plan: str | Path | None = None,
    allow_unit_mismatch: bool = False,
    alpha: float = 0.05,
    options: ClusteringOptions | None = None,
    outcome: str = "all",
    gate: GateOptions | None = None,
) -> CompareResult:
    """`soakgate compare`: one pair, a --baseline family, or a --plan's rule. Every outcome both
    arms measured is judged (crashes, server errors, collapses, suspect generations, divergence,
    any failure; `outcome` names one to judge alone), the family-wise error held by Holm, and
    the gate's line opens the text; collapses (or, for `outcome` `suspect`, reference scoring's
    suspect / scored rows) follow in detail. `differ`: the gate fails (report/gate.py), or
    under --plan the registered decision is DIFFER."""
    import dataclasses

    from soakgate.report.compare_text import render_comparison
    from soakgate.report.comparisons import attach_differential, attach_gates
    from soakgate.report.gate import gate_lines
    from soakgate.report.latency import compare_latency

    if outcome not in COMPARE_OUTCOMES:
        raise UsageError(f"--outcome must be one of {', '.join(COMPARE_OUTCOMES)}, not {outcome!r}")
    analysis = load_analysis(db, options, clustering=False)
    scoring = outcome in (SUSPECT, SHIFTED)
    detail = _scoring_view(analysis, plan, outcome) if scoring else analysis
    reports = _compare_reports(detail, a, b, baseline, plan, allow_unit_mismatch, alpha, options)
    if not scoring:
        attach_differential(analysis, reports, options)
        for item in reports:
            item.latency = compare_latency(analysis, *item.units)
    judged = tuple(o for o in OUTCOMES if outcome in ("all", o))
    if plan is not None:  # the registered collapse decision stands on its own, as registered
        judged = tuple(o for o in judged if o != COLLAPSE)
    gate = dataclasses.replace(gate or GateOptions(), outcomes=judged)
    if judged:
        attach_gates(analysis, reports, alpha if plan is None else reports[0].comparison.alpha,
                     options, gate)  # fmt: skip
    gates = [line for r in reports if r.gate is not None for line in gate_lines(r.gate)]
    heading = "gate (every outcome of B against A; Holm across outcomes and arms):"
    parts = [heading + "\n" + "\n".join(gates)] if gates else []
    details = [] if outcome in CHECKS else [render_comparison(r) for r in reports]
    text = "\n\n".join([*parts, *details])
    if outcome in CHECKS:
        text = (
            f"outcome: {outcome} (integrity check): answered generations that failed it / "
            "answered generations it judged per arm, from the runs that ran it\n" + text
        )
    if outcome == SUSPECT:
        text = (
            "outcome: suspect (reference scoring): suspect / scored generations per arm, in place "
            "of collapses / answered generations\n" + text
        )
    if outcome == SHIFTED:
        text = (
            "outcome: shifted (reference scoring): scored generations whose soak z (typicality "
            "in a greedy soak, mean surprisal where the reference gave no alternatives) is "
            "above the calibration's 90th percentile / scored generations per arm (a "
            "reference-like unit has 10%), in place of collapses / answered generations\n" + text
        )
    if baseline is not None:
        text = (
            f"{len(reports)} comparisons against {baseline}, Holm-adjusted (method='holm')\n\n"
            + text
        )
    warnings = [f"warning: {w}" for w in analysis.warnings]
    fails = any(r.gate.fails for r in reports if r.gate is not None)
    planned = any(r.decision is not None and r.decision.verdict == "differ" for r in reports)
    return CompareResult("\n".join([text, *warnings]), fails or planned)


def _compare_reports(
    analysis: Analysis, a: str | None, b: str | None, baseline: str | None,
    plan: str | Path | None, allow_unit_mismatch: bool, alpha: float,
    options: ClusteringOptions | None,
) -> list[ComparisonReport]:  # fmt: skip
    """The comparisons asked for: a --plan's two arms, a --baseline family, or A B."""
    from soakgate.report.comparisons import compare_baseline, compare_units, compare_with_plan

    if plan is not None:
        if baseline:
            raise UsageError("--plan names its own arms; give no --baseline with it")
        given = (a, b) if a or b else None
        return [compare_with_plan(analysis, plan, options, allow_unit_mismatch, given)]
    if baseline is not None:
        if a or b:
            raise UsageError("give either A B or --baseline LABEL, not both")
        return compare_baseline(analysis, baseline, options, allow_unit_mismatch, alpha)
    if not a or not b:
        raise UsageError("give two arms A B (LABEL or LABEL@TARGET), --baseline or --plan")
    return [compare_units(analysis, a, b, options, allow_unit_mismatch, alpha)]


def _scoring_view(analysis: Analysis, plan: str | Path | None, outcome: str) -> Analysis:
    """The analysis with each unit's counts replaced by reference scoring's (suspect / scored,
    or shifted / scored); a plan registers a collapse comparison, so it is refused here."""
    import dataclasses

    from soakgate.report.reference import shifted_units, suspect_units

    if plan is not None:
        raise UsageError(f"--plan judges collapses as registered; --outcome {outcome} takes A B "
                         "or --baseline")  # fmt: skip
    if not analysis.columns.reference:
        raise UsageError("no run in the database was soaked with reference scoring "
                         "(--score-reference or --reference-model)")  # fmt: skip
    reference = analysis.columns.reference
    units = (suspect_units(analysis.units, reference) if outcome == SUSPECT
             else shifted_units(analysis.units, reference, analysis.runs))  # fmt: skip
    return dataclasses.replace(analysis, units=units)


def load_pilot(db: str | Path, label: str | None = None) -> PilotEstimate:
    """A pilot estimate for `soakgate plan --pilot`: every run of every target of `label` (or
    of every label) as its own time-ordered sequence of answered generations."""
    from soakgate.stats.pilot import pilot_estimate

    analysis = load_analysis(db, clustering=False)
    if label is not None and label not in analysis.labels:
        known = ", ".join(analysis.labels)
        raise UsageError(f"no label {label!r} in {db} (have: {known})")
    sequences = [
        part.clean_sequence
        for (row_label, _), group in sorted(analysis.columns.slices.items())
        if label is None or row_label == label
        for part in group
        if part.ok.any()
    ]
    source = f"{Path(db).name}" + (f" label {label}" if label else " (all labels)")
    return pilot_estimate(source, sequences)


def export(
    db: str | Path, fmt: str, out: str | Path | None = None, *, table: str = "generations",
    selection: Selection | None = None,
) -> int:  # fmt: skip
    """Export one table (`generations`, `runs` or `events`) of the selected runs (None: all);
    returns the count written."""
    from soakgate.report.export import export as export_rows

    if out is not None and Path(out).resolve() == Path(db).resolve():
        raise UsageError(f"refusing to export over the database itself ({db}); give --out FILE")
    if fmt == "parquet" and out is not None and table == "generations":
        written = _export_parquet(db, Path(out), selection or Selection())
        if written is not None:
            return written
    with existing_store(db) as store:
        return export_rows(store, fmt, out, table=table, selection=selection, db=db)


def _export_parquet(db: str | Path, out: Path, selection: Selection) -> int | None:
    """Parquet straight from Arrow batches (`report.parquet`), or None where the Arrow reader
    cannot be used (not installed, or the file is open elsewhere in this process)."""
    from soakgate.report.export import metadata, schema
    from soakgate.report.parquet import write_parquet
    from soakgate.store.columns import arrow_available
    from soakgate.store.sqlite import read_only_uri

    with existing_store(db) as store:
        if not arrow_available() or store.shared_in_process:
            return None
        present = store.generation_columns()
        stored = store.runs()
        chosen = selection.resolve(stored) if selection.filtered else None
    runs = chosen if chosen is not None else sorted(stored, key=lambda r: r.run_id)
    run_ids = None if chosen is None else [run.run_id for run in chosen]
    arrow_schema = schema("generations", metadata("generations", db, selection, runs))
    try:
        return write_parquet(db, read_only_uri(Path(db)), present, out, arrow_schema, run_ids)
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None


class CampaignVerdicts(NamedTuple):
    """What `soakgate campaign` prints after its blocks: the crashes of each configuration and
    every other configuration's gate against the baseline."""

    lines: list[str]
    crashed: dict[str, int]
    """Label -> crashes of its servers (targets and reference instances) in the campaign."""
    gate_fails: bool
    """Some configuration's gate failed against the baseline."""


def campaign_verdicts(
    db: str | Path, campaign: str, baseline: str | None = None, alpha: float = 0.05,
    gate: GateOptions | None = None,
) -> CampaignVerdicts:  # fmt: skip
    """The campaign's own summary: one line per configuration whose servers crashed (a crash
    of a reference instance is its configuration's), then each other configuration judged
    against `baseline` (the campaign's reference, else its first configuration) on every
    outcome, in one Holm family, over every run of those labels in the database."""
    from soakgate.report.comparisons import attach_gates, compare_baseline
    from soakgate.report.gate import gate_lines

    analysis = load_analysis(db, clustering=False)
    crashed, lines = _campaign_crashes(analysis, campaign)
    mine = [r for r in analysis.runs if _campaign_of(r) == campaign]
    base = baseline or next((_reference_of(r) for r in mine if _reference_of(r)), None)
    base = base or (mine[0].label if mine else None)
    fails = False
    labels = list(dict.fromkeys(r.label for r in mine))
    if base is not None and len(labels) > 1 and base in labels:
        try:
            reports = compare_baseline(analysis, base, None, allow_unit_mismatch=False,
                                       alpha=alpha)  # fmt: skip
        except UsageError as exc:  # e.g. a block that stored nothing: its crashes still count
            return CampaignVerdicts([*lines, f"no gate: {exc}"], crashed, False)
        attach_gates(analysis, reports, alpha, None, gate)
        lines.append(f"gate: every configuration against {base} (Holm across outcomes and "
                     "configurations):")  # fmt: skip
        lines += [line for r in reports if r.gate is not None for line in gate_lines(r.gate)]
        fails = any(r.gate.fails for r in reports if r.gate is not None)
    return CampaignVerdicts(lines, crashed, fails)


def _campaign_of(run: Run) -> str | None:
    context = run.load.get("campaign")
    return str(context.get("campaign")) if isinstance(context, dict) else None


def _reference_of(run: Run) -> str | None:
    context = run.load.get("campaign")
    reference = context.get("reference") if isinstance(context, dict) else None
    return str(reference) if reference else None


def _campaign_crashes(analysis: Analysis, campaign: str) -> tuple[dict[str, int], list[str]]:
    """Label -> crashes in the campaign's runs, and one line per label that crashed (and per
    label whose node was lost under it: a line, never a crash of the configuration)."""
    from collections import Counter

    from soakgate.report.outcomes import CRASH_EVENT, is_crash

    runs = {r.run_id: r for r in analysis.runs if _campaign_of(r) == campaign}
    crashes: Counter[str] = Counter()
    lost: Counter[str] = Counter()
    causes: dict[str, Counter[str]] = {}
    for event in analysis.events:
        run = runs.get(event.run_id)
        if run is None or event.kind != CRASH_EVENT or event.target is None:
            continue
        label = run.label
        if event.target not in run.targets and _reference_of(run):  # a reference instance
            label = str(_reference_of(run))
        cause = event.data.get("cause", "unknown")
        if not is_crash(event.kind, cause):
            lost[label] += 1
            continue
        crashes[label] += 1
        causes.setdefault(label, Counter())[str(cause)] += 1
    lines = [
        f"configuration {label}: its servers crashed {count} time(s) ("
        + ", ".join(f"{cause}: {n}" for cause, n in sorted(causes[label].items()))
        + ")"
        for label, count in crashes.items()
    ]
    lines += [
        f"configuration {label}: the node under its server was lost {count} time(s) "
        "(not counted as the server's crashes)"
        for label, count in lost.items()
    ]
    return dict(crashes), lines
