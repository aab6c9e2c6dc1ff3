"""What the figures plot, binned to a fixed width so that a figure costs the same at any n.

A timeline has TIMELINE_BINS time bins (about one per pixel of the page): every bin holding a
collapse is marked, so a single collapse among millions of requests stays visible, and the
rolling collapse rate keeps its peak within each bin (a burst is never averaged away). A bin
without requests is a gap (NaN): lines break there instead of bridging idle time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from soakgate.records import Event
from soakgate.report.load import SliceColumns
from soakgate.report.model import Analysis, Unit

FloatArray = npt.NDArray[np.float64]
TIMELINE_BINS = 600
THROUGHPUT_BINS = 120
EVENT_SLOTS = 48
"""Events closer than 1/EVENT_SLOTS of the axis share one line and one label."""
QUIET_EVENTS = frozenset(
    {"ended", "started", "telemetry", "note", "spec_decode_absent", "spec_decode",
     "reference_baseline", "twin_baseline", "server_load"}
)  # fmt: skip
"""Bookkeeping and per-scrape events: kept in the events table, left off the timelines."""


def time_scale(span_s: float) -> tuple[float, str]:
    """Divisor and unit name for a time axis of this span."""
    if span_s > 3 * 3600:
        return 3600.0, "hours"
    if span_s > 180:
        return 60.0, "minutes"
    return 1.0, "seconds"


@dataclass(frozen=True, slots=True)
class EventMark:
    """Events close together on a timeline, drawn as one dashed line with one label."""

    at: float
    """Position on the time axis (in the axis's unit) of the first of them."""
    label: str
    """`kind`, `kind ×3`, or `kind, other +2` for several kinds."""
    count: int
    """Events in the mark."""


@dataclass(frozen=True, slots=True)
class Timeline:
    """One unit over time, binned."""

    name: str
    collapses: int
    errors: int
    edges: FloatArray
    """Bin edges, in `unit_name` since the first request."""
    unit_name: str
    requests: FloatArray
    """Requests started per bin."""
    failed: FloatArray
    """Failed requests per bin."""
    collapsed: FloatArray
    """Collapsed generations per bin."""
    rolling: FloatArray
    """Peak, within each bin, of the rolling collapse rate (%); NaN for a bin without data."""
    window: int
    """Answered generations in the rolling window."""
    events: tuple[EventMark, ...]


def _joined(parts: Sequence[SliceColumns], name: str) -> npt.NDArray[Any]:
    return np.concatenate([getattr(p, name) for p in parts])


def _rolling_peak(parts: Sequence[SliceColumns], origin: float, scale: float,
                  edges: FloatArray) -> tuple[FloatArray, int]:  # fmt: skip
    """Per bin, the highest rolling collapse rate whose window ends in it (NaN: none)."""
    ok = _joined(parts, "ok").astype(bool)
    ordered = _joined(parts, "collapsed")[ok].astype(np.float64)
    times = (_joined(parts, "started")[ok] - origin) / scale
    window = max(20, len(ordered) // 60)
    peak = np.full(len(edges) - 1, np.nan)
    if len(ordered) < window:
        return peak, window
    total = np.concatenate([[0.0], np.cumsum(ordered)])
    running = (total[window:] - total[:-window]) / window * 100
    where = np.clip(np.searchsorted(edges, times[window - 1 :], side="right") - 1, 0, len(peak) - 1)
    np.fmax.at(peak, where, running)
    return peak, window


def event_marks(events: Sequence[Event], origin: float, scale: float,
                span: float) -> tuple[EventMark, ...]:  # fmt: skip
    """Events grouped into at most EVENT_SLOTS marks along the axis."""
    width = span / EVENT_SLOTS if span > 0 else 1.0
    slots: dict[int, list[Event]] = {}
    for event in sorted(events, key=lambda e: e.at):
        slots.setdefault(int(((event.at - origin) / scale) // width), []).append(event)
    marks = []
    for group in slots.values():
        kinds = list(dict.fromkeys(e.kind for e in group))
        if len(kinds) == 1:
            label = kinds[0] + (f" ×{len(group)}" if len(group) > 1 else "")
        else:
            label = f"{kinds[0]}, {kinds[1]}" + (f" +{len(kinds) - 2}" if len(kinds) > 2 else "")
        marks.append(EventMark((group[0].at - origin) / scale, label, len(group)))
    return tuple(marks)


def unit_events(analysis: Analysis, unit: Unit, start: float, end: float) -> list[Event]:
    """The events a unit's timeline marks: its runs', for its target or none, within its span."""
    runs = set(unit.run_ids)
    return [
        e for e in analysis.events
        if e.run_id in runs and e.target in (None, unit.target) and start <= e.at <= end
        and e.kind not in QUIET_EVENTS
    ]  # fmt: skip


def timeline(analysis: Analysis, unit: Unit, bins: int = TIMELINE_BINS) -> Timeline | None:
    """The unit's timeline, or None when it has no generations."""
    parts = analysis.slices(unit.label, unit.target)
    if not parts:
        return None
    started = _joined(parts, "started")
    origin, last = float(started.min()), float(started.max())
    scale, unit_name = time_scale(last - origin)
    span = (last - origin) / scale or 1.0
    edges = np.linspace(0.0, span, bins + 1)
    times = (started - origin) / scale
    ok = _joined(parts, "ok").astype(bool)
    collapsed = _joined(parts, "collapsed").astype(bool)
    requests = np.histogram(times, edges)[0].astype(np.float64)
    failed = np.histogram(times[~ok], edges)[0].astype(np.float64)
    hits = np.histogram(times[collapsed], edges)[0].astype(np.float64)
    rolling, window = _rolling_peak(parts, origin, scale, edges)
    end = float(_joined(parts, "ended").max())
    marks = event_marks(unit_events(analysis, unit, origin, end), origin, scale, span)
    return Timeline(unit.name, unit.collapses, unit.errors, edges, unit_name, requests, failed,
                    hits, rolling, window, marks)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Throughput:
    """Completion tokens per second over time, per unit: of clean generations (answered and
    flagged by no detector) and of
    collapsed ones (a server emitting degenerate output at full speed shows as the second).
    Each generation's tokens are spread evenly over its time in flight, so continuous load
    draws a continuous line: counted where generations ended, workers that finish together
    would make spikes and empty bins (a sawtooth with gaps) out of a steady server."""

    centres: FloatArray
    """Bin centres, in `unit_name` since the first request."""
    unit_name: str
    clean: dict[str, FloatArray]
    """Unit -> tok/s of generations neither failed nor collapsed; NaN where nothing ended."""
    collapsed: dict[str, FloatArray]
    """Unit -> tok/s of collapsed generations (units with collapses only)."""


def throughput(analysis: Analysis, bins: int = THROUGHPUT_BINS) -> Throughput | None:
    """Binned throughput of every unit (None without an answered generation)."""
    units = [(u, analysis.slices(u.label, u.target)) for u in analysis.units if not u.aggregate]
    ended = [p.ended[p.ok] for _, parts in units for p in parts if p.ok.any()]
    if not ended:
        return None
    started = [p.started[p.ok] for _, parts in units for p in parts if p.ok.any()]
    origin = min(float(s.min()) for s in started)
    end = max(float(e.max()) for e in ended)
    scale, unit_name = time_scale(end - origin)
    edges = np.linspace(origin, end, bins + 1)
    width = (end - origin) / bins or 1.0
    clean, collapsed = {}, {}
    for unit, parts in units:
        ok = _joined(parts, "ok").astype(bool)
        bad = _joined(parts, "collapsed").astype(bool)[ok]
        starts, ends = _joined(parts, "started")[ok], _joined(parts, "ended")[ok]
        tokens = _joined(parts, "tokens")[ok].astype(float)
        # something answered was in flight (a microsecond of it: above the sums' rounding)
        busy = spread(starts, ends, ends - starts, edges) > 1e-6
        good = spread(starts[~bad], ends[~bad], tokens[~bad], edges) / width
        clean[unit.name] = np.where(busy, good, np.nan)  # gaps stay gaps
        if bad.any():
            degenerate = spread(starts[bad], ends[bad], tokens[bad], edges) / width
            collapsed[unit.name] = np.where(busy, degenerate, np.nan)
    centres = ((edges[:-1] + edges[1:]) / 2 - origin) / scale
    return Throughput(centres, unit_name, clean, collapsed)


def spread(
    starts: FloatArray, ends: FloatArray, amounts: FloatArray, edges: FloatArray
) -> FloatArray:
    """How much of `amounts` falls in each bin between `edges` when each is spread evenly over
    its [start, end] (an instant one counted where it ends). Exact: the integral of the
    piecewise-constant sum of rates, taken at its sorted breakpoints and interpolated (it is
    linear between them) at the edges; O(n log n) for n items whatever the number of bins."""
    if not len(starts):
        return np.zeros(len(edges) - 1)
    spans = ends - starts
    timed = spans > 0
    rates = np.divide(amounts, spans, out=np.zeros_like(amounts), where=timed)
    times = np.concatenate([starts[timed], ends[timed]])
    order = np.argsort(times, kind="stable")
    times, steps = times[order], np.concatenate([rates[timed], -rates[timed]])[order]
    totals = np.zeros(len(edges) - 1)
    if len(times):
        level = np.cumsum(steps)[:-1]  # the summed rate between consecutive breakpoints
        integral = np.concatenate([[0.0], np.cumsum(level * np.diff(times))])
        totals += np.diff(np.interp(edges, times, integral))
    instant = ~timed
    if instant.any():
        totals += np.histogram(ends[instant], edges, weights=amounts[instant])[0]
    return totals
