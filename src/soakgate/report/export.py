"""Export a database's generations, runs or events as Parquet (pyarrow), CSV or JSON Lines.

Rows are streamed in batches so a large database never has to fit in memory. Every field has
one shape, whatever the format:

- moments (a generation's `started_at`/`ended_at`, a run's `started_at`/`ended_at`, an
  event's `at`) are UTC timestamps to the microsecond: Parquet `timestamp[us, tz=UTC]`, CSV and
  JSON Lines ISO 8601 with a `Z` (`2026-12-03T11:21:29.123456Z`); durations (`ttft_s`) stay
  seconds;
- free-form objects (`details`, a run's `load`/`detectors`/`software`, an event's `data`) are
  JSON text with sorted keys in every format (Parquet: its JSON logical type);
- lists and maps of one type (`token_ids`, `flags`, `scores`, a run's `targets`) are nested in
  Parquet and JSON Lines and JSON text in CSV, which holds only text.

A Parquet file carries key-value metadata: `soakgate.version`, `soakgate.export` (the table,
the filters and the database's file name) and `soakgate.runs` (the settings of every run its
rows belong to, as a JSON list shaped like the `runs` table's rows in JSON Lines).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import islice
from pathlib import Path
from typing import IO, Any

from soakgate.errors import UsageError
from soakgate.records import Event, Generation, Run
from soakgate.store.base import Store

FORMATS = ("parquet", "csv", "jsonl")
TABLES = ("generations", "runs", "events")
FIELDS = tuple(f.name for f in dataclasses.fields(Generation))
BATCH = 5000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class TableSpec:
    """How one exported table's columns are shaped (see the module's docstring)."""

    columns: tuple[str, ...]
    moments: tuple[str, ...]
    """Unix seconds, exported as UTC timestamps."""
    objects: tuple[str, ...]
    """Free-form objects, exported as JSON text."""
    nested: tuple[str, ...]
    """Lists and maps of one type: nested, JSON text in CSV."""
    types: Callable[[], dict[str, Any]]
    """Column -> Arrow type, for the columns that are not strings."""


def _generation_types() -> dict[str, Any]:
    import pyarrow as pa

    return {
        "seq": pa.int64(), "stream": pa.bool_(), "started_at": _moment_type(),
        "ended_at": _moment_type(), "ttft_s": pa.float64(), "prompt_tokens": pa.int64(),
        "completion_tokens": pa.int64(), "http_status": pa.int64(), "incarnation": pa.int64(),
        "reference_divergence": pa.int64(), "attempts": pa.int64(),
        "reference_score": pa.float64(), "suspect": pa.bool_(), "gateway_retries": pa.int64(),
        "token_ids": pa.list_(pa.int64()), "scores": pa.map_(pa.string(), pa.float64()),
        "details": _json_type(), "flags": pa.list_(pa.string()), "collapsed": pa.bool_(),
        "checks": pa.list_(pa.string()),
    }  # fmt: skip


def _run_types() -> dict[str, Any]:
    import pyarrow as pa

    return {
        "targets": pa.list_(pa.string()), "started_at": _moment_type(),
        "ended_at": _moment_type(), "load": _json_type(), "detectors": _json_type(),
        "software": _json_type(),
    }  # fmt: skip


def _event_types() -> dict[str, Any]:
    return {"at": _moment_type(), "data": _json_type()}


SPECS = {
    "generations": TableSpec(
        (*FIELDS, "collapsed"), ("started_at", "ended_at"), ("details",),
        ("token_ids", "scores", "flags", "checks"), _generation_types,
    ),
    "runs": TableSpec(
        ("run_id", "label", "targets", "started_at", "ended_at", "status", "plan_sha256",
         "campaign", "load", "detectors", "software"),
        ("started_at", "ended_at"), ("load", "detectors", "software"), ("targets",), _run_types,
    ),
    "events": TableSpec(
        ("run_id", "at", "kind", "target", "data"), ("at",), ("data",), (), _event_types,
    ),
}  # fmt: skip


def _moment_type() -> Any:
    import pyarrow as pa

    return pa.timestamp("us", tz="UTC")


def _json_type() -> Any:
    import pyarrow as pa

    return pa.json_(pa.string())


def schema(table: str, metadata: dict[str, str] | None = None) -> Any:
    """The Arrow (and Parquet) schema of an exported table."""
    import pyarrow as pa

    spec = SPECS[table]
    types = spec.types()
    fields = [(name, types.get(name, pa.string())) for name in spec.columns]
    return pa.schema(fields, metadata=metadata)


def microseconds(seconds: float) -> int:
    """Unix seconds as whole microseconds (rounded half to even, as Arrow rounds them)."""
    return round(seconds * 1_000_000)


def utc_text(seconds: float | None) -> str | None:
    """Unix seconds as ISO 8601 UTC to the microsecond (`2026-12-03T11:21:29.123456Z`)."""
    if seconds is None or not math.isfinite(seconds):
        return None
    moment = _EPOCH + timedelta(microseconds=microseconds(seconds))
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def json_text(value: Any) -> str:
    """A free-form object as the JSON text every format carries (sorted keys)."""
    return json.dumps(value, sort_keys=True, default=str)


@dataclass(frozen=True)
class Selection:
    """Which runs an export covers: `--run` ids and `--label`s (empty: every run)."""

    runs: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()

    @property
    def filtered(self) -> bool:
        return bool(self.runs or self.labels)

    def resolve(self, stored: Sequence[Run]) -> list[Run]:
        """The stored runs selected, in run-id order; an id or label the database does not hold
        is a UsageError (a filter that matches nothing is a typo, not an empty export)."""
        ids = {run.run_id for run in stored}
        labels = {run.label for run in stored}
        for run_id in self.runs:
            if run_id not in ids:
                raise UsageError(f"no run {run_id!r} in the database (runs: {_some(ids)})")
        for label in self.labels:
            if label not in labels:
                raise UsageError(
                    f"no run labelled {label!r} in the database (labels: {_some(labels)})"
                )
        chosen = [
            run
            for run in stored
            if (not self.runs or run.run_id in self.runs)
            and (not self.labels or run.label in self.labels)
        ]
        if not chosen:
            raise UsageError("no run is both one of the --run ids and of the --label labels")
        return sorted(chosen, key=lambda run: run.run_id)

    def describe(self) -> dict[str, list[str]]:
        return {"runs": list(self.runs), "labels": list(self.labels)}


def _some(names: Iterable[str]) -> str:
    listed = sorted(names)
    shown = ", ".join(repr(name) for name in listed[:5])
    return (shown + f", ... {len(listed) - 5} more") if len(listed) > 5 else (shown or "none")


def generation_dict(g: Generation) -> dict[str, Any]:
    """A generation as a plain dict, plus the derived `collapsed` column (raw values: unix
    seconds, nested objects)."""
    row = {name: getattr(g, name) for name in FIELDS}
    row["collapsed"] = g.collapsed
    return row


def run_dict(run: Run) -> dict[str, Any]:
    """A run as a plain dict of the `runs` table's columns (raw values)."""
    return {name: getattr(run, name) for name in SPECS["runs"].columns}


