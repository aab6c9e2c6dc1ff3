"""Columnar reads of the generations table: only the columns analysis needs, run by run in
seq order, in chunks of numpy arrays; texts and JSON only for the rows asked for by id.

Three readers give the same batches: `ArrowReader` (the ADBC SQLite driver, which fills Arrow
arrays in C: 2.5x less CPU than Python's sqlite3 on the same query, BENCHMARKS.md), the
`Sqlite3Reader` over the standard library (used where the ADBC driver must not open the file,
see `store.sqlite.reader_for`), and `RowReader` over any store's `generations()` (the in-memory
twin).

The ADBC driver links its own copy of SQLite. Two SQLite libraries with the same file open in
one process break its POSIX locks (closing one's descriptor drops the other's locks), so the
Arrow reader is used only on a file no connection of this process holds open.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from soakgate.errors import StoreError
from soakgate.records import Generation
from soakgate.store import codec

NO_DIVERGENCE = np.iinfo(np.int64).min
"""`reference_divergence` of a row that was not compared with a reference."""
BATCH_ROWS = 65536

# Every column is COALESCEd to a value of its type: the ADBC driver takes each column's type from
# its first batch, and a column that starts all NULL would be typed wrongly.
_SELECT = (
    "SELECT id, COALESCE(target, ''), COALESCE(label, ''), CAST(started_at AS REAL), "
    "CAST(ended_at AS REAL), COALESCE(error_class, ''), "
    "CAST(COALESCE(completion_tokens, 0) AS INTEGER), COALESCE(flags, ''), "
    f"CAST(COALESCE(reference_divergence, {NO_DIVERGENCE}) AS INTEGER), "
    "CAST(COALESCE(incarnation, 0) AS INTEGER){reference} "
    "FROM generations WHERE run_id = ? AND id <= ? ORDER BY seq"
)
# Greedy rows are looked for only in runs with a reference baseline (a run with --reference
# records one before its first request): searching the details JSON costs more than a column.
# The driver marks greedy rows so; the reference's own repeat of a compared request (where the
# reference diverged from itself) and whether positions count tokens are in the same object.
_MARKS = "CASE WHEN json_valid(details) THEN json_extract(details, '$.differential.{}') END"
_REFERENCE = (
    ", instr(details, '\"differential\"') > 0, "
    f"CAST(COALESCE({_MARKS.format('reference_repeat')}, {NO_DIVERGENCE}) AS INTEGER), "
    f"COALESCE({_MARKS.format('unit')}, 'tokens') = 'characters'"
)
RUN_DETECTORS = ("char_run", "token_run")
"""Detectors of runs of one character or token (`!!!!`): their collapses are shown first."""
_RUNLIKE = " OR ".join(
    f"instr(',' || COALESCE(flags, '') || ',', ',{d},') > 0" for d in RUN_DETECTORS
)


def _case(column: str, values: Sequence[str]) -> str:
    """`column` as the index of its value in `values` ('' standing for NULL), -1 for any other."""
    arms = " ".join(
        f"WHEN {column} IS NULL THEN {i}" if v == "" else f"WHEN {column} = {_quote(v)} THEN {i}"
        for i, v in enumerate(values)
    )
    return f"CASE {arms} ELSE -1 END"


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def numeric_select(targets: Sequence[str], labels: Sequence[str], reference: bool) -> str:
    """_SELECT with every string column mapped to a number in SQL (no string crosses into
    Arrow): targets, labels and error classes as indices into the values expected (-1 for one
    not expected: the run is then read again with strings), flags as flagged and run-like."""
    from soakgate.records import ERROR_CLASSES

    return (
        f"SELECT id, {_case('target', targets)}, {_case('label', labels)}, "
        "CAST(started_at AS REAL), CAST(ended_at AS REAL), "
        f"{_case('error_class', ('', *ERROR_CLASSES))}, "
        "CAST(COALESCE(completion_tokens, 0) AS INTEGER), COALESCE(flags, '') != '', "
        f"{_RUNLIKE}, CAST(COALESCE(reference_divergence, {NO_DIVERGENCE}) AS INTEGER), "
        f"CAST(COALESCE(incarnation, 0) AS INTEGER){_REFERENCE if reference else ''} "
        "FROM generations WHERE run_id = ? AND id <= ? ORDER BY seq"
    )


LATENCY_SELECT = (
    "SELECT COALESCE(label, ''), COALESCE(target, ''), CAST(error_class IS NULL AS INTEGER), "
    "CAST(ended_at - started_at AS REAL), "
    "CAST(CASE WHEN stream THEN COALESCE(ttft_s, -1.0) ELSE -1.0 END AS REAL), "
    "CAST(COALESCE(completion_tokens, -1) AS INTEGER) "
    "FROM generations WHERE run_id = ? AND id <= ? ORDER BY seq"
)
"""A run's rows' timings in seq order (report/latency_load.py): -1 where there is no time to
first token (not streamed, or none came) or no token count."""


@dataclass(slots=True)
class LatencyBatch:
    """Consecutive rows of one run, in seq order: what latency is computed from."""

    label: tuple[CodeArray, list[str]]
    target: tuple[CodeArray, list[str]]
    clean: BoolArray
    """The request completed without an error."""
    seconds: FloatArray
    """End-to-end: `ended_at - started_at`."""
    ttft: FloatArray
    """Time to first token (NaN: not streamed, or no token came)."""
    tokens: FloatArray
    """Completion tokens (NaN: not reported)."""


def _missing(values: Any) -> FloatArray:
    found = np.asarray(values, np.float64)
    return np.where(found < 0, np.nan, found)


def latency_from_tuples(rows: Sequence[tuple[Any, ...]]) -> LatencyBatch:
    """A batch from rows in LATENCY_SELECT's column order."""
    columns = list(zip(*rows, strict=True)) if rows else [()] * 6
    return LatencyBatch(
        _codes(columns[0]), _codes(columns[1]), np.array(columns[2], bool),
        np.array(columns[3], np.float64), _missing(columns[4]), _missing(columns[5]),
    )  # fmt: skip


