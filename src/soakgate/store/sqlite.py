"""SQLite store: WAL journal, versioned schema created idempotently, batched transactions."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import sqlite3
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

from soakgate.errors import StoreError, StoreLost
from soakgate.prompts import Prompt
from soakgate.records import Event, Generation, Run
from soakgate.store import codec
from soakgate.store.base import LedgerEntry, Store, TargetCounts, chain_hash
from soakgate.store.columns import ColumnReader, RowReader, Sqlite3Reader, read_failure
from soakgate.store.history import TargetHistory, target_history
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

# Python's sqlite3 binds int, float and str directly but looks every other value, None too, up
# among the adapters and then asks it for __conform__: ~0.25 µs per NULL, ~2 µs of a stored
# generation row's ~6 (bench/bench_store.py). An adapter registered for None is found by its
# first lookup; `{}.get` returns None for any key, in C. Process-wide, and binding is unchanged:
# None is still bound as NULL.
sqlite3.register_adapter(type(None), cast("Callable[[None], None]", {}.get))


OPEN_FILES: dict[tuple[int, int], int] = {}
"""(device, inode) -> SqliteStores of this process holding the file open (`open_in_process`)."""

SOAKGATE_TABLES = frozenset({"meta", "runs", "generations", "events", "ledger", "prompts"})
"""The tables soakgate creates; any other table makes a database another program's."""
_FIRST_TABLES = SOAKGATE_TABLES - {"prompts"}
"""The tables of schema versions 1 and 2."""


