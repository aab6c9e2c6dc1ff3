"""What surrounded one collapse: `soakgate report DB --collapse ID`, and each HTML exemplar.

For a stored generation: the requests in flight on the same target when it started and when it
ended (ids, prompt lengths), the server incarnation and how long it had been up, the server's own
load at that moment where its /metrics gave it (`server_load` events: running and waiting
requests, KV-cache usage), and the guard's events nearby. Pure functions over rows and events
(`context_of`); `collapse_context` reads them from a store. Part of the report's load stage:
`load` adds the HTML exemplars' contexts, `api.collapse_report` prints one.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from soakgate.errors import UsageError
from soakgate.prompts import Prompt
from soakgate.records import Event, Generation, Run

if TYPE_CHECKING:
    from soakgate.store import SqliteStore
    from soakgate.store.history import TargetHistory

NEARBY_S = 60.0
"""Guard events this many seconds either side of a request are shown with it."""
SHOWN_IN_FLIGHT = 12
"""In-flight requests listed by id; the rest are counted."""
# Events that are bookkeeping or per-scrape figures, not what the guard saw happen.
_NOT_GUARD = frozenset(
    {"server_load", "spec_decode", "spec_decode_absent", "telemetry", "note", "started",
     "ended", "reference_baseline", "twin_baseline", "look", "detector_budget", "retried"}
)  # fmt: skip
_UP_EVENTS = ("server_ready", "server_started", "restarted")


@dataclass(frozen=True, slots=True)
class Neighbour:
    """Another request in flight on the same target."""

    request_id: str
    prompt_tokens: int | None
    """The server's count of the prompt's tokens (None when it reported none)."""
    prompt_chars: int | None
    """Characters of the prompt text, where the run stored its prompts."""
    collapsed: bool
    error_class: str | None

    def describe(self) -> str:
        """`ID (35 prompt tokens, collapsed)`."""
        size = (
            f"{self.prompt_tokens} prompt tokens" if self.prompt_tokens is not None
            else f"{self.prompt_chars} prompt chars" if self.prompt_chars is not None
            else "prompt size unknown"
        )  # fmt: skip
        state = ", collapsed" if self.collapsed else ""
        state = f", {self.error_class}" if self.error_class else state
        return f"{self.request_id} ({size}{state})"


@dataclass(slots=True)
class CollapseContext:
    """Everything known about the moment one generation was made."""

    row: Generation
    run: Run
    at_start: list[Neighbour] = field(default_factory=list)
    """Other requests on the target in flight when this one was sent."""
    at_end: list[Neighbour] = field(default_factory=list)
    """Other requests on the target in flight when this one finished."""
    up_since: float | None = None
    """When the serving incarnation came up (None: unknown)."""
    up_source: str = ""
    """Where `up_since` comes from (a guard event, or the server's process start)."""
    load_at_start: Event | None = None
    """The `server_load` scrape nearest to the request's start."""
    load_at_end: Event | None = None
    """The `server_load` scrape nearest to the request's end."""
    nearby: list[Event] = field(default_factory=list)
    """Guard and campaign events within NEARBY_S of the request."""
    history: TargetHistory | None = None
    """What came before it on its target (`report --collapse` only: it costs a pass over the
    run's rows)."""

    def lines(self) -> list[str]:
        """The context as text, one fact per line."""
        row = self.row
        state = f"collapsed, flagged by {', '.join(row.flags)}" if row.collapsed else (
            f"failed: {row.error_class}" if row.error_class else "clean (not a collapse)"
        )  # fmt: skip
        lines = [
            f"request {row.request_id} ({row.label}@{row.target}, run {row.run_id}, "
            f"seq {row.seq}): {state}",
            f"  sent {_when(row.started_at)}, took {row.ended_at - row.started_at:.2f} s, "
            f"{row.prompt_tokens if row.prompt_tokens is not None else '?'} prompt tokens, "
            f"{row.completion_tokens if row.completion_tokens is not None else '?'} completion "
            f"tokens, finish {row.finish_reason or '-'}",
            f"  server: {self._uptime()}",
            *self._state(),
            f"  server load at its start: {_load(self.load_at_start, row.started_at)}",
            f"  server load at its end: {_load(self.load_at_end, row.ended_at)}",
            f"  in flight on {row.target} at its start: {_neighbours(self.at_start)}",
            f"  in flight on {row.target} at its end: {_neighbours(self.at_end)}",
        ]
        if self.nearby:
            lines.append(f"  events within {NEARBY_S:g} s:")
            lines += [
                f"    {_offset(e.at, row.started_at)} {e.kind} {_data(e)}" for e in self.nearby
            ]
        else:
            lines.append(f"  events within {NEARBY_S:g} s: none")
        return lines

    def as_dict(self) -> dict[str, object]:
        """The context as JSON-ready values (`report --collapse ID --format json`)."""
        row = self.row
        return {
            "request_id": row.request_id, "run_id": row.run_id, "label": row.label,
            "target": row.target, "seq": row.seq, "collapsed": row.collapsed,
            "flags": row.flags, "error_class": row.error_class, "started_at": row.started_at,
            "ended_at": row.ended_at, "prompt_tokens": row.prompt_tokens,
            "completion_tokens": row.completion_tokens, "finish_reason": row.finish_reason,
            "incarnation": row.incarnation, "up_since": self.up_since,
            "up_source": self.up_source or None,
            "state": dataclasses.asdict(self.history) if self.history else None,
            "load_at_start": self.load_at_start.data if self.load_at_start else None,
            "load_at_end": self.load_at_end.data if self.load_at_end else None,
            "in_flight_at_start": [dataclasses.asdict(n) for n in self.at_start],
            "in_flight_at_end": [dataclasses.asdict(n) for n in self.at_end],
            "events_nearby": [
                {"at": e.at, "kind": e.kind, "target": e.target, "data": e.data}
                for e in self.nearby
            ],
        }  # fmt: skip

    def _state(self) -> list[str]:
        """The derived state: requests since the incarnation began, time since the target was
        last idle, the run of consecutive collapses it is in."""
        if self.history is None:
            return []
        h, row = self.history, self.row
        busy = row.started_at - h.busy_since
        idle = "idle just before it" if busy <= 0 else f"busy without a break for {busy:.1f} s"
        streak = h.collapses_before + h.collapses_after + 1
        if not row.collapsed:
            place = f"not a collapse ({h.collapses_before} collapsed just before it)"
        elif streak == 1:
            place = "a lone collapse (the answers just before and after it were clean)"
        else:
            place = (f"collapse {h.collapses_before + 1} of {streak} in a row (answered requests "
                     "in send order)")  # fmt: skip
        return [
            f"  state: request {h.requests_before + 1} this run sent to {row.target} since "
            f"incarnation {row.incarnation} began (the server may have served others); "
            f"{row.target} {idle}; {place}",
        ]

    def _uptime(self) -> str:
        incarnation = f"incarnation {self.row.incarnation}"
        if self.up_since is None:
            return f"{incarnation}, up since: unknown (no start event, no process start time)"
        return (
            f"{incarnation}, up {self.row.started_at - self.up_since:.1f} s at the request's start "
            f"({self.up_source})"
        )


def context_of(
    row: Generation,
    run: Run,
    same_target: Iterable[Generation],
    events: Sequence[Event],
    prompts: Mapping[str, Prompt] | None = None,
) -> CollapseContext:
    """The context of `row` from the other rows of its target (any run) and the events."""
    prompts = prompts or {}
    context = CollapseContext(row, run)
    for other in same_target:
        if other.request_id == row.request_id:
            continue
        if other.started_at <= row.started_at < other.ended_at:
            context.at_start.append(_neighbour(other, prompts))
        if other.started_at <= row.ended_at < other.ended_at:
            context.at_end.append(_neighbour(other, prompts))
    mine = [e for e in events if e.target in (None, row.target) and e.run_id == row.run_id]
    loads = [e for e in mine if e.kind == "server_load"]
    context.load_at_start = _nearest(loads, row.started_at)
    context.load_at_end = _nearest(loads, row.ended_at)
    context.up_since, context.up_source = _up_since(row, mine, loads)
    context.nearby = [
        e for e in events
        if e.target in (None, row.target) and e.kind not in _NOT_GUARD
        and row.started_at - NEARBY_S <= e.at <= row.ended_at + NEARBY_S
    ]  # fmt: skip
    return context


def collapse_context(store: SqliteStore, request_id: str) -> CollapseContext:
    """The context of the stored generation `request_id` (UsageError when there is none)."""
    row = store.generation(request_id)
    if row is None:
        raise UsageError(f"no generation with request id {request_id!r} in {store.path}")
    run = next(r for r in store.runs() if r.run_id == row.run_id)
    same_target = store.generations_overlapping(row.target, [(row.started_at, row.ended_at)])
    context = context_of(row, run, same_target, store.events(row.run_id), store.prompts(row.run_id))
    context.history = store.target_history(row)
    return context


def _neighbour(other: Generation, prompts: Mapping[str, Prompt]) -> Neighbour:
    prompt = prompts.get(other.prompt_id)
    chars = len(prompt.text) + len(prompt.system or "") if prompt is not None else None
    return Neighbour(
        other.request_id, other.prompt_tokens, chars, other.collapsed, other.error_class
    )


def _nearest(events: Sequence[Event], at: float) -> Event | None:
    return min(events, key=lambda e: abs(e.at - at), default=None)


def _up_since(
    row: Generation, events: Sequence[Event], loads: Sequence[Event]
) -> tuple[float | None, str]:
    """When the incarnation serving `row` came up: the guard's last start event of that
    incarnation before the request, else the server's own process start from /metrics."""
    started = [
        e for e in events
        if e.kind in _UP_EVENTS and e.target == row.target and e.at <= row.started_at
        and e.data.get("incarnation", row.incarnation) == row.incarnation
    ]  # fmt: skip
    if started:
        last = started[-1]
        return last.at, f"{last.kind} event"
    nearest = _nearest(loads, row.started_at)
    if nearest is not None and isinstance(nearest.data.get("process_start"), int | float):
        return float(nearest.data["process_start"]), "its /metrics process_start_time_seconds"
    return None, ""


def _load(event: Event | None, at: float) -> str:
    if event is None:
        return "not reported (no server_load scrape: the server's /metrics gave no load figures)"
    data = event.data
    parts = [f"{data[key]:g} {key}" for key in ("running", "waiting") if key in data]
    if "kv_cache_usage" in data:
        parts.append(f"KV cache {float(data['kv_cache_usage']):.0%} used")
    return f"{', '.join(parts) or 'no figures'} (scraped {_offset(event.at, at)})"


def _neighbours(found: Sequence[Neighbour]) -> str:
    if not found:
        return "none"
    shown = ", ".join(n.describe() for n in found[:SHOWN_IN_FLIGHT])
    more = f", and {len(found) - SHOWN_IN_FLIGHT} more" if len(found) > SHOWN_IN_FLIGHT else ""
    return f"{len(found)}: {shown}{more}"


def _offset(at: float, reference: float) -> str:
    delta = at - reference
    return f"{abs(delta):.1f} s {'after' if delta >= 0 else 'before'}"


def _data(event: Event) -> str:
    text = ", ".join(f"{k}={v}" for k, v in sorted(event.data.items()))
    return text[:200]


def _when(at: float) -> str:
    moment = datetime.datetime.fromtimestamp(at, datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def exemplar_contexts(
    store: SqliteStore, rows: Mapping[int, Generation], runs: Sequence[Run],
    events: Sequence[Event],
) -> dict[int, tuple[str, ...]]:  # fmt: skip
    """The context lines of the HTML exemplars (row id -> lines): one scan of the table per
    target for all of its exemplars, the events the report already read."""
    by_run = {r.run_id: r for r in runs}
    prompts: dict[str, dict[str, Prompt]] = {}
    found: dict[int, tuple[str, ...]] = {}
    for target in dict.fromkeys(g.target for g in rows.values()):
        mine = {i: g for i, g in rows.items() if g.target == target and g.run_id in by_run}
        overlapping = store.generations_overlapping(
            target, [(g.started_at, g.ended_at) for g in mine.values()]
        )
        for row_id, g in mine.items():
            if g.run_id not in prompts:
                prompts[g.run_id] = store.prompts(g.run_id)
            near = [
                o for o in overlapping if o.started_at <= g.ended_at and o.ended_at > g.started_at
            ]
            found[row_id] = tuple(
                context_of(g, by_run[g.run_id], near, events, prompts[g.run_id]).lines()
            )
    return found