def event_dict(event: Event) -> dict[str, Any]:
    """An event as a plain dict of the `events` table's columns (raw values)."""
    return {name: getattr(event, name) for name in SPECS["events"].columns}


def shaped(row: dict[str, Any], spec: TableSpec, fmt: str) -> dict[str, Any]:
    """A raw row in the shape `fmt` exports (see the module's docstring)."""
    for name in spec.objects:
        row[name] = None if row[name] is None else json_text(row[name])
    if fmt == "parquet":
        for name in spec.moments:
            value = row[name]
            row[name] = None if value is None or not math.isfinite(value) else microseconds(value)
        if "scores" in row:
            row["scores"] = list(row["scores"].items())
        return row
    for name in spec.moments:
        row[name] = utc_text(row[name])
    if fmt == "csv":
        for name in spec.nested:
            row[name] = json_text(row[name])
    return row


def run_metadata(runs: Sequence[Run]) -> str:
    """The `soakgate.runs` metadata: every run's settings, shaped as JSON Lines shapes them."""
    return json.dumps([shaped(run_dict(run), SPECS["runs"], "jsonl") for run in runs])


def metadata(
    table: str, db: str | Path, selection: Selection, runs: Sequence[Run]
) -> dict[str, str]:
    """A Parquet file's key-value metadata."""
    from soakgate import __version__

    about = {"table": table, "database": Path(db).name, **selection.describe()}
    return {
        "soakgate.version": __version__,
        "soakgate.export": json.dumps(about, sort_keys=True),
        "soakgate.runs": run_metadata(runs),
    }