def latency_from_arrow(batch: Any) -> LatencyBatch:
    """A batch from an Arrow record batch of LATENCY_SELECT (strings encoded in C)."""
    columns = batch.columns

    def numbers(index: int) -> Any:
        return columns[index].to_numpy(zero_copy_only=False)

    return LatencyBatch(
        _dictionary(columns[0]), _dictionary(columns[1]), numbers(2).astype(bool),
        numbers(3).astype(np.float64), _missing(numbers(4)), _missing(numbers(5)),
    )  # fmt: skip


class UnexpectedValues(Exception):
    """A numeric scan met a target, label or error class it was not told to expect."""


# Loose index scan over generations_run_seq: one seek per distinct run, not one row per row.
_RUN_IDS = (
    "WITH RECURSIVE r(x) AS (SELECT MIN(run_id) FROM generations UNION ALL "
    "SELECT (SELECT MIN(run_id) FROM generations WHERE run_id > x) FROM r WHERE x IS NOT NULL) "
    "SELECT x FROM r WHERE x IS NOT NULL"
)

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
CodeArray = npt.NDArray[np.int32]


@dataclass(slots=True)
class ColumnBatch:
    """Consecutive rows of one run, in seq order. String columns come as codes into `values`."""

    run_id: str
    """The run."""
    row_id: IntArray
    """The rows' ids (to fetch a row whole, e.g. an exemplar)."""
    target: tuple[CodeArray, list[str]]
    """Target of each row."""
    label: tuple[CodeArray, list[str]]
    """Label of each row."""
    started: FloatArray
    """`started_at`."""
    ended: FloatArray
    """`ended_at`."""
    error: tuple[CodeArray, list[str]]
    """Error class ('' for a clean response)."""
    flagged: BoolArray
    """Some detector flagged the row (a collapse when the row is clean)."""
    tokens: IntArray
    """Completion tokens (0 when not reported)."""
    divergence: IntArray
    """First divergence from the reference (NO_DIVERGENCE: not compared)."""
    greedy: BoolArray
    """Sent greedy for the differential check (only looked for in the runs asked)."""
    runlike: BoolArray
    """Flagged by a run detector (RUN_DETECTORS)."""
    incarnation: IntArray
    """Which incarnation of the target's server served the row."""
    repeat: IntArray
    """First divergence of the reference's repeat of a compared request from its first answer
    (NO_DIVERGENCE: not repeated; only looked for in the runs asked, like `greedy`)."""
    characters: BoolArray
    """The row's divergence positions count characters (no token ids on both sides)."""

    def __len__(self) -> int:
        return len(self.row_id)


