"""Columnar reads: the Arrow (ADBC) reader, the sqlite3 reader and the row reader over the
in-memory store give the same columns, whatever the first batch holds, and see no row stored
after the read began."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from soakgate.records import Event, Generation, Run
from soakgate.report.load import Columns, load_columns, load_path, load_store
from soakgate.store import MemoryStore, open_analysis, open_store
from soakgate.store import columns as columns_module
from soakgate.store.columns import ArrowReader, RowReader, Sqlite3Reader
from soakgate.store.sqlite import connect_read_only, read_only_uri


def _rows(run: Run, n: int) -> list[Generation]:
    """The first 40 rows report no tokens, no error and no flag (a first batch of NULLs),
    later rows have all of them; every 5th row is greedy, some compared."""
    rows = []
    for i in range(n):
        late = i >= 40
        error = "timeout" if late and i % 11 == 0 else None
        flags = ["char_run"] if late and i % 7 == 0 and error is None else []
        rows.append(Generation(
            run.run_id, f"{run.run_id}-{i}", ("gpu0", "gpu1")[i % 2], run.label, i, "p",
            "completions", True, 1_700_000_000.0 + i * 0.1, 1_700_000_000.5 + i * 0.1,
            completion_tokens=(i % 50) if late and error is None else None, error_class=error,
            text="!" * 90 if flags else "ok", flags=flags,
            details={"differential": {"greedy": True}} if i % 5 == 0 else {},
            reference_divergence=(i % 3 - 1) if late and i % 5 == 0 else None,
        ))  # fmt: skip
    return rows


def _fill(store: MemoryStore | object, n: int = 300) -> None:
    for k, label in enumerate(("eager", "graph")):
        run = Run(f"run-{label}", label, ["gpu0", "gpu1"], 1_700_000_000.0 + k, status="completed")
        store.save_run(run)  # type: ignore[attr-defined]
        events = [Event(run.run_id, run.started_at, "reference_baseline", None, {"pairs": 2})]
        store.add(_rows(run, n), events if label == "eager" else [])  # type: ignore[attr-defined]


def _flat(columns: Columns) -> dict[str, object]:
    found: dict[str, object] = {}
    for key, group in columns.slices.items():
        for part in group:
            name = f"{key}/{part.run_id}"
            for field in ("started", "ended", "ok", "collapsed", "tokens", "compared",
                          "divergence"):  # fmt: skip
                found[f"{name}/{field}"] = getattr(part, field).tolist()
            found[f"{name}/errors"] = part.errors_by_class
            found[f"{name}/greedy"] = part.greedy
            found[f"{name}/runlike"] = part.collapsed_runlike.tolist()
    return found


def test_three_readers_give_the_same_columns_in_any_batch_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(columns_module, "BATCH_ROWS", 16)  # the first batch is all NULL tokens
    db = tmp_path / "c.sqlite"
    sqlite, memory = open_store(db), MemoryStore()
    _fill(sqlite)
    _fill(memory)
    runs, events = sqlite.runs(), sqlite.events()
    sqlite.close()
    arrow_reader = ArrowReader(read_only_uri(db), str(db))
    connection = connect_read_only(db)
    try:
        arrow = load_columns(arrow_reader, runs, events, [])
        plain = load_columns(Sqlite3Reader(connection), runs, events, [])
    finally:
        arrow_reader.close()
        connection.close()
    rows = load_store(memory)
    assert _flat(arrow) == _flat(plain) == _flat(rows)
    part = arrow.slices[("eager", "gpu0")][0]
    assert part.tokens[:20].tolist() == [0] * 20 and part.tokens[20:].any()
    assert len(part.compared) > 0 and part.greedy == 30  # greedy looked for: baseline event
    assert arrow.slices[("graph", "gpu0")][0].greedy == 0  # no reference: not looked for
    assert set(arrow.exemplars) and all(g.flags == ["char_run"] for g in arrow.exemplars.values())
    # exemplars came back whole, texts and JSON included, the same from every reader
    assert {g.request_id for g in arrow.exemplars.values()} == {
        g.request_id for g in plain.exemplars.values()
    }


def test_a_read_sees_no_row_stored_after_it_began(tmp_path: Path) -> None:
    db = tmp_path / "live.sqlite"
    store = open_store(db)
    _fill(store, 100)
    reader = ArrowReader(read_only_uri(db), str(db))
    upto = reader.max_row_id()
    run = Run("late", "eager", ["gpu0"], 1_700_000_100.0)
    store.save_run(run)
    store.add(_rows(run, 50))  # committed while the reader is open
    seen = sum(len(b) for r in reader.run_ids() for b in reader.scan(r, upto, False))
    reader.close()
    store.close()
    assert seen == 200


def test_a_file_this_process_holds_open_is_read_through_sqlite3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two SQLite libraries must not hold one file open in a process: while a store of this
    # process has it open, the Arrow (second library) reader is not used.
    db = tmp_path / "held.sqlite"
    writer = open_store(db)
    _fill(writer, 50)

    def refuse(*args: object) -> None:
        raise AssertionError("the Arrow reader opened a file this process holds open")

    monkeypatch.setattr(columns_module, "ArrowReader", refuse)
    columns = load_path(db)
    assert sum(p.requests for g in columns.slices.values() for p in g) == 100
    writer.close()
    monkeypatch.undo()
    assert sum(p.requests for g in load_path(db).slices.values() for p in g) == 100


def test_whole_rows_of_an_unmigrated_schema_1_database(tmp_path: Path) -> None:
    db = tmp_path / "v1.sqlite"
    store = open_store(db)
    _fill(store, 60)
    store.close()
    with sqlite3.connect(db) as old:
        old.execute("ALTER TABLE generations DROP COLUMN attempts")
        old.execute("UPDATE meta SET value='1' WHERE key='schema_version'")
    old.close()
    columns = load_path(db)
    assert columns.exemplars and all(g.attempts == 1 for g in columns.exemplars.values())
    check = open_analysis(db)
    assert check.ledger() == [] and check.runs()
    check.close()


def test_row_reader_ids_fetch_their_rows() -> None:
    memory = MemoryStore()
    _fill(memory, 30)
    reader = RowReader(memory.generations())
    (batch,) = list(reader.scan("run-eager", reader.max_row_id(), True))
    ids = batch.row_id[batch.flagged]
    assert [g.flags for g in reader.rows(ids.tolist()).values()] == [["char_run"]] * len(ids)
    assert np.all(batch.divergence[:40] == columns_module.NO_DIVERGENCE)


def test_a_run_whose_rows_hold_labels_or_targets_it_does_not_name_reads_the_same(
    tmp_path: Path,
) -> None:
    # The Arrow reader reads no strings when told a run's targets and label; a row holding
    # another (a two-arm run's arms, a target the record does not name) must not be
    # dropped or misfiled: the run is read again with strings, and every reader agrees.
    db = tmp_path / "arms.sqlite"
    sqlite, memory = open_store(db), MemoryStore()
    run = Run("run-ab", "ab", ["gpu0"], 1_700_000_000.0, status="completed")
    rows = _rows(run, 200)
    for i, row in enumerate(rows):
        row.label = ("arm-a", "arm-b")[i % 3 == 0]
        row.target = "gpu0" if i < 150 else "gpu9"  # gpu9: not in the run record
        if row.flags:
            row.flags = [["char_run"], ["word_loop"], ["token_run", "word_loop"]][i % 3]
    plain = Run("run-plain", "eager", ["gpu0", "gpu1"], 1_700_000_001.0, status="completed")
    for store in (sqlite, memory):
        store.save_run(run)
        store.save_run(plain)
        store.add(rows + _rows(plain, 100), [])
    runs = sqlite.runs()
    sqlite.close()
    reader = ArrowReader(read_only_uri(db), str(db))
    try:
        with pytest.raises(columns_module.UnexpectedValues):
            list(reader.scan("run-ab", reader.max_row_id(), False, (["gpu0"], ["ab"])))
        numeric = list(reader.scan("run-plain", reader.max_row_id(), False,
                                   (["gpu0", "gpu1"], ["eager"])))  # fmt: skip
        arrow = load_columns(reader, runs, [], [])
    finally:
        reader.close()
    assert sum(len(b) for b in numeric) == 100
    rowwise = load_store(memory)
    assert _flat(arrow) == _flat(rowwise)
    assert set(arrow.slices) == {
        ("arm-a", "gpu0"),
        ("arm-b", "gpu0"),
        ("arm-a", "gpu9"),
        ("arm-b", "gpu9"),
        ("eager", "gpu0"),
        ("eager", "gpu1"),
    }
    runlike = np.concatenate([p.collapsed_runlike for g in arrow.slices.values() for p in g])
    assert runlike.any() and not runlike.all()  # token_run is run-like, word_loop alone is not
