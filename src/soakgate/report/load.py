"""Load: a store read into compact columns per (label, target, run), plus the few whole rows the
report shows (exemplars). The first stage of the report: nothing here analyses or renders.

A generation costs about 26 bytes here (start, end, clean, collapsed, tokens; 4 more for its
stored order when answers arrived out of seq order); texts and JSON are read only for the
exemplars. Rows stored after the load began are not seen (the scan stops
at the newest row id found at its start), so a database a soak is writing reads consistently.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from soakgate.records import NOT_THE_SERVERS, Event, Generation, Run
from soakgate.store.base import LedgerEntry, Store
from soakgate.store.columns import NO_DIVERGENCE, ColumnBatch, ColumnReader

if TYPE_CHECKING:
    from soakgate.report.latency_load import LatencySlices
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
    server_error: BoolArray
    """The request failed in a way that is the server's (records.NOT_THE_SERVERS are not)."""
    judged: BoolArray
    """The row says something about the server: every row but NOT_THE_SERVERS' errors."""
    crash_lost: BoolArray
    """An error served by a server incarnation that crashed, at or after its fault window
    opened: the request was lost to the crash (and belongs to the configuration that crashed)."""
    suspect: BoolArray
    """Reference scoring flagged the row (False where it was not scored)."""
    repeat: IntArray
    """The reference's repeats of compared requests: first divergence from its own first answer
    (-1: identical), in row order."""
    characters: bool
    """Divergence positions count characters (some compared row had no token ids)."""
    checks: dict[str, BoolArray] = field(default_factory=dict)
    """Integrity check (`records.CHECKS`) -> the rows that failed it (only checks some row of
    the slice failed)."""
    stored_order: npt.NDArray[np.int32] | None = None
    """The answered rows in the order they were stored (the order answers arrived, which a soak's
    sequential monitor judged them in), as positions into `clean_sequence`; None when that is
    seq order already (one request in flight)."""

    @property
    def requests(self) -> int:
        """All generations, errors included."""
        return len(self.started)

    @property
    def clean_sequence(self) -> BoolArray:
        """Collapse indicator over the answered generations, in order."""
        return self.collapsed[self.ok]


@dataclass(frozen=True, slots=True)
class GatewayTally:
    """The rows of a unit that a gateway between soakgate and the server retried upstream."""

    rows: int
    """Rows with `gateway_retries` > 0."""
    clean: int
    """Of them, answered rows (the retry hid an upstream failure)."""
    retries: int
    """Retries summed: upstream failures the gateway hid or turned into these rows."""


def gateway_tallies(
    rows: Iterable[tuple[Any, ...]], skip: set[str]
) -> dict[tuple[str, str], GatewayTally]:
    """`SqliteStore.gateway_counts` rows summed per (label, target), runs in `skip` left out."""
    found: dict[tuple[str, str], GatewayTally] = {}
    for run_id, label, target, count, clean, retries in rows:
        if run_id in skip:
            continue
        old = found.get((label, target), GatewayTally(0, 0, 0))
        found[(label, target)] = GatewayTally(old.rows + int(count), old.clean + int(clean or 0),
                                              old.retries + int(retries or 0))  # fmt: skip
    return found


def _gateway_rows(generations: Iterable[Generation]) -> list[tuple[Any, ...]]:
    """`gateway_counts`' rows from a store without SQL."""
    return [(g.run_id, g.label, g.target, 1, int(g.ok), g.gateway_retries)
            for g in generations if g.gateway_retries]  # fmt: skip


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
    gateway: dict[tuple[str, str], GatewayTally] = field(default_factory=dict)
    """(label, target) -> the rows a gateway retried upstream (only units that have some)."""
    latency: LatencySlices = field(default_factory=dict)
    """(label, target) -> its runs' answered rows' timings (warm-ups and replays left out)."""
    warmups: dict[tuple[str, str], list[SliceColumns]] = field(default_factory=dict)
    """(label, target) -> the warm-up of each of its runs that declares one (`warmup_requests`
    in the run's load: its first requests per target, soaked and stored, never counted)."""

    def run_slices(self, run_id: str) -> list[SliceColumns]:
        """Every slice of one run."""
        return [s for group in self.slices.values() for s in group if s.run_id == run_id]