class ColumnReader(Protocol):
    """What the analysis reads a store through."""

    def run_ids(self) -> list[str]:
        """Every run id that has generations."""

    def max_row_id(self) -> int:
        """The newest row's id: scans stop there, so that rows stored meanwhile are not seen."""

    def scan(
        self, run_id: str, upto: int, greedy: bool,
        expect: tuple[Sequence[str], Sequence[str]] | None = None,
    ) -> Iterator[ColumnBatch]:  # fmt: skip
        """The run's rows with id <= upto, in seq order; `greedy` looks for greedy rows;
        `expect` (targets, label) may let a reader read no strings (it then raises
        UnexpectedValues on a row holding another)."""

    def rows(self, row_ids: Sequence[int]) -> dict[int, Generation]:
        """Whole rows by id."""

    def close(self) -> None:
        """Release the connection."""


def _codes(values: Sequence[str]) -> tuple[CodeArray, list[str]]:
    vocabulary: dict[str, int] = {}
    codes = np.fromiter((vocabulary.setdefault(v, len(vocabulary)) for v in values), np.int32,
                        len(values))  # fmt: skip
    return codes, list(vocabulary)


def _batch(run_id: str, ids: IntArray, target: tuple[CodeArray, list[str]],
           label: tuple[CodeArray, list[str]], started: FloatArray, ended: FloatArray,
           error: tuple[CodeArray, list[str]], tokens: IntArray,
           flags: tuple[CodeArray, list[str]], divergence: IntArray, incarnation: IntArray,
           differential: tuple[BoolArray, IntArray, BoolArray] | None) -> ColumnBatch:  # fmt: skip
    codes, values = flags
    flagged = np.array([v != "" for v in values], bool)[codes]
    runlike = np.array([any(d in v.split(",") for d in RUN_DETECTORS) for v in values], bool)
    greedy, repeat, characters = differential or _no_differential(len(ids))
    return ColumnBatch(run_id, ids, target, label, started, ended, error, flagged, tokens,
                       divergence, greedy, runlike[codes] if len(values) else flagged,
                       incarnation, repeat, characters)  # fmt: skip


def _no_differential(rows: int) -> tuple[BoolArray, IntArray, BoolArray]:
    """The greedy columns of a run not scanned for them: no greedy row, nothing repeated."""
    return np.zeros(rows, bool), np.full(rows, NO_DIVERGENCE, np.int64), np.zeros(rows, bool)


def _batch_from_tuples(run_id: str, rows: Sequence[tuple[Any, ...]]) -> ColumnBatch:
    """A batch from rows in _SELECT's column order (the sqlite3 and row readers)."""
    columns = list(zip(*rows, strict=True))
    differential = None
    if len(columns) > 10:
        differential = (np.array(columns[10], bool), np.array(columns[11], np.int64),
                        np.array(columns[12], bool))  # fmt: skip
    return _batch(
        run_id, np.array(columns[0], np.int64), _codes(columns[1]), _codes(columns[2]),
        np.array(columns[3], np.float64), np.array(columns[4], np.float64), _codes(columns[5]),
        np.array(columns[6], np.int64), _codes(columns[7]), np.array(columns[8], np.int64),
        np.array(columns[9], np.int64), differential,
    )  # fmt: skip


