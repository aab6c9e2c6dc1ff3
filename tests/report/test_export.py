"""`soakgate export` as data tools read it (issue 30, item 4): UTC timestamps, one shape for
`details` in every format, `--run`/`--label` filters, the runs and events tables, and Parquet
key-value metadata; on a database written by real soaks of the mock through the CLI."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tests.cli.helpers import one_error_line, soakgate

import soakgate as package
from soakgate.mockserver.process import MockProcess
from soakgate.report.export import export as export_rows
from soakgate.store import open_analysis

SOAKS = (("eager", "0"), ("eager", "0"), ("graph", "0.3"))
REQUESTS = 30


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three soaks (two of `eager`, one of `graph` collapsing 30% of the time) of one mock."""
    folder = tmp_path_factory.mktemp("export")
    path = folder / "runs.sqlite"
    for label, rate in SOAKS:
        with MockProcess(["--collapse-rate", rate, "--seed", "5"]) as mock:
            done = soakgate(
                "run", "--target", f"gpu0={mock.url}", "--label", label, "--requests",
                str(REQUESTS), "--concurrency", "4", "--max-tokens", "24", "--db", str(path),
                "--quiet", "--no-watch-metrics", cwd=folder,
            )  # fmt: skip
            assert done.returncode == 0, done.stdout + done.stderr
    return path


