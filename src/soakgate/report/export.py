"""Export every generation of a database as Parquet (pyarrow), CSV or JSON Lines.

Rows are streamed in batches so a large database never has to fit in memory. Nested fields
(scores, details, flags, token ids) stay nested in Parquet and JSONL and become JSON text in CSV.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import sys
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path
from typing import IO, Any

from soakgate.errors import UsageError
from soakgate.records import Generation
from soakgate.store.base import Store

FORMATS = ("parquet", "csv", "jsonl")
FIELDS = tuple(f.name for f in dataclasses.fields(Generation))
NESTED = ("token_ids", "scores", "details", "flags")
BATCH = 5000


def generation_dict(g: Generation) -> dict[str, Any]:
    """A generation as a plain dict, plus the derived `collapsed` column."""
    row = {name: getattr(g, name) for name in FIELDS}
    row["collapsed"] = g.collapsed
    return row


def _batches(rows: Iterable[Generation]) -> Iterator[list[dict[str, Any]]]:
    iterator = iter(rows)
    while batch := list(islice(iterator, BATCH)):
        yield [generation_dict(g) for g in batch]


def _schema() -> Any:
    import pyarrow as pa

    types = {
        "seq": pa.int64(), "stream": pa.bool_(), "started_at": pa.float64(),
        "ended_at": pa.float64(), "ttft_s": pa.float64(), "prompt_tokens": pa.int64(),
        "completion_tokens": pa.int64(), "http_status": pa.int64(), "incarnation": pa.int64(),
        "reference_divergence": pa.int64(), "attempts": pa.int64(),
        "reference_score": pa.float64(), "suspect": pa.bool_(), "gateway_retries": pa.int64(),
        "token_ids": pa.list_(pa.int64()),
        "scores": pa.map_(pa.string(), pa.float64()), "details": pa.string(),
        "flags": pa.list_(pa.string()), "collapsed": pa.bool_(),
    }  # fmt: skip
    return pa.schema([(name, types.get(name, pa.string())) for name in (*FIELDS, "collapsed")])


def _write_parquet(rows: Iterable[Generation], path: Path) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema, count = _schema(), 0
    with pq.ParquetWriter(path, schema) as writer:
        for batch in _batches(rows):
            for row in batch:
                row["details"] = json.dumps(row["details"], sort_keys=True, default=str)
                row["scores"] = list(row["scores"].items())
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
            count += len(batch)
    return count


def _write_csv(rows: Iterable[Generation], handle: IO[str]) -> int:
    writer = csv.DictWriter(handle, (*FIELDS, "collapsed"), lineterminator="\n")
    writer.writeheader()
    count = 0
    for batch in _batches(rows):
        for row in batch:
            for name in NESTED:
                row[name] = json.dumps(row[name], sort_keys=True, default=str)
            writer.writerow(row)
        count += len(batch)
    return count


def _write_jsonl(rows: Iterable[Generation], handle: IO[str]) -> int:
    count = 0
    for batch in _batches(rows):
        handle.writelines(json.dumps(row, default=str) + "\n" for row in batch)
        count += len(batch)
    return count


def default_output(db: str | Path, fmt: str) -> Path | None:
    """Where an export goes without --out: Parquet (binary) to `DB-STEM.parquet` in the current
    folder (not next to the database, which may be read-only); CSV/JSONL to stdout (None)."""
    return Path(f"{Path(db).stem}.parquet") if fmt == "parquet" else None


def export(store: Store, fmt: str, out: str | Path | None = None) -> int:
    """Write every generation in (run, seq) order; returns how many. CSV/JSONL go to stdout
    without `out`; Parquet needs a file (`default_output`)."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown export format {fmt!r}; choose from {', '.join(FORMATS)}")
    rows = store.generations()
    try:
        if fmt == "parquet":
            if out is None:
                raise UsageError("parquet export needs --out FILE")
            return _write_parquet(rows, Path(out))
        writer = _write_csv if fmt == "csv" else _write_jsonl
        if out is None:
            return writer(rows, sys.stdout)
        with open(out, "w", encoding="utf-8", newline="") as handle:
            return writer(rows, handle)
    except BrokenPipeError:
        raise  # the reader closed stdout (`| head`): the CLI ends quietly
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
