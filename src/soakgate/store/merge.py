"""`merge`: one database from shards written by independent soakgate processes (a Kubernetes
Indexed Job, a Slurm array), so that it reports exactly as the sum of its shards.

Every shard is opened read-only and never changed. Runs keep their ids and every row; a run id
or a request id found in two shards is refused, as is a shard whose ledger chain is broken or
lacks the entry one of its runs anchored (a cut tail), or that holds rows of a run it does not
name. The
merged ledger is one new chain: for each shard (in the order given) a `shard` entry naming the
file, its schema, its runs and the head hash of its own chain, then the shard's entries with
their time, kind and payload unchanged. Re-chaining them from '' yields that head again
(`shard_chains_intact`), so each shard's chain is kept checkable, and the plan ledger checks
(pre-registration) read the entries exactly as in the shard.

Nothing is ever written at `into` but the finished database: it is built in a temporary file in
the same folder and linked into place only once complete; an existing file there is refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from soakgate.errors import StoreError, UsageError
from soakgate.store import codec
from soakgate.store.base import LedgerEntry, chain_hash, missing_anchor, verify_chain
from soakgate.store.sqlite import SqliteStore, open_analysis, read_only_uri

SHARD_ENTRY = "shard"
"""Ledger kind of the entry that opens each shard's part of a merged ledger."""


@dataclass(frozen=True, slots=True)
class MergeResult:
    """What a merge wrote."""

    runs: int
    generations: int
    events: int
    ledger_entries: int
    """Entries of the merged ledger (the shards' own plus one `shard` entry each)."""


@dataclass(slots=True)
class _Shard:
    path: Path
    schema_version: int
    run_ids: list[str]
    ledger: list[LedgerEntry]


def _read_shard(path: Path) -> _Shard:
    """A shard's runs, ledger and schema, read-only; a broken chain or a non-soakgate file is a
    StoreError (exit 2)."""
    store: SqliteStore = open_analysis(path)
    try:
        version = store.schema_version()
        runs = store.runs()
        ledger = store.ledger()
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"cannot read database {path}: {exc}") from None
    finally:
        store.close()
    run_ids = [run.run_id for run in runs]
    _check_not_being_written(path, run_ids)
    broken = verify_chain(ledger)
    if broken is not None:
        raise StoreError(f"{path}: its ledger is broken at entry {broken} (it was rewritten)")
    cut = missing_anchor(runs, ledger)
    if cut is not None:
        raise StoreError(f"{path}: {cut}; refusing to merge (nothing written)")
    return _Shard(path, version, run_ids, ledger)


def _check_not_being_written(path: Path, run_ids: Sequence[str]) -> None:
    """UsageError when a soakgate process still holds a run of the shard (`store.lock`): its
    rows are not all there yet. The lock file is only opened, never created."""
    for run_id in run_ids:
        lock = path.with_name(f"{path.name}.{run_id}.lock")
        try:
            fd = os.open(lock, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(
                f"run {run_id} of {path} is still being written by a soakgate process; merge "
                "once it has finished (nothing written)"
            ) from None
        finally:
            os.close(fd)


def _check_no_duplicate_runs(shards: Sequence[_Shard]) -> None:
    seen: dict[str, Path] = {}
    for shard in shards:
        for run_id in shard.run_ids:
            if run_id in seen:
                raise UsageError(
                    f"run {run_id} is in both {seen[run_id]} and {shard.path}: a shard given "
                    "twice, or copied; refusing to merge (nothing written)"
                )
            seen[run_id] = shard.path


def _check_into(into: Path, inputs: Sequence[Path]) -> None:
    if not into.parent.is_dir():
        raise UsageError(f"cannot write {into}: folder {into.parent} does not exist")
    if into.exists() or into.is_symlink():
        raise UsageError(f"{into} exists; merge writes a new database (choose another --into)")
    if not inputs:
        raise UsageError("give at least one shard to merge")


def merge(inputs: Sequence[Path], into: Path) -> MergeResult:
    """Merge the soakgate databases `inputs` into the new database `into` (see module doc)."""
    into = Path(into)
    _check_into(into, inputs)
    shards = [_read_shard(Path(p)) for p in inputs]
    _check_no_duplicate_runs(shards)
    handle, name = tempfile.mkstemp(prefix=f".{into.name}.", suffix=".merging", dir=into.parent)
    os.close(handle)
    temp = Path(name)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(temp, 0o666 & ~umask)  # as any new file (mkstemp makes it 0600)
    try:
        result = _write(shards, temp)
        _link_into_place(temp, into)
        return result
    finally:
        for leftover in (temp, Path(f"{temp}-journal")):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()


def _write(shards: Sequence[_Shard], temp: Path) -> MergeResult:
    """Build the merged database in `temp`, in one transaction, and make it durable."""
    db = sqlite3.connect(f"file:{temp}", uri=True, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=DELETE")
        db.executescript(codec.SCHEMA)
        db.execute(codec.GATEWAY_INDEX)
        db.execute(codec.CHECKS_INDEX)
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(codec.SCHEMA_VERSION),))
        ledger: list[LedgerEntry] = []
        for index, shard in enumerate(shards):
            try:
                db.execute(f"ATTACH DATABASE ? AS shard{index}", (read_only_uri(shard.path),))
                _copy_rows(db, f"shard{index}", shard)
            except sqlite3.DatabaseError as exc:
                raise StoreError(
                    f"cannot read database {shard.path}: {exc}; nothing written"
                ) from None
            _chain_shard(ledger, shard)
        db.executemany(
            "INSERT INTO ledger VALUES (?,?,?,?,?,?)",
            [(e.index, e.at, e.kind, json.dumps(e.payload, sort_keys=True), e.prev_hash,
              e.entry_hash) for e in ledger],
        )  # fmt: skip
        counts = [db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                  for t in ("runs", "generations", "events")]  # fmt: skip
        db.execute("COMMIT")
        for index in range(len(shards)):
            db.execute(f"DETACH DATABASE shard{index}")
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"merge failed, nothing written: {exc}") from None
    finally:
        db.close()
    with open(temp, "rb+") as file:
        os.fsync(file.fileno())
    return MergeResult(counts[0], counts[1], counts[2], len(ledger))


