"""SQLite store: WAL journal, versioned schema created idempotently, batched transactions."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import sqlite3
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from soakgate.errors import StoreError, StoreLost
from soakgate.records import Event, Generation, Run
from soakgate.store import codec
from soakgate.store.base import LedgerEntry, TargetCounts, chain_hash
from soakgate.store.repair import storable, storable_event

# What binding a value SQLite cannot hold raises: a lone surrogate in a text, an integer past
# 64 bits, a token id past 32 bits (array("i")).
_UNSTORABLE = (UnicodeEncodeError, OverflowError)
_AT_FDCWD, _STATX_ATTR_IMMUTABLE, _STATX_ATTR_APPEND = -100, 0x10, 0x20
_STATX = getattr(ctypes.CDLL(None, use_errno=True), "statx", None)
ABANDONED: list[sqlite3.Connection] = []
"""Connections that must never be closed: closing one whose `-shm` became immutable writes
through its memory map, and the kernel kills the process with SIGBUS. A process holding one
ends with `os._exit` (see cli.main)."""


class SqliteStore:
    """A soakgate database file; safe to share across runs and to reopen after a crash."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.poisoned = False
        """True once writing (or closing) the database could kill the process; never touched
        again after that."""
        try:
            self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            # WAL + synchronous=NORMAL: a committed transaction survives a killed process.
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("PRAGMA busy_timeout=10000")
            self._migrate()
            stat = os.stat(self.path)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open database {self.path}: {exc}") from exc
        self._identity = (stat.st_dev, stat.st_ino)

    @property
    def _db(self) -> sqlite3.Connection:
        """The connection, refused once the store is poisoned (any use could raise SIGBUS)."""
        if self.poisoned:
            raise StoreLost(f"database {self.path} can no longer be used safely by this process")
        return self._conn

    def _migrate(self) -> None:
        """Create the schema if absent, bring an older one up to date; refuse a database
        written by a newer soakgate."""
        self._db.executescript(f"BEGIN IMMEDIATE;{codec.SCHEMA}COMMIT;")
        with self._transaction():
            row = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None:
                self._db.execute(
                    "INSERT INTO meta VALUES ('schema_version', ?)", (str(codec.SCHEMA_VERSION),)
                )
                return
            version = int(row[0])
            if version > codec.SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} has schema version {row[0]}; this soakgate reads up to "
                    f"{codec.SCHEMA_VERSION}"
                )
            for step in range(version + 1, codec.SCHEMA_VERSION + 1):
                self._db.execute(codec.MIGRATIONS[step])
            if version < codec.SCHEMA_VERSION:
                self._db.execute(
                    "UPDATE meta SET value=? WHERE key='schema_version'",
                    (str(codec.SCHEMA_VERSION),),
                )

    def _generation_select(self) -> str:
        """The SELECT list of the generation columns; a column that an older, unmigrated
        database lacks reads as its default."""
        present = {row[1] for row in self._db.execute("PRAGMA table_info(generations)")}
        return ", ".join(
            name if name in present else f"{codec.COLUMN_DEFAULTS[name]} AS {name}"
            for name in codec.GENERATION_FIELDS
        )

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)

    def save_run(self, run: Run) -> None:
        """Insert or update a run record."""
        marks = ",".join("?" * 11)
        with self._transaction():
            self._db.execute(
                f"INSERT OR REPLACE INTO runs ({codec.RUN_COLUMNS}) VALUES ({marks})",
                codec.run_row(run),
            )

    def add(self, generations: Sequence[Generation], events: Sequence[Event] = ()) -> None:
        """Append generations and events in one transaction (one fsync per batch).

        A batch that SQLite refuses for a value in some row (a lone surrogate, an integer past
        its range) is written again with every row made storable (`repair.storable`): the row
        keeps its place and the raw values in its details; no other row is affected.
        """
        try:
            self._insert(generations, events)
        except _UNSTORABLE:
            self._insert([storable(g) for g in generations], [storable_event(e) for e in events])

    def _insert(self, generations: Sequence[Generation], events: Sequence[Event]) -> None:
        marks = ",".join("?" * len(codec.GENERATION_FIELDS))
        with self._transaction():
            self._db.executemany(
                f"INSERT INTO generations ({codec.GENERATION_COLUMNS}) VALUES ({marks})",
                [codec.generation_row(g) for g in generations],
            )
            self._db.executemany(
                "INSERT INTO events (run_id, at, kind, target, data) VALUES (?,?,?,?,?)",
                [codec.event_row(e) for e in events],
            )

    def check(self) -> None:
        """Raise StoreLost when the file at the path is no longer the database this store
        writes (deleted or replaced: SQLite would go on writing into the unlinked file and the
        rows would vanish at close), or when one of its files became immutable or append-only
        (writing would then kill the process with SIGBUS). Costs a stat and three ioctls."""
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            raise StoreLost(f"database file {self.path} was deleted during the run") from None
        if (stat.st_dev, stat.st_ino) != self._identity:
            raise StoreLost(f"database file {self.path} was replaced during the run")
        for suffix in ("", "-wal", "-shm"):
            if _locked_by_chattr(f"{self.path}{suffix}"):
                self.poisoned = True
                raise StoreLost(f"{self.path}{suffix} was made immutable or append-only")

    def runs(self) -> list[Run]:
        """Every run, oldest first."""
        rows = self._db.execute(f"SELECT {codec.RUN_COLUMNS} FROM runs ORDER BY started_at")
        return [codec.run_from_row(r) for r in rows]

    def generations(self, run_id: str | None = None) -> Iterator[Generation]:
        """Generations in (run, seq) order, streamed from the database."""
        sql = f"SELECT {self._generation_select()} FROM generations"
        params: tuple[Any, ...] = ()
        if run_id is not None:
            sql, params = sql + " WHERE run_id=?", (run_id,)
        cursor = self._db.cursor()
        for row in cursor.execute(sql + " ORDER BY run_id, seq", params):
            yield codec.generation_from_row(row)

    def request_ids(self, run_id: str) -> set[str]:
        """Request ids of the generations stored for one run."""
        rows = self._db.execute("SELECT request_id FROM generations WHERE run_id=?", (run_id,))
        return {request_id for (request_id,) in rows}

    def events(self, run_id: str | None = None) -> list[Event]:
        """Events in time order, optionally of one run."""
        sql = "SELECT run_id, at, kind, target, data FROM events"
        params: tuple[Any, ...] = ()
        if run_id is not None:
            sql, params = sql + " WHERE run_id=?", (run_id,)
        return [codec.event_from_row(r) for r in self._db.execute(sql + " ORDER BY at", params)]

    def counts(self, run_id: str) -> dict[str, TargetCounts]:
        """Per-target tallies of one run, computed in SQL."""
        next_seq = self._db.execute(
            "SELECT COALESCE(MAX(seq) + 1, 0) FROM generations WHERE run_id=?", (run_id,)
        ).fetchone()[0]
        rows = self._db.execute(
            "SELECT target, COUNT(*), SUM(collapsed), SUM(error_class IS NOT NULL), "
            "SUM(CASE WHEN error_class IS NULL THEN COALESCE(completion_tokens, 0) END) "
            "FROM generations WHERE run_id=? GROUP BY target",
            (run_id,),
        )
        return {
            target: TargetCounts(n, int(c or 0), int(e or 0), int(t or 0), int(next_seq))
            for target, n, c, e, t in rows
        }

    def append_ledger(self, kind: str, payload: dict[str, Any], at: float) -> LedgerEntry:
        """Append a hash-chained entry; the chain makes a rewritten history detectable."""
        with self._transaction():
            last = self._db.execute(
                "SELECT idx, entry_hash FROM ledger ORDER BY idx DESC LIMIT 1"
            ).fetchone()
            index, prev = (last[0] + 1, last[1]) if last else (0, "")
            entry_hash = chain_hash(prev, at, kind, payload)
            self._db.execute(
                "INSERT INTO ledger VALUES (?,?,?,?,?,?)",
                (index, at, kind, json.dumps(payload, sort_keys=True), prev, entry_hash),
            )
        return LedgerEntry(index, at, kind, payload, prev, entry_hash)

    def ledger(self) -> list[LedgerEntry]:
        """The whole ledger, in order."""
        rows = self._db.execute("SELECT * FROM ledger ORDER BY idx")
        return [LedgerEntry(i, at, k, json.loads(p), prev, h) for i, at, k, p, prev, h in rows]

    def close(self) -> None:
        """Close the connection (a WAL checkpoint happens on the last close); a poisoned
        store's connection is abandoned instead, never closed."""
        if self.poisoned:
            ABANDONED.append(self._conn)
            return
        self._conn.close()


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT/ROLLBACK around a block, translating sqlite3 errors."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StoreError(f"database write failed: {exc}") from exc

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            try:
                self._db.execute("COMMIT")
                return
            except sqlite3.Error as commit_error:
                exc = commit_error
        if self._db.in_transaction:  # SQLite rolls back by itself on some errors (disk full)
            with contextlib.suppress(sqlite3.Error):  # the error that matters is the one raised
                self._db.execute("ROLLBACK")
        if isinstance(exc, sqlite3.Error):
            raise StoreError(f"database write failed: {exc}") from exc


