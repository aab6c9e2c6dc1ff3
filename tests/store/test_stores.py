"""The SQLite store and its in-memory twin behave the same; SQLite survives reopening."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from soakgate.errors import StoreError
from soakgate.records import Event, Generation, Run
from soakgate.store import BatchWriter, MemoryStore, SqliteStore, Store, open_store
from soakgate.store.base import verify_chain
from soakgate.store.codec import SCHEMA_VERSION


def make_generation(seq: int, target: str = "gpu0", **changes: object) -> Generation:
    base = Generation(
        run_id="r1", request_id=f"r1-{seq}", target=target, label="eager", seq=seq,
        prompt_id="p", endpoint="chat", stream=True, started_at=100.0 + seq, ended_at=101.0 + seq,
        ttft_s=0.1, prompt_tokens=5, completion_tokens=7, finish_reason="length",
        http_status=200, text="hé!" * 3, text_sha256="abc", token_ids=[0, 1, 2**31 - 1],
        scores={"char_run": 3.0}, details={"char_run": {"char": "!"}}, flags=[], incarnation=2,
    )  # fmt: skip
    for key, value in changes.items():
        setattr(base, key, value)
    return base


@pytest.fixture(params=["sqlite", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    backend: Store = (
        SqliteStore(tmp_path / "s.sqlite") if request.param == "sqlite" else MemoryStore()
    )
    yield backend
    backend.close()


def test_generations_round_trip_exactly(store: Store) -> None:
    rows = [
        make_generation(2),
        make_generation(1, flags=["char_run"]),
        make_generation(3, text=None, token_ids=None),
    ]
    rows.append(make_generation(4, error_class="timeout", error_detail="slow", text=""))
    store.add(rows)
    assert list(store.generations("r1")) == sorted(rows, key=lambda g: g.seq)
    assert list(store.generations("other")) == []


def test_runs_events_and_counts(store: Store) -> None:
    run = Run(run_id="r1", label="eager", targets=["gpu0", "gpu1"], started_at=5.0, load={"c": 1})
    store.save_run(run)
    run.status = "completed"
    store.save_run(run)
    assert store.runs() == [run]
    rows = [
        make_generation(0),
        make_generation(1, flags=["char_run"]),
        make_generation(5, target="gpu1", error_class="timeout"),
    ]
    store.add(rows, [Event("r1", 3.0, "fault", "gpu1", {"x": 1}), Event("r1", 1.0, "note")])
    assert [e.at for e in store.events("r1")] == [1.0, 3.0]
    counts = store.counts("r1")
    assert counts["gpu0"].requests == 2 and counts["gpu0"].collapses == 1
    assert counts["gpu0"].completion_tokens == 14
    assert counts["gpu1"].errors == 1 and counts["gpu1"].collapses == 0
    assert counts["gpu0"].next_seq == 6


def test_duplicate_request_ids_are_rejected_whole(store: Store) -> None:
    store.add([make_generation(0)])
    with pytest.raises((StoreError, ValueError)):
        store.add([make_generation(1), make_generation(0)])
    assert [g.seq for g in store.generations()] == [0]


def test_ledger_chains_and_detects_tampering(store: Store) -> None:
    first = store.append_ledger("plan", {"sha256": "aa"}, 1.0)
    second = store.append_ledger("plan", {"sha256": "bb"}, 2.0)
    assert second.prev_hash == first.entry_hash
    assert verify_chain(store.ledger()) is None
    forged = store.ledger()
    forged[0] = type(first)(0, 1.0, "plan", {"sha256": "zz"}, "", first.entry_hash)
    assert verify_chain(forged) == 0


def test_sqlite_schema_is_idempotent_and_versioned(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    SqliteStore(path).close()
    store = SqliteStore(path)
    store.add([make_generation(0)])
    store.close()
    assert len(list(SqliteStore(path).generations())) == 1
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION + 1),))
    with pytest.raises(StoreError, match="schema version"):
        SqliteStore(path)


def test_open_store_gives_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        open_store(tmp_path / "missing" / "x.sqlite")
    with pytest.raises(StoreError, match="folder"):
        open_store(tmp_path)
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"not a database" * 100)
    with pytest.raises(StoreError, match="not a soakgate database"):
        open_store(garbage)


def test_batch_writer_flushes_on_interval_and_size() -> None:
    now = [0.0]
    store = MemoryStore()
    writer = BatchWriter(store, interval_s=1.0, max_rows=3, clock=lambda: now[0])
    writer.add_generation(make_generation(0))
    assert writer.pending == 1 and list(store.generations()) == []
    now[0] = 1.0
    writer.add_generation(make_generation(1))
    assert writer.pending == 0 and len(list(store.generations())) == 2
    for seq in range(2, 5):
        writer.add_generation(make_generation(seq))
    assert writer.pending == 0 and writer.flushed_rows == 5


def test_batch_writer_prepares_each_batch_once_and_stores_it_even_if_preparing_fails() -> None:
    store = MemoryStore()
    writer = BatchWriter(store, interval_s=60.0)
    seen: list[list[int]] = []

    def prepare(batch: list[Generation]) -> None:
        seen.append([g.seq for g in batch])
        for generation in batch:
            generation.scores["prepared"] = 1.0
        if len(seen) == 2:
            raise ValueError("a detector bug")

    writer.prepare = prepare
    for seq in range(3):
        writer.add_generation(make_generation(seq))
    writer.flush()
    writer.add_generation(make_generation(3))
    with pytest.raises(ValueError, match="detector bug"):
        writer.flush()
    writer.flush()  # nothing left: prepare is not called on an empty batch
    assert seen == [[0, 1, 2], [3]]
    stored = list(store.generations())
    assert [g.seq for g in stored] == [0, 1, 2, 3]
    assert all(g.scores.get("prepared") == 1.0 for g in stored)


def _as_schema_v1(path: Path) -> None:
    """Turn a database into what soakgate 0.1 with schema version 1 wrote (no `attempts`, nor
    schema 4's `reference_score` and `suspect`)."""
    with sqlite3.connect(path) as db:
        for column in ("attempts", "reference_score", "suspect"):
            db.execute(f"ALTER TABLE generations DROP COLUMN {column}")
        db.execute("UPDATE meta SET value='1' WHERE key='schema_version'")


def test_a_schema_1_database_is_migrated_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    store = SqliteStore(path)
    store.add([make_generation(0), make_generation(1)])
    store.close()
    _as_schema_v1(path)
    store = SqliteStore(path)
    rows = list(store.generations())
    store.add([make_generation(2, attempts=3)])
    store.close()
    assert [g.attempts for g in rows] == [1, 1]
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (
            str(SCHEMA_VERSION),
        )
        assert db.execute("SELECT seq, attempts FROM generations ORDER BY seq").fetchall() == [
            (0, 1), (1, 1), (2, 3),
        ]  # fmt: skip
