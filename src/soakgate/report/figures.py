"""Figures of the HTML report as SVG data URIs: forest plot, timelines, throughput, probes.

Data URIs keep the report one self-contained file, and an SVG shown through <img> cannot
run script, so labels and target names inside figures cannot inject anything.
"""

from __future__ import annotations

import base64
import io
from typing import TYPE_CHECKING

import numpy as np

from soakgate.records import Event, Generation
from soakgate.report.model import Analysis, Unit

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from soakgate.report.probes import SpecSeries, Sweep

COLLAPSE = "#d62728"
ERROR = "#ff7f0e"
CLEAN = "#9aa5b1"
EVENT = "#6f42c1"
AGGREGATE_COLOR = "#555555"
_PALETTE = ["#1f77b4", "#9467bd", "#2ca02c", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
            "#7f7f7f", "#ff7f0e", "#d62728"]  # fmt: skip


def _figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=100, layout="constrained")
    return figure


def to_data_uri(figure: Figure) -> str:
    """Serialise a figure as a base64 SVG data URI (deterministic: no date, fixed ids)."""
    import matplotlib

    buffer = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": "soakgate", "svg.fonttype": "none"}):
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    return "data:image/svg+xml;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def time_scale(span_s: float) -> tuple[float, str]:
    """Divisor and unit name for a time axis of this span."""
    if span_s > 3 * 3600:
        return 3600.0, "hours"
    if span_s > 180:
        return 60.0, "minutes"
    return 1.0, "seconds"