def _copy_rows(db: sqlite3.Connection, schema: str, shard: _Shard) -> None:
    """Copy one attached shard's runs, generations (oldest row first), events and stored
    prompts. A column an older shard lacks takes its default, as a migration would give it."""
    present = {row[1] for row in db.execute(f"PRAGMA {schema}.table_info(generations)")}
    for table in ("generations", "events"):
        orphan = db.execute(
            f"SELECT run_id FROM {schema}.{table} WHERE run_id NOT IN "
            f"(SELECT run_id FROM {schema}.runs) LIMIT 1"
        ).fetchone()
        if orphan is not None:
            raise UsageError(
                f"{shard.path} holds {table} of run {orphan[0]}, which none of its runs is: "
                "refusing to merge rows of an unknown run (nothing written)"
            )
    clash = db.execute(
        f"SELECT request_id FROM {schema}.generations WHERE request_id IN "
        "(SELECT request_id FROM main.generations) LIMIT 1"
    ).fetchone()
    if clash is not None:
        raise UsageError(
            f"generation {clash[0]} of {shard.path} is also in an earlier shard: refusing to "
            "merge (nothing written)"
        )
    db.execute(f"INSERT INTO main.runs ({codec.RUN_COLUMNS}) "
               f"SELECT {codec.RUN_COLUMNS} FROM {schema}.runs")  # fmt: skip
    db.execute(
        f"INSERT INTO main.generations ({codec.GENERATION_COLUMNS}) "
        f"SELECT {codec.generation_select(present)} FROM {schema}.generations ORDER BY id"
    )
    db.execute(
        "INSERT INTO main.events (run_id, at, kind, target, data) "
        f"SELECT run_id, at, kind, target, data FROM {schema}.events ORDER BY id"
    )
    tables = {row[0] for row in db.execute(f"SELECT name FROM {schema}.sqlite_master")}
    if "prompts" in tables:  # schema 3: what `soakgate replay` sends again (run ids are unique)
        db.execute(
            "INSERT INTO main.prompts (run_id, prompt_id, text, system) "
            f"SELECT run_id, prompt_id, text, system FROM {schema}.prompts"
        )


def _append(ledger: list[LedgerEntry], at: float, kind: str, payload: dict[str, object]) -> None:
    prev = ledger[-1].entry_hash if ledger else ""
    entry_hash = chain_hash(prev, at, kind, dict(payload))
    ledger.append(LedgerEntry(len(ledger), at, kind, dict(payload), prev, entry_hash))


def _chain_shard(ledger: list[LedgerEntry], shard: _Shard) -> None:
    """The shard's `shard` entry, then its own entries, chained onto the merged ledger."""
    head = shard.ledger[-1].entry_hash if shard.ledger else ""
    first = min((e.at for e in shard.ledger), default=0.0)
    payload = {
        "source": shard.path.name, "schema_version": shard.schema_version,
        "runs": shard.run_ids, "entries": len(shard.ledger), "head": head,
    }  # fmt: skip
    _append(ledger, first, SHARD_ENTRY, payload)
    for entry in shard.ledger:
        _append(ledger, entry.at, entry.kind, entry.payload)


def shard_chains_intact(ledger: Sequence[LedgerEntry]) -> dict[str, bool]:
    """Per `shard` entry of a merged ledger (by source name): whether re-chaining the entries
    that follow it from '' gives the head hash the shard's own ledger had."""
    found: dict[str, bool] = {}
    for index, entry in enumerate(ledger):
        if entry.kind != SHARD_ENTRY:
            continue
        count = int(entry.payload["entries"])
        prev = ""
        for kept in ledger[index + 1 : index + 1 + count]:
            prev = chain_hash(prev, kept.at, kept.kind, kept.payload)
        found[str(entry.payload["source"])] = prev == entry.payload["head"]
    return found


def _link_into_place(temp: Path, into: Path) -> None:
    """Make the finished database appear at `into` in one step, never over an existing file
    (a hard link fails where the name exists; where links are not supported, a rename after a
    last check)."""
    try:
        os.link(temp, into)
    except FileExistsError:
        raise UsageError(f"{into} appeared during the merge; nothing written") from None
    except OSError:
        if into.exists():
            raise UsageError(f"{into} appeared during the merge; nothing written") from None
        os.replace(temp, into)
    with contextlib.suppress(OSError):  # the new name durable too
        folder = os.open(into.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