Windows = dict[str, list[tuple[int, float]]]
"""Target -> (incarnation, start) of each fault window of one run: when that incarnation died."""


class _Pieces:
    """Batches of one (label, target, run), joined at the end."""

    def __init__(self, windows: Sequence[tuple[int, float]], suspect_ids: IntArray,
                 check_ids: dict[str, IntArray] | None = None) -> None:  # fmt: skip
        self.columns: dict[str, list[npt.NDArray[np.generic]]] = {}
        self.errors: Counter[str] = Counter()
        self.rows = 0
        self.greedy = 0
        self.characters = False
        self.windows = windows
        self.suspect_ids = suspect_ids
        self.check_ids = check_ids or {}

    def add(self, batch: ColumnBatch, mask: BoolArray) -> None:
        error_codes, error_values = batch.error
        codes = error_codes[mask]
        ok = codes == error_values.index("") if "" in error_values else np.zeros(len(codes), bool)
        not_judged = [i for i, name in enumerate(error_values) if name in NOT_THE_SERVERS]
        judged = ~np.isin(codes, not_judged)
        divergence = batch.divergence[mask]
        compared = np.flatnonzero(divergence != NO_DIVERGENCE)
        collapsed = batch.flagged[mask] & ok
        repeat = batch.repeat[mask]
        row_ids = batch.row_id[mask]
        parts = {
            "started": batch.started[mask], "ended": batch.ended[mask], "ok": ok,
            "collapsed": collapsed, "tokens": batch.tokens[mask],
            "compared": compared + self.rows, "divergence": divergence[compared],
            "collapsed_ids": row_ids[collapsed],
            "collapsed_runlike": batch.runlike[mask][collapsed],
            "server_error": ~ok & judged, "judged": judged,
            "crash_lost": ~ok & judged & self._lost(batch.incarnation[mask], batch.ended[mask]),
            "suspect": np.isin(row_ids, self.suspect_ids),
            "repeat": repeat[repeat != NO_DIVERGENCE], "clean_ids": row_ids[ok],
            **{f"check:{name}": np.isin(row_ids, ids) & ok for name, ids in self.check_ids.items()},
        }  # fmt: skip
        for name, values in parts.items():
            self.columns.setdefault(name, []).append(values)
        for code, count in zip(*np.unique(codes[~ok], return_counts=True), strict=True):
            self.errors[error_values[int(code)]] += int(count)
        self.greedy += int(batch.greedy[mask].sum())
        self.characters |= bool(batch.characters[mask][compared].any())
        self.rows += int(mask.sum())

    def _lost(self, incarnation: IntArray, ended: FloatArray) -> BoolArray:
        """Rows served by an incarnation at or after the start of its fault window."""
        lost = np.zeros(len(incarnation), dtype=bool)
        for dead, start in self.windows:
            lost |= (incarnation == dead) & (ended >= start)
        return lost

    def join(self, run_id: str, label: str, target: str) -> SliceColumns:
        joined = {name: np.concatenate(parts) for name, parts in self.columns.items()}
        self.columns.clear()
        return SliceColumns(
            run_id, label, target, joined["started"], joined["ended"], joined["ok"],
            joined["collapsed"], joined["tokens"], dict(self.errors), joined["compared"],
            joined["divergence"], self.greedy, joined["collapsed_ids"],
            joined["collapsed_runlike"], joined["server_error"], joined["judged"],
            joined["crash_lost"], joined["suspect"], joined["repeat"], self.characters,
            {name[6:]: flags for name, flags in joined.items()
             if name.startswith("check:") and flags.any()},
            stored_order(joined["clean_ids"]),
        )  # fmt: skip


def stored_order(row_ids: IntArray) -> npt.NDArray[np.int32] | None:
    """Positions that put rows read in seq order into row-id (stored) order; None if they are."""
    if len(row_ids) < 2 or bool(np.all(row_ids[1:] > row_ids[:-1])):
        return None
    return np.argsort(row_ids, kind="stable").astype(np.int32)


