"""Load: a store read into compact columns per (label, target, run), plus the few whole rows the
report shows (exemplars). The first stage of the report: nothing here analyses or renders.

A generation costs about 26 bytes here (start, end, clean, collapsed, tokens); texts and JSON
are read only for the exemplars. Rows stored after the load began are not seen (the scan stops
at the newest row id found at its start), so a database a soak is writing reads consistently.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from soakgate.records import Event, Generation, Run
from soakgate.store.base import LedgerEntry, Store
from soakgate.store.columns import NO_DIVERGENCE, ColumnBatch, ColumnReader

if TYPE_CHECKING:
    from soakgate.report.reference_load import ReferenceSlices
    from soakgate.store.sqlite import SqliteStore

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
EXEMPLARS_PER_UNIT = 3


@dataclass(slots=True)
class SliceColumns:
    """One run's generations on one target under one label, in seq order."""

    run_id: str
    label: str
    target: str
    started: FloatArray
    """`started_at` of every row."""
    ended: FloatArray
    """`ended_at` of every row."""
    ok: BoolArray
    """The request completed without an error."""
    collapsed: BoolArray
    """A detector flagged the (clean) response."""
    tokens: IntArray
    """Completion tokens (0 when not reported)."""
    errors_by_class: dict[str, int]
    """Failed requests by error class."""
    compared: IntArray
    """Positions of the rows compared with a reference."""
    divergence: IntArray
    """Their first divergence (-1: identical), in the same order."""
    greedy: int
    """Rows sent greedy for the differential check."""
    collapsed_ids: IntArray
    """Row ids of the collapsed rows, in order (to fetch exemplars)."""
    collapsed_runlike: BoolArray
    """Whether each was flagged by a run detector (`!!!!`: shown first)."""

    @property
    def requests(self) -> int:
        """All generations, errors included."""
        return len(self.started)

    @property
    def clean_sequence(self) -> BoolArray:
        """Collapse indicator over the clean generations, in order."""
        return self.collapsed[self.ok]


@dataclass(slots=True)
class Columns:
    """Everything analysis reads from a store."""

    runs: list[Run]
    """Every run, oldest first."""
    events: list[Event]
    """Every event, in time order."""
    ledger: list[LedgerEntry]
    """The plan ledger."""
    slices: dict[tuple[str, str], list[SliceColumns]]
    """(label, target) -> its runs' slices, runs oldest first; keys in order of appearance."""
    exemplars: dict[int, Generation] = field(default_factory=dict)
    """The whole rows the report shows, by row id."""
    contexts: dict[int, tuple[str, ...]] = field(default_factory=dict)
    """What surrounded each exemplar (row id -> report/collapse.py's lines), where asked for."""
    reference: ReferenceSlices = field(default_factory=dict)
    """Reference scoring's rows by (label, target) (runs soaked with it only)."""
    reference_rows: dict[int, Generation] = field(default_factory=dict)
    """The highest-scoring suspect rows of each (label, target), whole, by row id."""
    warmups: dict[tuple[str, str], list[SliceColumns]] = field(default_factory=dict)
    """(label, target) -> the warm-up of each of its runs that declares one (`warmup_requests`
    in the run's load: its first requests per target, soaked and stored, never counted)."""

    def run_slices(self, run_id: str) -> list[SliceColumns]:
        """Every slice of one run."""
        return [s for group in self.slices.values() for s in group if s.run_id == run_id]


