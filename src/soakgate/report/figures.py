"""Figures of the HTML report as SVG data URIs: forest plot, timelines, throughput, probes.

Data URIs keep the report one self-contained file, and an SVG shown through <img> cannot
run script, so labels and target names inside figures cannot inject anything.
"""

from __future__ import annotations

import base64
import io
from typing import TYPE_CHECKING, Any

import numpy as np

from soakgate.report.bins import EventMark, Throughput, Timeline, time_scale
from soakgate.report.model import Analysis
from soakgate.report.probes import SpecSeries, Sweep
from soakgate.report.reference import ReferenceUnit

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

COLLAPSE = "#d62728"
ERROR = "#ff7f0e"
CLEAN = "#9aa5b1"
EVENT = "#6f42c1"
AGGREGATE_COLOR = "#555555"
_PALETTE = ["#1f77b4", "#9467bd", "#2ca02c", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
            "#7f7f7f", "#ff7f0e", "#d62728"]  # fmt: skip


def _figure(width: float, height: float) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)  # a renderer to measure text with
    return figure


def to_data_uri(figure: Figure) -> str:
    """Serialise a figure as a base64 SVG data URI (deterministic: no date, fixed ids)."""
    import matplotlib

    buffer = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": "soakgate", "svg.fonttype": "none"}):
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    return "data:image/svg+xml;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


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


LABEL_ROWS = 3  # event labels are stacked in up to this many rows before one is left out


def _mark_events(axes: Axes, marks: tuple[EventMark, ...], labelled: bool) -> list[Any]:
    """A dashed line per mark; on the `labelled` axes, labels placed where they overlap no
    other (stacked in LABEL_ROWS rows; one that fits nowhere is left off). Needs a drawn
    figure (to measure text); returns the labels placed."""
    placed: list[Any] = []
    if not marks:
        return placed
    for mark in marks:
        axes.axvline(mark.at, color=EVENT, lw=1.0, ls="--", alpha=0.8)
    if not labelled:
        return placed
    renderer = axes.figure.canvas.get_renderer()  # type: ignore[attr-defined]
    for mark in marks:
        for row in range(LABEL_ROWS):
            text = axes.annotate(
                f" {mark.label}", (mark.at, 0.97 - 0.16 * row),
                xycoords=("data", "axes fraction"), fontsize=7, color=EVENT, va="top",
                ha="left", annotation_clip=False,
            )  # fmt: skip
            text.set_in_layout(False)
            box = text.get_window_extent(renderer).padded(3)  # a browser's font may be wider
            if not any(box.overlaps(other.get_window_extent(renderer)) for other in placed):
                placed.append(text)
                break
            text.remove()
    return placed


def _density(axes: Axes, edges: Any, counts: Any, low: float, high: float, color: str,
             floor: float = 0.4) -> None:  # fmt: skip
    """One row of the strip: a bar per bin as tall as its count against the busiest bin, and
    at least `floor` of the row for any count at all (one event stays visible)."""
    top = max(float(counts.max()), 1.0)
    share = np.where(counts > 0, floor + (1.0 - floor) * counts / top, 0.0)
    axes.stairs(low + (high - low) * share, edges, baseline=low, fill=True, color=color, lw=0)


def timeline_figure(data: Timeline) -> Figure:
    """One target over time, binned: collapses (red), failed requests (orange) and requests
    (grey) per bin as density rows, any collapse at least 40% of its row (a lone collapse
    stays visible); the rolling collapse
    rate's peak per bin below (a line broken at idle gaps); events as dashed lines, labelled
    without overprinting."""
    figure = _figure(11.0, 2.8)
    strip, rolling = figure.subplots(2, 1, sharex=True, height_ratios=(1, 2))
    edges = data.edges
    _density(strip, edges, data.requests, 0.0, 0.3, CLEAN, floor=0.0)
    _density(strip, edges, data.failed, 0.35, 0.6, ERROR)
    _density(strip, edges, data.collapsed, 0.65, 1.0, COLLAPSE)
    strip.set_ylim(0.0, 1.0)
    strip.set_yticks([])
    strip.set_ylabel("requests", fontsize=8)
    if not np.all(np.isnan(data.rolling)):
        rolling.stairs(data.rolling, edges, color=COLLAPSE, lw=1.2)  # NaN bins: breaks
    rolling.set_ylabel(f"% collapsed\n(peak of last {data.window})", fontsize=8)
    rolling.set_xlabel(f"{data.unit_name} since the first request")
    rolling.set_ylim(bottom=0.0)
    rolling.set_xlim(edges[0], edges[-1])
    rolling.grid(alpha=0.3)
    figure.suptitle(f"{data.name}: {data.collapses} collapses, {data.errors} errors", fontsize=10)
    figure.draw_without_rendering()  # settle the layout before measuring labels
    for axes in (strip, rolling):
        axes.spines[["top", "right"]].set_visible(False)
        _mark_events(axes, data.events, labelled=axes is rolling)
    figure.set_layout_engine("none")  # keep the measured layout when saving
    return figure


