"""`export --format parquet` from Arrow batches: the rows go from SQLite to Parquet through the
ADBC driver's Arrow arrays, column by column, without a Python object per row except for the
two JSON columns (scores become a map, details is re-encoded as the row-object export wrote
it). Five times less CPU than building a Generation per row; the same file contents.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from soakgate.report.export import FIELDS
from soakgate.store import codec
from soakgate.store.columns import ArrowReader

# Per column: its SQL (every nullable one twice: its value made non-NULL, and whether it was
# NULL: the driver types a column by its first batch, which may hold only NULLs).
_INTEGER, _REAL, _TEXT = "INTEGER", "REAL", "TEXT"
_COLUMNS: dict[str, tuple[str, bool]] = {
    "run_id": (_TEXT, False), "request_id": (_TEXT, False), "target": (_TEXT, False),
    "label": (_TEXT, False), "seq": (_INTEGER, False), "prompt_id": (_TEXT, False),
    "endpoint": (_TEXT, False), "stream": (_INTEGER, False), "started_at": (_REAL, False),
    "ended_at": (_REAL, False), "ttft_s": (_REAL, True), "prompt_tokens": (_INTEGER, True),
    "completion_tokens": (_INTEGER, True), "finish_reason": (_TEXT, True),
    "http_status": (_INTEGER, True), "error_class": (_TEXT, True),
    "error_detail": (_TEXT, True), "text": (_TEXT, True), "text_sha256": (_TEXT, False),
    "token_ids": ("BLOB", True), "scores": (_TEXT, False), "details": (_TEXT, False),
    "flags": (_TEXT, False), "incarnation": (_INTEGER, False),
    "reference_divergence": (_INTEGER, True), "attempts": (_INTEGER, False),
    "reference_score": (_REAL, True), "suspect": (_INTEGER, True),
    "gateway_retries": (_INTEGER, True), "checks": (_TEXT, False),
}  # fmt: skip
_DEFAULTS = {_INTEGER: "0", _REAL: "0.0", _TEXT: "''", "BLOB": "X''"}


def _select(present: set[str], run_ids: list[str] | None) -> tuple[str, list[str]]:
    parts = []
    for name in FIELDS:
        kind, nullable = _COLUMNS[name]
        # a column an unmigrated database lacks reads as its default (`attempts` 1, else NULL)
        column = name if name in present else codec.COLUMN_DEFAULTS[name]
        if nullable:
            parts += [f"COALESCE({column}, {_DEFAULTS[kind]})", f"{column} IS NULL"]
        elif kind == "BLOB":
            parts.append(column)
        else:
            parts.append(f"CAST(COALESCE({column}, {_DEFAULTS[kind]}) AS {kind})")
    where = "" if run_ids is None else f" WHERE run_id IN ({', '.join('?' * len(run_ids))})"
    sql = f"SELECT {', '.join(parts)} FROM generations{where} ORDER BY run_id, seq"
    return sql, run_ids or []


def _token_lists(blobs: Any, missing: Any) -> Any:
    """array('i') blobs as lists of int64 (null where the row stored none)."""
    import pyarrow as pa

    blobs = blobs.cast(pa.binary())
    offsets = np.frombuffer(blobs.buffers()[1], np.int32)[
        blobs.offset : blobs.offset + len(blobs) + 1
    ]
    data = blobs.buffers()[2]
    values = (
        np.frombuffer(data, np.int32) if data is not None and len(data) else np.zeros(0, np.int32)
    )
    starts = offsets[0] // 4
    ends = offsets[-1] // 4
    lists = pa.ListArray.from_arrays(
        pa.array((offsets - offsets[0]) // 4, pa.int32()),
        pa.array(values[starts:ends].astype(np.int64)),
        mask=pa.array(missing),
    )
    return lists.cast(pa.list_(pa.int64()))


def _loads(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:  # NaN or an infinity, which the stdlib wrote
        return json.loads(text)


def _table(batch: Any, schema: Any) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    columns: dict[str, Any] = {}
    index = 0
    for name in FIELDS:
        nullable = _COLUMNS[name][1]
        value = batch.column(index)
        missing = (
            batch.column(index + 1).to_numpy(zero_copy_only=False).astype(bool)
            if nullable
            else None
        )
        index += 2 if nullable else 1
        if name == "token_ids":
            columns[name] = _token_lists(value, missing)
            continue
        if missing is not None:
            value = pc.if_else(pa.array(missing), pa.nulls(len(value), value.type), value)
        columns[name] = value
    scores = [list(_loads(s).items()) for s in columns["scores"].to_pylist()]
    columns["scores"] = pa.array(scores, schema.field("scores").type)
    encoded: dict[str, str] = {}  # soaks repeat their evidence: each distinct text once
    details = [
        encoded.get(d) or encoded.setdefault(d, json.dumps(_loads(d), sort_keys=True, default=str))
        for d in columns["details"].to_pylist()
    ]
    json_type = schema.field("details").type
    columns["details"] = pa.ExtensionArray.from_storage(json_type, pa.array(details, pa.string()))
    for name in ("started_at", "ended_at"):  # unix seconds -> whole microseconds, half to even
        micros = pc.round(pc.multiply(columns[name], 1_000_000.0), round_mode="half_to_even")
        columns[name] = pc.cast(micros, pa.int64()).cast(schema.field(name).type)
    for name in ("flags", "checks"):  # comma-joined names -> lists
        joined = columns[name]
        split = pc.split_pattern(joined, ",")
        columns[name] = pc.if_else(
            pc.equal(joined, ""), pa.array([[]] * len(joined), split.type), split
        )
    flags = columns["flags"]
    columns["stream"] = pc.not_equal(columns["stream"], 0)
    flagged = pc.greater(pc.list_value_length(flags), 0)
    columns["collapsed"] = pc.and_(pc.is_null(columns["error_class"]), flagged)
    arrays = [
        columns[f.name] if columns[f.name].type == f.type else columns[f.name].cast(f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def batches(reader: ArrowReader, present: set[str], run_ids: list[str] | None) -> Iterator[Any]:
    """Every row (of `run_ids`, None: all), in (run, seq) order, as record batches of the raw
    SELECT."""
    sql, params = _select(present, run_ids)
    yield from reader.raw_batches(sql, params)


def write_parquet(
    db: str | Path, uri: str, present: set[str], path: Path, schema: Any,
    run_ids: list[str] | None = None,
) -> int:  # fmt: skip
    """Write the generations (of `run_ids`, None: all) of the database at `uri` to `path` with
    the export's `schema` (and its metadata); returns how many."""
    import pyarrow.parquet as pq

    count = 0
    reader = ArrowReader(uri, str(db))
    try:
        with pq.ParquetWriter(path, schema) as writer:
            for batch in batches(reader, present, run_ids):
                table = _table(batch, schema)
                writer.write_table(table)
                count += table.num_rows
    finally:
        reader.close()
    return count