class Sqlite3Reader:
    """Columns through the standard library's sqlite3 on an open connection."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._db = connection

    def run_ids(self) -> list[str]:
        """Every run id that has generations."""
        return [row[0] for row in self._db.execute(_RUN_IDS)]

    def max_row_id(self) -> int:
        """The newest row's id."""
        return int(self._db.execute("SELECT COALESCE(MAX(id), 0) FROM generations").fetchone()[0])

    def scan(
        self, run_id: str, upto: int, greedy: bool,
        expect: tuple[Sequence[str], Sequence[str]] | None = None,
    ) -> Iterator[ColumnBatch]:  # fmt: skip
        """The run's rows in seq order, BATCH_ROWS at a time (`expect` is not needed)."""
        sql = _SELECT.format(reference=_REFERENCE if greedy else "")
        cursor = self._db.execute(sql, (run_id, upto))
        while rows := cursor.fetchmany(BATCH_ROWS):
            yield _batch_from_tuples(run_id, rows)

    def latency(self, run_id: str, upto: int) -> Iterator[LatencyBatch]:
        """The run's rows' timings with id <= upto, in seq order, BATCH_ROWS at a time."""
        cursor = self._db.execute(LATENCY_SELECT, (run_id, upto))
        while rows := cursor.fetchmany(BATCH_ROWS):
            yield latency_from_tuples(rows)

    def rows(self, row_ids: Sequence[int]) -> dict[int, Generation]:
        """Whole rows by id."""
        present = {row[1] for row in self._db.execute("PRAGMA table_info(generations)")}
        return _fetch_rows(
            lambda sql, i: self._db.execute(sql, (i,)).fetchone(),
            codec.generation_select(present), row_ids,
        )  # fmt: skip

    def close(self) -> None:
        """Nothing to release: the connection is its owner's."""


def _fetch_rows(one_row: Any, select: str, row_ids: Sequence[int]) -> dict[int, Generation]:
    """Whole rows by id, one query each (the few an HTML report shows): `one_row(sql, id)`."""
    found: dict[int, Generation] = {}
    for row_id in sorted(set(row_ids)):
        row = one_row(f"SELECT {select} FROM generations WHERE id = ?", int(row_id))
        if row is not None:
            found[int(row_id)] = codec.generation_from_row(tuple(row))
    return found