def forest_plot(analysis: Analysis) -> str:
    """Collapse rate with exact 95% CI per unit and aggregate; zero rows show the bound."""
    units = [u for u in analysis.units if u.rate is not None]
    palette = dict(zip(analysis.labels, _PALETTE * (len(analysis.labels) // 10 + 1), strict=False))
    figure = _figure(10.0, 1.2 + 0.42 * max(len(units), 2))
    axes = figure.add_subplot()
    for row, unit in enumerate(reversed(units)):
        rate = unit.rate
        assert rate is not None
        color = AGGREGATE_COLOR if unit.aggregate else palette[unit.label]
        high = rate.upper_bound_one_sided or rate.ci_high
        low = 0.0 if rate.upper_bound_one_sided is not None else rate.ci_low
        axes.plot([100 * low, 100 * high], [row, row], color=color, lw=2.2, solid_capstyle="butt")
        marker = "D" if unit.aggregate else "o"
        axes.plot([100 * rate.rate], [row], marker=marker, color=color, ms=7)
        axes.text(100 * high, row, f"  {rate.events}/{rate.n:,}", va="center", fontsize=8)
    axes.set_yticks(range(len(units)))
    axes.set_yticklabels(
        [f"{u.label} · all targets" if u.aggregate else u.name for u in reversed(units)]
    )
    axes.set_xlabel("collapse rate, % (exact 95% CI; zero collapses: one-sided 95% bound)")
    axes.set_xlim(left=0.0)
    axes.set_ylim(-0.7, len(units) - 0.3)
    axes.margins(x=0.18)
    axes.grid(axis="x", alpha=0.3)
    axes.spines[["top", "right"]].set_visible(False)
    return to_data_uri(figure)


def _mark_events(
    axes: Axes, events: list[Event], origin: float, scale: float, labelled: bool
) -> None:
    for event in events:
        x = (event.at - origin) / scale
        axes.axvline(x, color=EVENT, lw=1.2, ls="--", alpha=0.8)
        if labelled:
            axes.annotate(f" {event.kind}", (x, 0.97), xycoords=("data", "axes fraction"),
                          fontsize=7, color=EVENT, va="top", ha="left")  # fmt: skip


def timeline(unit: Unit, rows: list[Generation], events: list[Event]) -> str:
    """One target over time: every collapse as a red line (bursts stand out), errors in orange,
    rolling collapse rate above, events (faults, restarts) as dashed lines."""
    figure = _figure(11.0, 2.6)
    strip, rolling = figure.subplots(2, 1, sharex=True, height_ratios=(1, 2))
    origin = min(g.started_at for g in rows)
    scale, unit_name = time_scale(max(g.started_at for g in rows) - origin)
    times = np.array([(g.started_at - origin) / scale for g in rows])
    collapsed = np.array([g.collapsed for g in rows])
    failed = np.array([not g.ok for g in rows])
    strip.vlines(times[~collapsed & ~failed], 0, 1, color=CLEAN, lw=0.3, alpha=0.35)
    strip.vlines(times[failed], 0, 1, color=ERROR, lw=1.0)
    strip.vlines(times[collapsed], 0, 1, color=COLLAPSE, lw=1.4)
    strip.set_yticks([])
    strip.set_ylabel("requests", fontsize=8)
    clean = ~failed
    window = max(20, int(clean.sum()) // 60)
    ordered = collapsed[clean].astype(float)
    if len(ordered) >= window:
        running = np.convolve(ordered, np.ones(window) / window, mode="valid") * 100
        rolling.plot(times[clean][window - 1 :], running, color=COLLAPSE, lw=1.2)
    rolling.set_ylabel(f"% collapsed\n(last {window})", fontsize=8)
    rolling.set_xlabel(f"{unit_name} since the first request")
    rolling.set_ylim(bottom=0.0)
    rolling.grid(alpha=0.3)
    for axes in (strip, rolling):
        axes.spines[["top", "right"]].set_visible(False)
        _mark_events(axes, events, origin, scale, labelled=axes is rolling)
    figure.suptitle(f"{unit.name}: {unit.collapses} collapses, {unit.errors} errors", fontsize=10)
    return to_data_uri(figure)


def throughput(analysis: Analysis, bins: int = 60) -> str | None:
    """Completion tokens per second over time, one line per unit (clean generations)."""
    units = [u for u in analysis.units if not u.aggregate]
    rows = [g for u in units for g in analysis.generations[(u.label, u.target)] if g.ok]
    if not rows:
        return None
    origin = min(g.started_at for g in rows)
    end = max(g.ended_at for g in rows)
    scale, unit_name = time_scale(end - origin)
    edges = np.linspace(origin, end, bins + 1)
    width = (end - origin) / bins or 1.0
    figure = _figure(11.0, 3.2)
    axes = figure.add_subplot()
    for unit in units:
        mine = [g for g in analysis.generations[(unit.label, unit.target)] if g.ok]
        ends = np.array([g.ended_at for g in mine])
        tokens = np.array([g.completion_tokens or 0 for g in mine], dtype=float)
        per_bin, _ = np.histogram(ends, bins=edges, weights=tokens)
        centres = ((edges[:-1] + edges[1:]) / 2 - origin) / scale
        shown = np.where(per_bin > 0, per_bin / width, np.nan)  # gaps stay gaps, not zeros
        axes.plot(centres, shown, lw=1.3, label=unit.name)
    axes.set_xlabel(f"{unit_name} since the first request")
    axes.set_ylabel("completion tok/s")
    axes.set_ylim(bottom=0.0)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, loc="lower right", ncols=2)
    axes.spines[["top", "right"]].set_visible(False)
    return to_data_uri(figure)


def sweep_plot(sweep: Sweep) -> str:
    """Throughput (tok/s, clean tok/s) and collapse rate with exact 95% CI against concurrency;
    the saturation point as a dashed line."""
    levels = sweep.levels
    x = np.array([level.concurrency for level in levels], dtype=float)
    figure = _figure(10.0, 3.0)
    speed, rate = figure.subplots(1, 2)
    speed.plot(x, [lv.tokens_per_s for lv in levels], "o-", color=_PALETTE[0], label="tok/s")
    clean = [lv.clean_tokens_per_s for lv in levels]
    speed.plot(x, clean, "s--", color=_PALETTE[2], label="clean tok/s")
    speed.set_ylabel("completion tok/s")
    speed.set_ylim(bottom=0.0)
    speed.legend(fontsize=8, loc="lower right")
    scored = [lv for lv in levels if lv.requests > lv.errors]
    middle = np.array([100 * lv.collapse_rate.rate for lv in scored])
    low = middle - np.array([100 * lv.collapse_rate.ci_low for lv in scored])
    high = np.array([100 * lv.collapse_rate.ci_high for lv in scored]) - middle
    rate.errorbar([lv.concurrency for lv in scored], middle, yerr=[low, high], fmt="o",
                  color=COLLAPSE, capsize=3)  # fmt: skip
    rate.set_ylabel("collapse rate, % (exact 95% CI)")
    rate.set_ylim(bottom=0.0)
    for axes in (speed, rate):
        axes.set_xscale("log", base=2)
        axes.set_xticks(x, [str(int(v)) for v in x])
        axes.set_xlabel("concurrency")
        axes.grid(alpha=0.3)
        axes.spines[["top", "right"]].set_visible(False)
        if sweep.saturation is not None:
            axes.axvline(sweep.saturation, color=EVENT, ls="--", lw=1.2)
    figure.suptitle(f"sweep {sweep.sweep_id}: saturation point {sweep.saturation or 'not reached'}",
                    fontsize=10)  # fmt: skip
    return to_data_uri(figure)


def acceptance_plot(target: str, series: list[SpecSeries]) -> str:
    """Speculative-decoding acceptance per scrape window over time, one line per run, collapses
    marked as red dashed lines."""
    points = [p for s in series for p in s.points]
    origin = min(t for t, _, _ in points)
    scale, unit_name = time_scale(max(t for t, _, _ in points) - origin)
    figure = _figure(10.0, 2.4)
    axes = figure.add_subplot()
    for index, s in enumerate(series):
        times = [(t - origin) / scale for t, a, _ in s.points if a is not None]
        shown = [100 * a for _, a, _ in s.points if a is not None]
        axes.plot(times, shown, ".-", lw=1.2, color=_PALETTE[index % len(_PALETTE)],
                  label=f"{s.label} ({s.run_id})")  # fmt: skip
        for collapse in s.collapses:
            axes.axvline((collapse.at - origin) / scale, color=COLLAPSE, ls="--", lw=1.2)
    axes.set_ylim(0.0, 100.0)
    axes.set_ylabel("acceptance, %")
    axes.set_xlabel(f"{unit_name} since the first window")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, loc="upper right", ncols=2)
    axes.spines[["top", "right"]].set_visible(False)
    figure.suptitle(f"{target}: speculative-decoding acceptance", fontsize=10)
    return to_data_uri(figure)