class SqliteStore:
    """A soakgate database file; safe to share across runs and to reopen after a crash.

    `read_only` opens it for analysis (`open_analysis`): nothing is created, migrated or written,
    and a file that is not a soakgate database is refused."""

    def __init__(self, path: str | Path, *, read_only: bool = False) -> None:
        self.path = Path(path)
        self.poisoned = False
        """True once writing (or closing) the database could kill the process; never touched
        again after that."""
        if read_only:
            self._conn = connect_read_only(self.path)
            stat = os.stat(self.path)
            self._identity = (stat.st_dev, stat.st_ino)
            OPEN_FILES[self._identity] = OPEN_FILES.get(self._identity, 0) + 1
            return
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
        OPEN_FILES[self._identity] = OPEN_FILES.get(self._identity, 0) + 1

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
                self._db.execute(codec.GATEWAY_INDEX)
                self._db.execute(codec.CHECKS_INDEX)
                return
            version = int(row[0])
            if version > codec.SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} has schema version {row[0]}; this soakgate reads up to "
                    f"{codec.SCHEMA_VERSION}"
                )
            for step in range(version + 1, codec.SCHEMA_VERSION + 1):
                migration = codec.MIGRATIONS[step]
                for statement in (migration,) if isinstance(migration, str) else migration:
                    self._apply(statement)
            if version < codec.SCHEMA_VERSION:
                self._db.execute(
                    "UPDATE meta SET value=? WHERE key='schema_version'",
                    (str(codec.SCHEMA_VERSION),),
                )

    def _apply(self, statement: str) -> None:
        """One migration statement; a column it adds that the table already has is kept (a
        database whose version says older than its columns: an interrupted or hand-made one)."""
        added = _ADDED_COLUMN.match(statement)
        if added and added.group(1) in self.generation_columns():
            return
        self._db.execute(statement)

    def schema_version(self) -> int:
        """The schema version the database records (an unmigrated one may be older)."""
        return int(
            self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0]
        )

    def generation_columns(self) -> set[str]:
        """The columns the generations table has (an unmigrated database lacks newer ones)."""
        return {row[1] for row in self._db.execute("PRAGMA table_info(generations)")}

    def _generation_select(self) -> str:
        """The SELECT list of the generation columns; a column that an older, unmigrated
        database lacks reads as its default."""
        return codec.generation_select(self.generation_columns())

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

    def save_prompts(self, run_id: str, prompts: Sequence[Prompt]) -> None:
        """Store each distinct prompt of a run once (a prompt already stored is kept)."""
        rows = {p.prompt_id: (run_id, p.prompt_id, p.text, p.system) for p in prompts}
        with self._transaction():
            self._db.executemany(
                "INSERT OR IGNORE INTO prompts (run_id, prompt_id, text, system) VALUES (?,?,?,?)",
                list(rows.values()),
            )

    def prompts(self, run_id: str) -> dict[str, Prompt]:
        """Prompt id -> the prompt a run sent (empty for a run stored before schema 3)."""
        if not self._has_table("prompts"):  # an older database, read without migrating it
            return {}
        rows = self._db.execute(
            "SELECT prompt_id, text, system FROM prompts WHERE run_id=?", (run_id,)
        )
        return {prompt_id: Prompt(prompt_id, text, system) for prompt_id, text, system in rows}

    def _has_table(self, name: str) -> bool:
        found = self._db.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (name,)
        ).fetchone()
        return found is not None

    def generation(self, request_id: str) -> Generation | None:
        """The generation of one request id, if stored."""
        sql = f"SELECT {self._generation_select()} FROM generations WHERE request_id=?"
        row = self._db.execute(sql, (request_id,)).fetchone()
        return codec.generation_from_row(row) if row is not None else None

    def generations_overlapping(
        self, target: str, windows: Sequence[tuple[float, float]]
    ) -> list[Generation]:
        """Generations of a target (any run) in flight at some moment of one of the (start,
        end) windows: one scan of the table for all of them (no index covers these columns)."""
        if not windows:
            return []
        overlaps = " OR ".join(["(started_at<=? AND ended_at>?)"] * len(windows))
        sql = (
            f"SELECT {self._generation_select()} FROM generations "
            f"WHERE target=? AND ({overlaps}) ORDER BY started_at"
        )
        params = [target, *(bound for start, end in windows for bound in (end, start))]
        return [codec.generation_from_row(r) for r in self._db.execute(sql, params)]

    def target_history(self, row: Generation) -> TargetHistory:
        """What came before `row` on its target (`store.history`)."""
        return target_history(self._db, row.run_id, row.target, row.seq, row.incarnation)

    def request_ids(self, run_id: str, among: Sequence[str] | None = None) -> set[str]:
        """Request ids of the generations stored for one run (only those `among`, when given:
        looked up by the unique index, 500 at a time)."""
        if among is None:
            rows = self._db.execute("SELECT request_id FROM generations WHERE run_id=?", (run_id,))
            return {request_id for (request_id,) in rows}
        found: set[str] = set()
        ids = list(among)
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            found.update(r for (r,) in self._db.execute(
                f"SELECT request_id FROM generations WHERE run_id=? AND request_id IN ({marks})",
                (run_id, *chunk),
            ))  # fmt: skip
        return found

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
        count = OPEN_FILES.pop(self._identity, 0) - 1
        if count > 0:
            OPEN_FILES[self._identity] = count
        if self.poisoned:
            ABANDONED.append(self._conn)
            return
        self._conn.close()

    @property
    def shared_in_process(self) -> bool:
        """Another SqliteStore of this process holds the same file open (then no second SQLite
        library may open it: see `store.columns`)."""
        return OPEN_FILES.get(self._identity, 0) > 1

    def column_reader(self) -> Sqlite3Reader:
        """Columnar reads on this store's own connection (`store.columns`)."""
        return Sqlite3Reader(self._db)

    def reference_rows(self, run_id: str) -> list[tuple[Any, ...]]:
        """Reference scoring of a run's rows that were chosen for it, in seq order: (row id,
        label, target, started_at, suspect, reference_score, unscored reason, mean surprisal
        (None for rows scored before it was recorded), typicality (None where the reference
        gave no entropies, or before it was recorded), soak z (None where the reference gave no
        alternatives, or before it was recorded))."""
        if "suspect" not in self.generation_columns():
            return []
        return self._db.execute(
            "SELECT id, label, target, started_at, suspect, reference_score, "
            "CASE WHEN suspect IS NULL THEN json_extract(details, '$.reference.reason') END, "
            "CASE WHEN suspect IS NOT NULL THEN json_extract(details, '$.reference.mean') END, "
            "CASE WHEN suspect IS NOT NULL THEN json_extract(details, '$.reference.typical') END, "
            "CASE WHEN suspect IS NOT NULL THEN json_extract(details, '$.reference.soak_z') END "
            "FROM generations WHERE run_id = ? AND (suspect IS NOT NULL OR "
            "instr(details, '\"reference\"') > 0) ORDER BY seq",
            (run_id,),
        ).fetchall()

    def checked_rows(self) -> list[tuple[int, str]]:
        """(row id, checks) of every row that failed an integrity check (`records.CHECKS`),
        through a partial index: only those rows."""
        if "checks" not in self.generation_columns():
            return []
        return self._db.execute("SELECT id, checks FROM generations WHERE checks != ''").fetchall()

    def gateway_counts(self) -> list[tuple[Any, ...]]:
        """Rows a gateway retried upstream, per (run id, label, target): (run id, label,
        target, rows, of them clean, retries). Read through a partial index: only those rows."""
        if "gateway_retries" not in self.generation_columns():
            return []
        return self._db.execute(
            "SELECT run_id, label, target, COUNT(*), SUM(error_class IS NULL), "
            "SUM(gateway_retries) FROM generations WHERE gateway_retries > 0 GROUP BY 1, 2, 3"
        ).fetchall()


_ADDED_COLUMN = re.compile(r"ALTER TABLE generations ADD COLUMN (\w+)")


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


