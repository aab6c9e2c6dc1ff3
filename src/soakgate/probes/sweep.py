"""Concurrency sweep: throughput, latency and collapse rate per level, and the saturation point."""

from __future__ import annotations

import dataclasses
import itertools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from soakgate.errors import UsageError
from soakgate.load import LoadSpec
from soakgate.load.runner import SoakConfig, run_soak
from soakgate.records import Event, Generation
from soakgate.stats.rates import RateSummary, summarize_rate
from soakgate.store import open_analysis


@dataclass(frozen=True, slots=True)
class SweepLevel:
    """What one concurrency level achieved."""

    concurrency: int
    run_id: str
    requests: int
    errors: int
    collapses: int
    elapsed_s: float
    tokens_per_s: float
    clean_tokens_per_s: float
    latency_p50_s: float
    latency_p95_s: float
    collapse_rate: RateSummary
    spec_acceptance: float | None = None
    """Mean speculative-decoding acceptance over the level's windows (None: no counters)."""
    interrupted: bool = False
    """Ctrl-C/SIGTERM stopped this level's soak; no later level ran."""


def saturation_point(levels: Sequence[SweepLevel], min_gain: float = 0.10) -> int | None:
    """The first level past which throughput rises by less than `min_gain` (None: not reached);
    an interrupted level is not a measurement of its throughput and is left out."""
    for current, following in itertools.pairwise([lv for lv in levels if not lv.interrupted]):
        if following.tokens_per_s < current.tokens_per_s * (1 + min_gain):
            return current.concurrency
    return None


def parse_levels(text: str) -> list[int]:
    """`24,48,96` as a strictly increasing list of positive levels."""
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(
            f"--concurrency must be a comma-separated list of numbers: {text!r}"
        ) from None
    if not levels or min(levels) < 1 or levels != sorted(set(levels)):
        raise UsageError(f"--concurrency levels must be positive and increasing: {text!r}")
    return levels


def run_sweep(
    base: SoakConfig, levels: Sequence[int], requests_per_level: int, min_gain: float = 0.10
) -> list[SweepLevel]:
    """Soak each level in turn (one stored run per level) and summarise it; a level stopped by
    Ctrl-C/SIGTERM is the last (marked `interrupted`)."""
    results = []
    sweep_id = uuid.uuid4().hex[:8]
    for level in levels:
        load = LoadSpec(level, requests=requests_per_level, grace_s=base.load.grace_s)
        sweep = {"id": sweep_id, "levels": list(levels), "min_gain": min_gain}
        context = {**base.context, "sweep": sweep}
        config = dataclasses.replace(base, load=load, run_id=None, context=context)
        result = run_soak(config)
        summary = _summarise(config, level, result.run.run_id)
        if result.stopped_by == "stop":
            results.append(dataclasses.replace(summary, interrupted=True))
            break
        results.append(summary)
    return results


def _summarise(config: SoakConfig, level: int, run_id: str) -> SweepLevel:
    """Read one level's rows and events back and summarise them."""
    store = open_analysis(config.db)
    try:
        rows = list(store.generations(run_id))
        events = list(store.events(run_id))
    finally:
        store.close()
    return summarise_level(level, run_id, rows, events)


def summarise_level(
    level: int, run_id: str, rows: Sequence[Generation], events: Sequence[Event]
) -> SweepLevel:
    """One level's figures over the span of its requests (pure)."""
    return summarise_level_columns(
        level, run_id, np.array([g.started_at for g in rows], dtype=np.float64),
        np.array([g.ended_at for g in rows], dtype=np.float64),
        np.array([g.ok for g in rows], dtype=bool), np.array([g.collapsed for g in rows], bool),
        np.array([g.completion_tokens or 0 for g in rows], dtype=np.int64), events,
    )  # fmt: skip


def summarise_level_columns(
    level: int, run_id: str, started: npt.NDArray[np.float64], ended: npt.NDArray[np.float64],
    ok: npt.NDArray[np.bool_], collapsed: npt.NDArray[np.bool_],
    tokens: npt.NDArray[np.int64], events: Sequence[Event],
) -> SweepLevel:  # fmt: skip
    """`summarise_level` on columns (the report's way): starts, ends, clean and collapsed flags
    and completion tokens (0 when not reported) of the level's rows."""
    windows = [e.data.get("acceptance") for e in events if e.kind == "spec_decode"]
    accepted = [float(a) for a in windows if isinstance(a, int | float)]
    requests, clean = len(started), int(ok.sum())
    collapses = int((collapsed & ok).sum())
    tokens_clean = int(tokens[ok].sum())
    clean_tokens = int(tokens[ok & ~collapsed].sum())
    latency = (ended - started)[ok] if clean else np.array([float("nan")])
    elapsed_s = float(ended.max() - started.min()) if requests else 0.0
    seconds = max(elapsed_s, 1e-9)
    return SweepLevel(
        concurrency=level, run_id=run_id, requests=requests, errors=requests - clean,
        collapses=collapses, elapsed_s=elapsed_s, tokens_per_s=tokens_clean / seconds,
        clean_tokens_per_s=clean_tokens / seconds,
        latency_p50_s=float(np.percentile(latency, 50)),
        latency_p95_s=float(np.percentile(latency, 95)),
        collapse_rate=summarize_rate(collapses, clean) if clean else summarize_rate(0, 1),
        spec_acceptance=float(np.mean(accepted)) if accepted else None,
    )  # fmt: skip


def acceptance_collapses(levels: Sequence[SweepLevel], ratio: float = 0.5) -> list[int]:
    """Levels whose speculative acceptance fell below `ratio` of the best lower level's."""
    fallen, best = [], 0.0
    for level in levels:
        if level.spec_acceptance is None:
            continue
        if best and level.spec_acceptance < ratio * best:
            fallen.append(level.concurrency)
        best = max(best, level.spec_acceptance)
    return fallen


def sweep_table(levels: Sequence[SweepLevel]) -> Any:
    """A rich table with one row per level."""
    from rich.table import Table

    table = Table(title="soakgate sweep")
    for column in ("concurrency", "n", "tok/s", "clean tok/s", "p50 s", "p95 s", "collapses",
                   "rate [95% CI]", "errors", "spec accept"):  # fmt: skip
        table.add_column(column, justify="right")
    fallen = set(acceptance_collapses(levels))
    for level in levels:
        rate = level.collapse_rate
        accept = "-" if level.spec_acceptance is None else f"{level.spec_acceptance:.0%}"
        accept += " (collapsed)" if level.concurrency in fallen else ""
        table.add_row(
            str(level.concurrency), str(level.requests), f"{level.tokens_per_s:,.0f}",
            f"{level.clean_tokens_per_s:,.0f}", f"{level.latency_p50_s:.3f}",
            f"{level.latency_p95_s:.3f}", str(level.collapses),
            f"{rate.rate:.3%} [{rate.ci_low:.3%}, {rate.ci_high:.3%}]", str(level.errors), accept,
        )  # fmt: skip
    return table