def _rows(store: Store, table: str, runs: Sequence[Run] | None) -> Iterator[dict[str, Any]]:
    """The raw rows of one table, of the selected runs (None: all), in (run, order) order."""
    if table == "runs":
        yield from (run_dict(run) for run in (runs or sorted(store.runs(), key=lambda r: r.run_id)))
        return
    if table == "events":
        if runs is None:
            yield from (event_dict(e) for e in store.events())
            return
        for run in runs:
            yield from (event_dict(e) for e in store.events(run.run_id))
        return
    if runs is None:
        yield from (generation_dict(g) for g in store.generations())
        return
    for run in runs:
        yield from (generation_dict(g) for g in store.generations(run.run_id))


def _batches(rows: Iterable[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    iterator = iter(rows)
    while batch := list(islice(iterator, BATCH)):
        yield batch


def _write_parquet(
    rows: Iterable[dict[str, Any]], spec: TableSpec, arrow_schema: Any, path: Path
) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    count = 0
    with pq.ParquetWriter(path, arrow_schema) as writer:
        for batch in _batches(rows):
            table = pa.Table.from_pylist(
                [shaped(r, spec, "parquet") for r in batch], schema=arrow_schema
            )
            writer.write_table(table)
            count += len(batch)
    return count


def _write_csv(rows: Iterable[dict[str, Any]], spec: TableSpec, handle: IO[str]) -> int:
    writer = csv.DictWriter(handle, spec.columns, lineterminator="\n")
    writer.writeheader()
    count = 0
    for batch in _batches(rows):
        writer.writerows(shaped(row, spec, "csv") for row in batch)
        count += len(batch)
    return count


def _write_jsonl(rows: Iterable[dict[str, Any]], spec: TableSpec, handle: IO[str]) -> int:
    count = 0
    for batch in _batches(rows):
        handle.writelines(json.dumps(shaped(r, spec, "jsonl"), default=str) + "\n" for r in batch)
        count += len(batch)
    return count


def default_output(db: str | Path, fmt: str, table: str = "generations") -> Path | None:
    """Where an export goes without --out: Parquet (binary) to `DB-STEM.parquet` (the
    generations) or `DB-STEM-runs.parquet` / `DB-STEM-events.parquet` in the current folder
    (not next to the database, which may be read-only); CSV/JSONL to stdout (None)."""
    if fmt != "parquet":
        return None
    suffix = "" if table == "generations" else f"-{table}"
    return Path(f"{Path(db).stem}{suffix}.parquet")


def export(
    store: Store, fmt: str, out: str | Path | None = None, *, table: str = "generations",
    selection: Selection | None = None, db: str | Path = "",
) -> int:  # fmt: skip
    """Write one table's rows (of the selected runs) in (run, order) order; returns how many.
    CSV/JSONL go to stdout without `out`; Parquet needs a file (`default_output`)."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown export format {fmt!r}; choose from {', '.join(FORMATS)}")
    if table not in TABLES:
        raise UsageError(f"unknown export table {table!r}; choose from {', '.join(TABLES)}")
    selection = selection or Selection()
    stored = store.runs()
    chosen = selection.resolve(stored) if selection.filtered else None
    rows, spec = _rows(store, table, chosen), SPECS[table]
    try:
        if fmt == "parquet":
            if out is None:
                raise UsageError("parquet export needs --out FILE")
            runs = chosen if chosen is not None else sorted(stored, key=lambda r: r.run_id)
            arrow_schema = schema(table, metadata(table, db, selection, runs))
            return _write_parquet(rows, spec, arrow_schema, Path(out))
        if out is None:
            return _write_text(fmt, rows, spec, sys.stdout)
        with open(out, "w", encoding="utf-8", newline="") as handle:
            return _write_text(fmt, rows, spec, handle)
    except BrokenPipeError:
        raise  # the reader closed stdout (`| head`): the CLI ends quietly
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None


def _write_text(fmt: str, rows: Iterable[dict[str, Any]], spec: TableSpec, handle: IO[str]) -> int:
    return (_write_csv if fmt == "csv" else _write_jsonl)(rows, spec, handle)