def _run_order(runs: list[Run], run_ids: list[str]) -> list[str]:
    """Runs oldest first, then run ids no run record names (by id), as the report orders them."""
    order = {run.run_id: i for i, run in enumerate(runs)}
    return sorted(run_ids, key=lambda r: (order.get(r, len(order)), r))


Split = dict[tuple[str, str], _Pieces]


def _scan_run(
    reader: ColumnReader, run: Run | None, run_id: str, upto: int, greedy: bool,
    make: Callable[[str], _Pieces],
) -> tuple[Split, Split]:  # fmt: skip
    """The run's rows split by (label, target), and apart from them its warm-up rows; through
    the Arrow reader without strings when the run record says which targets and label to expect
    (read again with strings when a row holds another)."""
    from soakgate.store.columns import UnexpectedValues

    warmup = int(run.load.get("warmup_requests") or 0) if run is not None else 0
    if run is not None:
        try:
            batches = reader.scan(run_id, upto, greedy, (run.targets, [run.label]))
            return _split(batches, warmup, make)
        except UnexpectedValues:
            pass  # e.g. a two-arm run, whose rows carry the arms' labels
    return _split(reader.scan(run_id, upto, greedy), warmup, make)


def _split(
    batches: Iterable[ColumnBatch], warmup: int, make: Callable[[str], _Pieces]
) -> tuple[Split, Split]:
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
                warm.setdefault((label, target), make(target)).add(batch, early)
                mask &= ~early
            if mask.any():
                pieces.setdefault((label, target), make(target)).add(batch, mask)
    return pieces, warm


def fault_windows(events: Iterable[Event]) -> dict[str, Windows]:
    """Run id -> target -> (incarnation, start) of each server crash the guard recorded (its
    `fault_window`, or the `engine_fault` alone when the run ended before the window closed)."""
    found: dict[str, dict[str, set[tuple[int, float]]]] = {}
    for event in events:
        if event.target is None or event.kind not in ("fault_window", "engine_fault"):
            continue
        data = event.data
        dead = data.get("incarnation_before", data.get("incarnation", 0))
        start = data.get("start", data.get("window_start", event.at))
        if isinstance(dead, int) and isinstance(start, int | float):
            found.setdefault(event.run_id, {}).setdefault(event.target, set()).add(
                (dead, float(start))
            )
    return {run: {t: sorted(w) for t, w in by.items()} for run, by in found.items()}


def load_columns(
    reader: ColumnReader, runs: list[Run], events: list[Event], ledger: list[LedgerEntry],
    suspect_ids: Iterable[int] = (), checked: Iterable[tuple[int, str]] = (),
) -> Columns:  # fmt: skip
    """Read every run's rows (up to the newest row at the start) into slices, and the rows
    shown as exemplars; `suspect_ids` are the rows reference scoring flagged, `checked` the
    (row id, checks) of the rows that failed an integrity check."""

    upto = reader.max_row_id()
    greedy_runs = {e.run_id for e in events if e.kind == "reference_baseline"}
    probe_runs = _probe_runs(runs)
    slices: dict[tuple[str, str], list[SliceColumns]] = {}
    warmups: dict[tuple[str, str], list[SliceColumns]] = {}
    records = {run.run_id: run for run in runs}
    windows = fault_windows(events)
    suspects = np.fromiter(suspect_ids, np.int64)
    check_ids = _check_ids(checked)
    for run_id in _run_order(runs, reader.run_ids()):
        if run_id in probe_runs:
            continue
        mine = windows.get(run_id, {})

        def make(target: str, mine: Windows = mine) -> _Pieces:
            return _Pieces(mine.get(target, []), suspects, check_ids)

        split = _scan_run(reader, records.get(run_id), run_id, upto, run_id in greedy_runs, make)
        for into, pieces in zip((slices, warmups), split, strict=True):
            for (label, target), piece in pieces.items():
                into.setdefault((label, target), []).append(piece.join(run_id, label, target))
    columns = Columns(runs, events, ledger, slices, warmups=warmups)
    columns.exemplars = reader.rows(exemplar_ids(columns))
    return columns