def timeline(data: Timeline) -> str:
    """`timeline_figure` as a data URI."""
    return to_data_uri(timeline_figure(data))


def throughput_figure(data: Throughput) -> Figure:
    """Completion tokens per second over time per unit: solid, of clean generations (answered,
    flagged by no detector); dotted in
    the same colour, of collapsed ones (degenerate output served at full speed is a signal)."""
    figure = _figure(11.0, 3.2)
    axes = figure.add_subplot()
    for index, (name, values) in enumerate(data.clean.items()):
        color = _PALETTE[index % len(_PALETTE)]
        axes.plot(data.centres, values, lw=1.3, color=color, label=f"{name} clean")
        if name in data.collapsed:
            axes.plot(data.centres, data.collapsed[name], lw=1.3, ls=":", color=color,
                      label=f"{name} collapsed")  # fmt: skip
    axes.set_xlabel(f"{data.unit_name} since the first request")
    axes.set_ylabel("completion tok/s")
    axes.set_ylim(bottom=0.0)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, loc="lower right", ncols=2)
    axes.spines[["top", "right"]].set_visible(False)
    return figure


def throughput(data: Throughput) -> str:
    """`throughput_figure` as a data URI."""
    return to_data_uri(throughput_figure(data))


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


def reference_plot(unit: ReferenceUnit) -> str:
    """A unit's score distribution (counts on a log scale) against its calibration: the
    threshold, and the calibration samples' 50/90/99% quantiles and maximum."""
    figure = _figure(10.0, 2.6)
    axes = figure.add_subplot()
    calibration = unit.calibration
    threshold = float(calibration.get("threshold", np.nan))
    high = max(float(unit.scores.max()) if len(unit.scores) else 1.0, threshold) * 1.05
    edges = np.linspace(0.0, high, 61)
    counts, _ = np.histogram(unit.scores, edges)
    flagged = edges[:-1] >= threshold
    axes.bar(edges[:-1], counts, width=np.diff(edges), align="edge",
             color=np.where(flagged, COLLAPSE, CLEAN))  # fmt: skip
    axes.set_yscale("symlog", linthresh=1)
    axes.axvline(threshold, color=COLLAPSE, linestyle="--", label="threshold")
    for name, value in (calibration.get("quantiles") or {}).items():
        axes.axvline(float(value), color=EVENT, linewidth=0.8, alpha=0.6)
        axes.annotate(f"cal {name}", (float(value), 1), rotation=90, fontsize=7, color=EVENT,
                      va="bottom")  # fmt: skip
    axes.set_xlabel("score: worst token's surprisal under the reference (nats)")
    axes.set_ylabel("generations")
    axes.set_title(f"{unit.name}: scored generations against the calibration", fontsize=10)
    axes.legend(loc="upper right", fontsize=8)
    return to_data_uri(figure)


def latency_plot(series: list[tuple[str, dict[str, Any]]]) -> str:
    """Each unit's distribution of end-to-end latency and time to first token: empirical CDFs
    on a log time axis, one line per unit (units in the palette's order). `series` holds
    (unit name, measure -> values in seconds)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    figure = _figure(10.0, 3.0)
    panels = [("end_to_end", "end-to-end latency (s)"), ("ttft", "time to first token (s)")]
    for index, (measure, label) in enumerate(panels, 1):
        axes = figure.add_subplot(1, 2, index)
        for number, (name, values) in enumerate(series):
            finite = np.sort(values[measure][np.isfinite(values[measure])])
            finite = finite[finite > 0]  # a log axis
            if not len(finite):
                continue
            share = np.arange(1, len(finite) + 1) / len(finite)
            axes.step(finite, share, where="post", label=name,
                      color=_PALETTE[number % len(_PALETTE)], linewidth=1.2)  # fmt: skip
        spread = [v[measure][np.isfinite(v[measure]) & (v[measure] > 0)] for _, v in series]
        pooled = np.concatenate(spread) if spread else np.zeros(0)
        if len(pooled) and pooled.max() > 10 * pooled.min():  # a log axis where it spans decades
            axes.set_xscale("log")
            axes.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            axes.xaxis.set_minor_formatter(NullFormatter())
        # plain tick labels: the report draws with mathtext off, and the default labels of a
        # log axis (`$10^{-1}$`) or an offset are mathtext
        axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        axes.set_xlabel(label)
        axes.set_ylabel("share of answered generations")
        axes.set_ylim(0, 1.0)
        axes.grid(True, alpha=0.3)
        if index == 1 and series:
            axes.legend(loc="lower right", fontsize=8)
    return to_data_uri(figure)
