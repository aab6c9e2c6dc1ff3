"""Load the timings of every answered generation: one query per run (replay's probe runs left
out), read in batches through the same reader as the report's other columns (Arrow arrays filled
in C where the ADBC driver can be used), folded into compact arrays per (label, target, run).
What `report.latency` analyses. An answered row costs 24 bytes here (three floats).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from soakgate.records import Generation, Run
from soakgate.store.base import Store
from soakgate.store.columns import LatencyBatch, latency_from_tuples

FloatArray = npt.NDArray[np.float64]


@dataclass(slots=True)
class LatencySlice:
    """One run's answered generations on one (label, target), in seq order."""

    run_id: str
    seconds: FloatArray
    """End-to-end latency: `ended_at - started_at`."""
    ttft: FloatArray
    """Time to first token (NaN where the request was not streamed or none came)."""
    tokens: FloatArray
    """Completion tokens (NaN where the server did not say)."""


LatencySlices = dict[tuple[str, str], list[LatencySlice]]
Batches = Callable[[str], Iterable[LatencyBatch]]
"""Run id -> its rows' timings in seq order (a column reader's `latency`, or rows converted)."""


def load_latency(batches: Batches, runs: Sequence[Run], skip: set[str]) -> LatencySlices:
    """The answered rows' timings of every run not in `skip`, by (label, target); a run's warm-up
    (its first `warmup_requests` rows per (label, target), soaked and never counted) is left
    out, as the report leaves it out of every rate."""
    found: LatencySlices = {}
    for run in runs:
        if run.run_id in skip:
            continue
        warmup = int(run.load.get("warmup_requests") or 0)
        for (label, target), piece in _fold(run.run_id, batches(run.run_id), warmup).items():
            found.setdefault((label, target), []).append(piece)
    return found


def store_batches(store: Store) -> Batches:
    """`Batches` of an open store: a SQLite store's own connection, else its rows."""
    from soakgate.store.sqlite import SqliteStore

    if isinstance(store, SqliteStore):
        reader = store.column_reader()
        upto = reader.max_row_id()
        return lambda run_id: reader.latency(run_id, upto)
    return lambda run_id: [_from_rows(store.generations(run_id))]


def _from_rows(generations: Iterable[Generation]) -> LatencyBatch:
    """LATENCY_SELECT's tuples from rows (a store without SQL)."""
    return latency_from_tuples([
        (g.label, g.target, int(g.ok), g.ended_at - g.started_at,
         g.ttft_s if g.stream and g.ttft_s is not None else -1.0,
         -1 if g.completion_tokens is None else g.completion_tokens)
        for g in generations
    ])  # fmt: skip


def _fold(
    run_id: str, batches: Iterable[LatencyBatch], warmup: int
) -> dict[tuple[str, str], LatencySlice]:
    """Batches in seq order -> per (label, target): its answered rows after its first `warmup`."""
    parts: dict[tuple[str, str], list[FloatArray]] = {}
    for batch in batches:
        (label_codes, labels), (target_codes, targets) = batch.label, batch.target
        keys = label_codes.astype(np.int64) * max(len(targets), 1) + target_codes
        table = np.column_stack([batch.clean.astype(np.float64), batch.seconds, batch.ttft,
                                 batch.tokens])  # fmt: skip
        for key in np.unique(keys).tolist():
            unit = (labels[key // len(targets)], targets[key % len(targets)])
            parts.setdefault(unit, []).append(table[keys == key])
    folded = {}
    for unit, pieces in parts.items():
        rows = np.concatenate(pieces)[warmup:]
        rows = rows[rows[:, 0] == 1.0]
        folded[unit] = LatencySlice(run_id, rows[:, 1], rows[:, 2], rows[:, 3])
    return folded