def _check_ids(checked: Iterable[tuple[int, str]]) -> dict[str, IntArray]:
    """Check name -> the ids of the rows that failed it (sorted); `-<name>` -> those it did not
    judge (`records.UNJUDGED`)."""
    found: dict[str, list[int]] = {}
    for row_id, names in checked:
        for name in str(names).split(","):
            if name:
                found.setdefault(name, []).append(int(row_id))
    return {name: np.array(sorted(ids), np.int64) for name, ids in found.items()}


def checked_rows(store: Store) -> list[tuple[int, str]]:
    """(row id, checks) of the rows that failed an integrity check: through SQLite's partial
    index, else from the rows (ids as `RowReader` numbers them)."""
    from soakgate.store.sqlite import SqliteStore

    if isinstance(store, SqliteStore):
        return store.checked_rows()
    return [(i, ",".join(g.checks)) for i, g in enumerate(store.generations(), 1) if g.checks]


def _probe_runs(runs: Iterable[Run]) -> set[str]:
    """Runs whose rows make no units (replay's)."""
    from soakgate.probes.reproduce import PROBE_RUNS

    return {r.run_id for r in runs if r.load.get("probe") in PROBE_RUNS}


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
    from soakgate.report.latency_load import load_latency, store_batches
    from soakgate.report.reference_load import load_reference, suspect_ids
    from soakgate.store.sqlite import SqliteStore, reader_for

    runs = store.runs()
    reference = load_reference(store, runs)
    reader = reader_for(store)
    try:
        columns = load_columns(reader, runs, store.events(), store.ledger(),
                               suspect_ids(reference[0]), checked_rows(store))  # fmt: skip
    finally:
        reader.close()
    columns.reference, columns.reference_rows = reference
    rows = (store.gateway_counts() if isinstance(store, SqliteStore)
            else _gateway_rows(store.generations()))  # fmt: skip
    columns.gateway = gateway_tallies(rows, _probe_runs(columns.runs))
    columns.latency = load_latency(store_batches(store), runs, _probe_runs(runs))
    if contexts and isinstance(store, SqliteStore):
        _add_contexts(store, columns)
    return columns


def load_path(path: str | Path, contexts: bool = False) -> Columns:
    """Columns of a database file, read-only: metadata through sqlite3, then the rows through the
    Arrow reader once sqlite3 has closed the file (two SQLite libraries must not hold one file
    open in a process), or through sqlite3 where Arrow cannot be used; with `contexts`, what
    surrounded each exemplar (sqlite3 again, once Arrow has closed the file)."""
    from soakgate.report.latency_load import load_latency, store_batches
    from soakgate.report.reference_load import load_reference, suspect_ids
    from soakgate.store.columns import ArrowReader, arrow_available
    from soakgate.store.sqlite import open_analysis, read_only_uri

    store = open_analysis(path)
    try:
        runs, events, ledger = store.runs(), store.events(), store.ledger()
        reference = load_reference(store, runs)
        suspects = suspect_ids(reference[0])
        checked = checked_rows(store)
        gateway = gateway_tallies(store.gateway_counts(), _probe_runs(runs))
        if not arrow_available() or store.shared_in_process:
            latency = load_latency(store_batches(store), runs, _probe_runs(runs))
            columns = load_columns(store.column_reader(), runs, events, ledger, suspects, checked)
            columns.reference, columns.reference_rows = reference
            columns.gateway, columns.latency = gateway, latency
            if contexts:
                _add_contexts(store, columns)
            return columns
    finally:
        store.close()
    reader = ArrowReader(read_only_uri(Path(path)), str(path))
    try:
        columns = load_columns(reader, runs, events, ledger, suspects, checked)
        upto = reader.max_row_id()
        latency = load_latency(lambda run_id: reader.latency(run_id, upto), runs,
                               _probe_runs(runs))  # fmt: skip
    finally:
        reader.close()
    columns.reference, columns.reference_rows = reference
    columns.gateway, columns.latency = gateway, latency
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