class ArrowReader:
    """Columns through the ADBC SQLite driver: Arrow arrays filled in C, one read-only
    connection of its own (`uri` as `connect_read_only` builds it)."""

    def __init__(self, uri: str, name: str) -> None:
        import adbc_driver_sqlite.dbapi as adbc

        self._name = name
        try:
            self._db = adbc.connect(uri)
            self._cursor = self._db.cursor()
            self._cursor.execute("PRAGMA busy_timeout=10000")
            self._cursor.execute("PRAGMA query_only=ON")
        except Exception as exc:  # the driver raises its own DBAPI errors
            raise self._failed(exc) from None

    def _failed(self, exc: Exception) -> StoreError:
        """The driver's error as one line (`[SQLite] database disk image is malformed`)."""
        return StoreError(f"cannot read database {self._name}: {read_failure(exc)}")

    def _all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            self._cursor.execute(sql, tuple(params))
            return list(self._cursor.fetchall())
        except Exception as exc:
            raise self._failed(exc) from None

    def run_ids(self) -> list[str]:
        """Every run id that has generations."""
        return [str(row[0]) for row in self._all(_RUN_IDS)]

    def max_row_id(self) -> int:
        """The newest row's id."""
        return int(self._all("SELECT COALESCE(MAX(id), 0) FROM generations")[0][0])

    def scan(
        self, run_id: str, upto: int, greedy: bool,
        expect: tuple[Sequence[str], Sequence[str]] | None = None,
    ) -> Iterator[ColumnBatch]:  # fmt: skip
        """The run's rows in seq order, as Arrow record batches turned into numpy arrays.
        With `expect` (targets, labels) no string is read: targets, labels and error classes
        come as numbers (a sixth less CPU); a value not expected raises UnexpectedValues
        (before any batch holding it is yielded)."""
        if expect is None:
            sql = _SELECT.format(reference=_REFERENCE if greedy else "")
            for batch in self.raw_batches(sql, (run_id, upto)):
                yield self._decoded(_batch_from_arrow, run_id, batch)
            return
        from soakgate.records import ERROR_CLASSES

        targets, labels = list(expect[0]), list(expect[1])
        errors = ["", *ERROR_CLASSES]
        for raw in self.raw_batches(numeric_select(targets, labels, greedy), (run_id, upto)):
            batch = self._decoded(_numeric_batch, run_id, raw, targets, labels, errors)
            if min(batch.target[0].min(initial=0), batch.label[0].min(initial=0),
                   batch.error[0].min(initial=0)) < 0:  # fmt: skip
                raise UnexpectedValues(run_id)
            yield batch

    def latency(self, run_id: str, upto: int) -> Iterator[LatencyBatch]:
        """The run's rows' timings with id <= upto, in seq order, as Arrow batches."""
        for batch in self.raw_batches(LATENCY_SELECT, (run_id, upto)):
            yield latency_from_arrow(batch)

    def _decoded(self, convert: Callable[..., ColumnBatch], *args: Any) -> ColumnBatch:
        """A batch converted to numpy; text that is not UTF-8 (a damaged page) as one
        StoreError line."""
        try:
            return convert(*args)
        except UnicodeDecodeError as exc:
            raise self._failed(exc) from None

    def raw_batches(self, sql: str, params: Sequence[Any] = ()) -> Iterator[Any]:
        """Arrow record batches of any query, BATCH_ROWS rows each; driver errors as one
        StoreError line."""
        cursor = self._db.cursor()
        try:
            cursor.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
            cursor.execute(sql, tuple(params))
            batches = iter(cursor.fetch_record_batch())
            while True:
                try:
                    batch = next(batches)
                except StopIteration:
                    return
                except Exception as exc:
                    raise self._failed(exc) from None
                yield batch
        except StoreError:
            raise
        except Exception as exc:
            raise self._failed(exc) from None
        finally:
            cursor.close()

    def rows(self, row_ids: Sequence[int]) -> dict[int, Generation]:
        """Whole rows by id (the few an HTML report shows)."""
        present = {str(row[1]) for row in self._all("PRAGMA table_info(generations)")}

        def one_row(sql: str, row_id: int) -> tuple[Any, ...] | None:
            # one row per query: the driver types a column by its first row
            found = self._all(sql, (row_id,))
            return found[0] if found else None

        return _fetch_rows(one_row, codec.generation_select(present), row_ids)

    def close(self) -> None:
        """Close the driver's connection."""
        self._cursor.close()
        self._db.close()


def _dictionary(column: Any) -> tuple[CodeArray, list[str]]:
    encoded = column.dictionary_encode()
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
    return codes, [str(v) for v in encoded.dictionary.to_pylist()]


def _batch_from_arrow(run_id: str, batch: Any) -> ColumnBatch:
    columns = batch.columns

    def numbers(index: int, kind: type) -> Any:
        return columns[index].to_numpy(zero_copy_only=False).astype(kind, copy=False)

    differential = None
    if len(columns) > 10:
        differential = (numbers(10, np.int64).astype(bool), numbers(11, np.int64),
                        numbers(12, np.int64).astype(bool))  # fmt: skip
    return _batch(
        run_id, numbers(0, np.int64), _dictionary(columns[1]), _dictionary(columns[2]),
        numbers(3, np.float64), numbers(4, np.float64), _dictionary(columns[5]),
        numbers(6, np.int64), _dictionary(columns[7]), numbers(8, np.int64),
        numbers(9, np.int64), differential,
    )  # fmt: skip