class _Pieces:
    """Batches of one (label, target, run), joined at the end."""

    def __init__(self) -> None:
        self.columns: dict[str, list[npt.NDArray[np.generic]]] = {}
        self.errors: Counter[str] = Counter()
        self.rows = 0
        self.greedy = 0

    def add(self, batch: ColumnBatch, mask: BoolArray) -> None:
        error_codes, error_values = batch.error
        codes = error_codes[mask]
        ok = codes == error_values.index("") if "" in error_values else np.zeros(len(codes), bool)
        divergence = batch.divergence[mask]
        compared = np.flatnonzero(divergence != NO_DIVERGENCE)
        collapsed = batch.flagged[mask] & ok
        parts = {
            "started": batch.started[mask], "ended": batch.ended[mask], "ok": ok,
            "collapsed": collapsed, "tokens": batch.tokens[mask],
            "compared": compared + self.rows, "divergence": divergence[compared],
            "collapsed_ids": batch.row_id[mask][collapsed],
            "collapsed_runlike": batch.runlike[mask][collapsed],
        }  # fmt: skip
        for name, values in parts.items():
            self.columns.setdefault(name, []).append(values)
        for code, count in zip(*np.unique(codes[~ok], return_counts=True), strict=True):
            self.errors[error_values[int(code)]] += int(count)
        self.greedy += int(batch.greedy[mask].sum())
        self.rows += int(mask.sum())

    def join(self, run_id: str, label: str, target: str) -> SliceColumns:
        joined = {name: np.concatenate(parts) for name, parts in self.columns.items()}
        self.columns.clear()
        return SliceColumns(
            run_id, label, target, joined["started"], joined["ended"], joined["ok"],
            joined["collapsed"], joined["tokens"], dict(self.errors), joined["compared"],
            joined["divergence"], self.greedy, joined["collapsed_ids"],
            joined["collapsed_runlike"],
        )  # fmt: skip


def _run_order(runs: list[Run], run_ids: list[str]) -> list[str]:
    """Runs oldest first, then run ids no run record names (by id), as the report orders them."""
    order = {run.run_id: i for i, run in enumerate(runs)}
    return sorted(run_ids, key=lambda r: (order.get(r, len(order)), r))


Split = dict[tuple[str, str], _Pieces]


def _scan_run(
    reader: ColumnReader, run: Run | None, run_id: str, upto: int, greedy: bool
) -> tuple[Split, Split]:
    """The run's rows split by (label, target), and apart from them its warm-up rows; through
    the Arrow reader without strings when the run record says which targets and label to expect
    (read again with strings when a row holds another)."""
    from soakgate.store.columns import UnexpectedValues

    warmup = int(run.load.get("warmup_requests") or 0) if run is not None else 0
    if run is not None:
        try:
            batches = reader.scan(run_id, upto, greedy, (run.targets, [run.label]))
            return _split(batches, warmup)
        except UnexpectedValues:
            pass  # e.g. a two-arm run, whose rows carry the arms' labels
    return _split(reader.scan(run_id, upto, greedy), warmup)