def stored(db: Path, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return connection.execute(sql, params).fetchall()
    finally:
        connection.close()


def exported(db: Path, folder: Path, fmt: str, *args: str) -> list[dict[str, object]]:
    out = folder / f"out.{fmt}"
    done = soakgate("export", str(db), "--format", fmt, "--out", str(out), *args, cwd=folder)
    assert done.returncode == 0, done.stderr
    if fmt == "parquet":
        return pq.read_table(out).to_pylist()
    if fmt == "csv":
        return list(csv.DictReader(io.StringIO(out.read_text(), newline="")))
    return [json.loads(line) for line in out.read_text().splitlines()]


def micros(seconds: float) -> int:
    return round(seconds * 1_000_000)


def moment_micros(value: object) -> int:
    """A timestamp as a format gives it (a datetime from Parquet, ISO text elsewhere)."""
    if isinstance(value, str):
        assert value.endswith("Z"), value
        value = datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    assert isinstance(value, datetime) and value.utcoffset() is not None
    delta = value - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_moments_are_utc_timestamps_and_details_json_text(db: Path, tmp_path: Path, fmt: str) -> None:  # fmt: skip
    truth = {
        request_id: (started, ended, json.loads(details))
        for request_id, started, ended, details in stored(
            db, "SELECT request_id, started_at, ended_at, details FROM generations"
        )
    }
    rows = exported(db, tmp_path, fmt)
    assert len(rows) == len(truth) == REQUESTS * len(SOAKS)
    for row in rows:
        started, ended, details = truth[str(row["request_id"])]
        assert moment_micros(row["started_at"]) == micros(started)
        assert moment_micros(row["ended_at"]) == micros(ended)
        assert isinstance(row["details"], str) and json.loads(row["details"]) == details
    if fmt == "parquet":
        fields = pq.read_schema(tmp_path / "out.parquet")
        assert fields.field("started_at").type == pa.timestamp("us", tz="UTC")
        assert fields.field("ttft_s").type == pa.float64()  # a duration stays seconds
        assert " details (JSON);" in str(pq.ParquetFile(tmp_path / "out.parquet").schema)


def test_run_and_label_filters_keep_only_those_runs(db: Path, tmp_path: Path) -> None:
    runs = stored(db, "SELECT run_id, label FROM runs ORDER BY run_id")
    eager = [run_id for run_id, label in runs if label == "eager"]
    graph = [run_id for run_id, label in runs if label == "graph"]
    assert len(eager) == 2 and len(graph) == 1
    for fmt in ("parquet", "csv", "jsonl"):
        rows = exported(db, tmp_path, fmt, "--label", "graph")
        assert {r["run_id"] for r in rows} == set(graph) and len(rows) == REQUESTS
        rows = exported(db, tmp_path, fmt, "--run", eager[1], "--run", graph[0])
        assert {r["run_id"] for r in rows} == {eager[1], graph[0]}
        assert len(rows) == 2 * REQUESTS
        rows = exported(db, tmp_path, fmt, "--label", "eager", "--run", eager[0])
        assert {r["run_id"] for r in rows} == {eager[0]}
    runs_rows = exported(db, tmp_path, "jsonl", "--table", "runs", "--label", "eager")
    assert [r["run_id"] for r in runs_rows] == eager


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--run", "no-such-run"), "no run 'no-such-run' in the database"),
        (("--label", "compiled"), "no run labelled 'compiled' in the database (labels: 'eager', 'graph')"),
        (("--table", "runs", "--label", "graph", "--run", "RUN0"), "no run is both one of the --run ids"),
    ],
)  # fmt: skip
def test_a_filter_that_matches_nothing_is_one_line_and_exit_2(
    db: Path, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    first = str(stored(db, "SELECT run_id FROM runs WHERE label='eager' ORDER BY run_id")[0][0])
    argv = [first if a == "RUN0" else a for a in args]
    for fmt in ("parquet", "csv"):
        out = tmp_path / f"filtered.{fmt}"
        done = soakgate("export", str(db), "--format", fmt, "--out", str(out), *argv, cwd=tmp_path)
        assert done.returncode == 2
        assert message in one_error_line(done)
        assert not out.exists()  # nothing half-written


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_runs_and_events_tables_hold_what_is_stored(db: Path, tmp_path: Path, fmt: str) -> None:
    runs = {
        run_id: (label, json.loads(targets), started, json.loads(load), status)
        for run_id, label, targets, started, load, status in stored(
            db, "SELECT run_id, label, targets, started_at, load, status FROM runs"
        )
    }
    rows = exported(db, tmp_path, fmt, "--table", "runs")
    assert sorted(str(r["run_id"]) for r in rows) == sorted(runs)
    for row in rows:
        label, targets, started, load, status = runs[str(row["run_id"])]
        assert row["label"] == label and row["status"] == status == "completed"
        got_targets = json.loads(str(row["targets"])) if fmt == "csv" else row["targets"]
        assert got_targets == targets
        assert moment_micros(row["started_at"]) == micros(started)
        assert isinstance(row["load"], str) and json.loads(row["load"]) == load
        assert json.loads(row["load"])["requests_per_target"] == REQUESTS
    events = stored(db, "SELECT run_id, at, kind, data FROM events")
    assert events, "a soak stores events"
    rows = exported(db, tmp_path, fmt, "--table", "events")
    assert sorted(
        (str(r["run_id"]), moment_micros(r["at"]), r["kind"], json.loads(str(r["data"])))
        for r in rows
    ) == sorted((run_id, micros(at), kind, json.loads(data)) for run_id, at, kind, data in events)


def test_parquet_metadata_names_the_version_the_filters_and_each_runs_settings(
    db: Path, tmp_path: Path
) -> None:
    graph = str(stored(db, "SELECT run_id FROM runs WHERE label='graph'")[0][0])
    for table in ("generations", "runs", "events"):
        exported(db, tmp_path, "parquet", "--table", table, "--label", "graph")
        meta = pq.read_schema(tmp_path / "out.parquet").metadata
        assert meta[b"soakgate.version"].decode() == package.__version__
        about = json.loads(meta[b"soakgate.export"])
        assert about == {"table": table, "database": "runs.sqlite", "runs": [], "labels": ["graph"]}
        (run,) = json.loads(meta[b"soakgate.runs"])
        assert run["run_id"] == graph and run["label"] == "graph"
        assert json.loads(run["load"])["concurrency"] == 4
        assert run["started_at"].endswith("Z")


def test_the_arrow_path_and_the_row_path_write_the_same_parquet(db: Path, tmp_path: Path) -> None:
    """The CLI writes generations from Arrow batches; a store open elsewhere in the process
    falls back to one object per row: both files hold the same schema, metadata and rows."""
    exported(db, tmp_path, "parquet")
    arrow = pq.read_table(tmp_path / "out.parquet")
    store = open_analysis(db)
    try:
        count = export_rows(store, "parquet", tmp_path / "rows.parquet", db=db)
    finally:
        store.close()
    rows = pq.read_table(tmp_path / "rows.parquet")
    assert count == arrow.num_rows == REQUESTS * len(SOAKS)
    assert rows.schema.equals(arrow.schema, check_metadata=True)
    assert rows.to_pylist() == arrow.to_pylist()


def test_parquet_without_out_names_each_table_apart(db: Path, tmp_path: Path) -> None:
    for table, name in (("generations", "runs.parquet"), ("runs", "runs-runs.parquet"),
                        ("events", "runs-events.parquet")):  # fmt: skip
        done = soakgate("export", str(db), "--format", "parquet", "--table", table, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert (
            f"exported {pq.read_table(tmp_path / name).num_rows} {table} to {name}" in done.stderr
        )