def open_store(path: str | Path, allow_foreign_tables: bool | None = None) -> SqliteStore:
    """Open (creating if needed) a soakgate database to write into; a missing parent folder, a
    folder, a file that is not SQLite, or (unless `allow_foreign_tables`) another program's
    database is a StoreError, and such a file is left untouched. The refusal names
    `--allow-foreign-tables` only when the command has it (`allow_foreign_tables` is a bool,
    not None)."""
    target = Path(path)
    if not target.parent.exists():
        raise StoreError(f"cannot create database {target}: folder {target.parent} does not exist")
    if target.exists() and target.is_dir():
        raise StoreError(f"{target} is a folder, not a database file")
    if target.is_file() and target.stat().st_size > 0:
        foreign = _foreign_tables(target)
        if foreign and not allow_foreign_tables:
            hint = (
                " (choose another --db, or give --allow-foreign-tables to write into it anyway)"
                if allow_foreign_tables is False
                else ""
            )
            raise StoreError(
                f"{target} is not a soakgate database (it holds {', '.join(foreign[:5])}); "
                f"refusing to add soakgate's tables to it{hint}"
            )
    return SqliteStore(target)


def open_analysis(path: str | Path) -> SqliteStore:
    """Open an existing soakgate database read-only, for report, compare and export: never
    creates, migrates or writes it (it may be an archive or on read-only media). A missing
    file, a folder, or a file that is not a soakgate database is a StoreError."""
    target = Path(path)
    if target.is_dir():
        raise StoreError(f"{target} is a folder, not a database file")
    if not target.is_file():
        raise StoreError(f"no database at {target}")
    return SqliteStore(target, read_only=True)


def connect_read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection to a soakgate database (`read_only_uri`), checked by its
    metadata. Nothing here writes the file."""
    try:
        db = sqlite3.connect(
            read_only_uri(path), uri=True, isolation_level=None, check_same_thread=False
        )
        db.execute("PRAGMA query_only=ON")
        db.execute("PRAGMA busy_timeout=10000")
        _check_soakgate(db, path)
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"cannot read database {path}: {read_failure(exc)}") from None
    return db


def read_only_uri(path: Path) -> str:
    """`mode=ro` always; `immutable=1` as well where the file cannot change (a read-only
    filesystem without a write-ahead log), which is also what lets SQLite read a WAL-mode
    database there at all."""
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    return uri + "&immutable=1" if _cannot_change(path) else uri


def _cannot_change(path: Path) -> bool:
    """True on a read-only filesystem when no write-ahead log is pending."""
    try:
        read_only_fs = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
        wal = Path(f"{path}-wal")
        return read_only_fs and (not wal.exists() or wal.stat().st_size == 0)
    except OSError:
        return False


def _check_soakgate(db: sqlite3.Connection, path: Path) -> None:
    """StoreError unless the database carries soakgate's metadata at a schema it can read."""
    try:
        row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    except sqlite3.DatabaseError as exc:
        _raise_if_not_sqlite(exc, path)
        if "no such table" not in str(exc):
            raise
        row = None
    if row is None:
        raise StoreError(f"{path} is not a soakgate database (no soakgate metadata)")
    if not str(row[0]).isdigit() or int(row[0]) > codec.SCHEMA_VERSION:
        raise StoreError(
            f"{path} has schema version {row[0]}; this soakgate reads up to {codec.SCHEMA_VERSION}"
        )


def _raise_if_not_sqlite(exc: sqlite3.DatabaseError, path: Path) -> None:
    """The one-line refusal of a file that is not SQLite at all (a text file, an image)."""
    if "not a database" in str(exc):
        raise StoreError(f"{path} is not a soakgate database (not an SQLite file)") from None


def _foreign_tables(path: Path) -> list[str]:
    """Tables of an existing SQLite file that make it another program's database (every table,
    when soakgate's metadata is absent and the tables are not exactly soakgate's own)."""
    try:
        db = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True)
        try:
            names = {
                row[0]
                for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")
                if not row[0].startswith("sqlite_")
            }
            versioned = (
                "meta" in names
                and db.execute("SELECT 1 FROM meta WHERE key='schema_version'").fetchone()
                is not None
            )
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        _raise_if_not_sqlite(exc, path)
        raise StoreError(f"cannot open database {path}: {exc}") from None
    if versioned or names in (SOAKGATE_TABLES, _FIRST_TABLES):  # created, killed before versioning
        return sorted(names - SOAKGATE_TABLES)
    return sorted(names)


def reader_for(store: Store, run_id: str | None = None) -> ColumnReader:
    """A reader on an open store: a SQLite store's own connection (no second library), any
    other store's rows (of `run_id` only, when given)."""
    if isinstance(store, SqliteStore):
        return store.column_reader()
    return RowReader(store.generations(run_id))