def _split(batches: Iterable[ColumnBatch], warmup: int) -> tuple[Split, Split]:
    """Rows by (label, target); each key's first `warmup` rows go to the second split."""
    pieces: Split = {}
    warm: Split = {}
    for batch in batches:
        (target_codes, targets), (label_codes, labels) = batch.target, batch.label
        keys = label_codes.astype(np.int64) * len(targets) + target_codes
        for key in dict.fromkeys(keys[np.sort(np.unique(keys, return_index=True)[1])].tolist()):
            label, target = labels[key // len(targets)], targets[key % len(targets)]
            mask = keys == key
            seen = warm[(label, target)].rows if (label, target) in warm else 0
            if seen < warmup:
                early = mask & (np.cumsum(mask) <= warmup - seen)
                warm.setdefault((label, target), _Pieces()).add(batch, early)
                mask &= ~early
            if mask.any():
                pieces.setdefault((label, target), _Pieces()).add(batch, mask)
    return pieces, warm


def load_columns(
    reader: ColumnReader, runs: list[Run], events: list[Event], ledger: list[LedgerEntry]
) -> Columns:
    """Read every run's rows (up to the newest row at the start) into slices, and the rows
    shown as exemplars."""
    from soakgate.probes.reproduce import PROBE_RUNS

    upto = reader.max_row_id()
    greedy_runs = {e.run_id for e in events if e.kind == "reference_baseline"}
    probe_runs = {r.run_id for r in runs if r.load.get("probe") in PROBE_RUNS}  # replay's: no units
    slices: dict[tuple[str, str], list[SliceColumns]] = {}
    warmups: dict[tuple[str, str], list[SliceColumns]] = {}
    records = {run.run_id: run for run in runs}
    for run_id in _run_order(runs, reader.run_ids()):
        if run_id in probe_runs:
            continue
        split = _scan_run(reader, records.get(run_id), run_id, upto, run_id in greedy_runs)
        for into, pieces in zip((slices, warmups), split, strict=True):
            for (label, target), piece in pieces.items():
                into.setdefault((label, target), []).append(piece.join(run_id, label, target))
    columns = Columns(runs, events, ledger, slices, warmups=warmups)
    columns.exemplars = reader.rows(exemplar_ids(columns))
    return columns


def exemplar_ids(columns: Columns, per_unit: int = EXEMPLARS_PER_UNIT) -> list[int]:
    """Row ids of the collapses shown per (label, target): the first few, and the first one
    flagged by a run detector (`!!!!`) when none of those is."""
    chosen = []
    for group in columns.slices.values():
        ids = np.concatenate([s.collapsed_ids for s in group])
        runlike = np.concatenate([s.collapsed_runlike for s in group]).astype(bool)
        chosen += [int(i) for i in ids[:per_unit]]
        if not runlike[:per_unit].any() and runlike.any():
            chosen.append(int(ids[np.argmax(runlike)]))
    return chosen


def load_store(store: Store, contexts: bool = False) -> Columns:
    """Columns of an open store: on a SQLite store's own connection, else from its rows; with
    `contexts`, what surrounded each exemplar (a SQLite store only)."""
    from soakgate.report.reference_load import load_reference
    from soakgate.store.columns import reader_for
    from soakgate.store.sqlite import SqliteStore

    reader = reader_for(store)
    try:
        columns = load_columns(reader, store.runs(), store.events(), store.ledger())
    finally:
        reader.close()
    columns.reference, columns.reference_rows = load_reference(store, columns.runs)
    if contexts and isinstance(store, SqliteStore):
        _add_contexts(store, columns)
    return columns


def load_path(path: str | Path, contexts: bool = False) -> Columns:
    """Columns of a database file, read-only: metadata through sqlite3, then the rows through the
    Arrow reader once sqlite3 has closed the file (two SQLite libraries must not hold one file
    open in a process), or through sqlite3 where Arrow cannot be used; with `contexts`, what
    surrounded each exemplar (sqlite3 again, once Arrow has closed the file)."""
    from soakgate.report.reference_load import load_reference
    from soakgate.store.columns import ArrowReader, arrow_available
    from soakgate.store.sqlite import open_analysis, read_only_uri

    store = open_analysis(path)
    try:
        runs, events, ledger = store.runs(), store.events(), store.ledger()
        reference = load_reference(store, runs)
        if not arrow_available() or store.shared_in_process:
            columns = load_columns(store.column_reader(), runs, events, ledger)
            columns.reference, columns.reference_rows = reference
            if contexts:
                _add_contexts(store, columns)
            return columns
    finally:
        store.close()
    reader = ArrowReader(read_only_uri(Path(path)), str(path))
    try:
        columns = load_columns(reader, runs, events, ledger)
    finally:
        reader.close()
    columns.reference, columns.reference_rows = reference
    if contexts and columns.exemplars:
        store = open_analysis(path)
        try:
            _add_contexts(store, columns)
        finally:
            store.close()
    return columns


def _add_contexts(store: SqliteStore, columns: Columns) -> None:
    from soakgate.report.collapse import exemplar_contexts

    columns.contexts = exemplar_contexts(store, columns.exemplars, columns.runs, columns.events)