def _locked_by_chattr(path: str) -> bool:
    """True when the file exists with the immutable or append-only attribute (`chattr +i/+a`).

    Read with statx(2), which needs no file descriptor: opening and closing a descriptor of a
    database file would drop every POSIX lock SQLite holds on it in this process (the way to
    corrupt an SQLite database that its documentation warns about). Python 3.11 has no
    os.statx, hence ctypes; where libc has no statx the check is skipped.
    """
    if _STATX is None:
        return False
    buffer = ctypes.create_string_buffer(256)  # struct statx is 256 bytes
    if _STATX(_AT_FDCWD, os.fsencode(path), 0, 0, buffer) != 0:
        return False
    attributes = int.from_bytes(buffer.raw[8:16], sys.byteorder)  # __u64 stx_attributes
    return bool(attributes & (_STATX_ATTR_IMMUTABLE | _STATX_ATTR_APPEND))


def open_store(path: str | Path) -> SqliteStore:
    """Open (creating if needed) a soakgate database; a missing parent folder is a StoreError."""
    target = Path(path)
    if not target.parent.exists():
        raise StoreError(f"folder {target.parent} does not exist")
    if target.exists() and target.is_dir():
        raise StoreError(f"{target} is a folder, not a database file")
    return SqliteStore(target)