def _numeric_batch(run_id: str, batch: Any, targets: list[str], labels: list[str],
                   errors: list[str]) -> ColumnBatch:  # fmt: skip
    columns = batch.columns

    def numbers(index: int, kind: type) -> Any:
        return columns[index].to_numpy(zero_copy_only=False).astype(kind, copy=False)

    greedy, repeat, characters = _no_differential(len(batch))
    if len(columns) > 11:
        greedy, repeat = numbers(11, np.int64).astype(bool), numbers(12, np.int64)
        characters = numbers(13, np.int64).astype(bool)
    return ColumnBatch(
        run_id, numbers(0, np.int64), (numbers(1, np.int32), targets),
        (numbers(2, np.int32), labels), numbers(3, np.float64), numbers(4, np.float64),
        (numbers(5, np.int32), errors), numbers(7, np.int64).astype(bool), numbers(6, np.int64),
        numbers(9, np.int64), greedy, numbers(8, np.int64).astype(bool), numbers(10, np.int64),
        repeat, characters,
    )  # fmt: skip


class RowReader:
    """Columns of any store, from its `generations()` (the in-memory store's way; the twin the
    SQLite readers are tested against). Row ids are positions in (run, seq) order, from 1."""

    def __init__(self, generations: Iterable[Generation]) -> None:
        self._rows = list(generations)

    def run_ids(self) -> list[str]:
        """Every run id that has generations."""
        return sorted({g.run_id for g in self._rows})

    def max_row_id(self) -> int:
        """The newest row's id."""
        return len(self._rows)

    def scan(
        self, run_id: str, upto: int, greedy: bool,
        expect: tuple[Sequence[str], Sequence[str]] | None = None,
    ) -> Iterator[ColumnBatch]:  # fmt: skip
        """The run's rows in seq order (`expect` is not needed)."""
        mine = [(i, g) for i, g in enumerate(self._rows[:upto], 1) if g.run_id == run_id]
        mine.sort(key=lambda item: item[1].seq)
        tuples = [_as_tuple(i, g, greedy) for i, g in mine]  # the columns _SELECT gives
        for start in range(0, len(tuples), BATCH_ROWS):
            yield _batch_from_tuples(run_id, tuples[start : start + BATCH_ROWS])

    def rows(self, row_ids: Sequence[int]) -> dict[int, Generation]:
        """Whole rows by id."""
        return {i: self._rows[i - 1] for i in row_ids}

    def close(self) -> None:
        """Nothing to release."""


def _as_tuple(row_id: int, g: Generation, reference: bool) -> tuple[Any, ...]:
    divergence = NO_DIVERGENCE if g.reference_divergence is None else g.reference_divergence
    row = (row_id, g.target, g.label, g.started_at, g.ended_at, g.error_class or "",
           g.completion_tokens or 0, ",".join(g.flags), divergence, g.incarnation)  # fmt: skip
    if not reference:
        return row
    marks = g.details.get("differential")
    marks = marks if isinstance(marks, dict) else {}
    repeat = marks.get("reference_repeat")
    repeat = repeat if isinstance(repeat, int) and not isinstance(repeat, bool) else NO_DIVERGENCE
    return (*row, "differential" in g.details, repeat, marks.get("unit") == "characters")


def arrow_available() -> bool:
    """Whether the ADBC SQLite driver is installed."""
    try:
        import adbc_driver_sqlite  # noqa: F401
    except ImportError:
        return False
    return True


def read_failure(exc: BaseException) -> str:
    """What a read of a damaged database failed on, in one line: SQLite's words, or, for text
    that is not UTF-8 (a damaged page read as a string), that it is malformed, without the
    garbage itself."""
    text = str(exc)
    if isinstance(exc, UnicodeDecodeError):
        return "database disk image is malformed (a text column holds bytes that are not UTF-8)"
    if "Could not decode to UTF-8" in text:
        column = text.split("column ", 1)[-1].split(" with text", 1)[0]
        return f"database disk image is malformed (column {column} holds bytes that are not text)"
    return text
