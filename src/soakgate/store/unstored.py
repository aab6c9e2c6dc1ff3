"""The sidecar: rows a database could not take, as JSON Lines, and their import back.

When a soak's database fails (disk full, unwritable, deleted), the rows it could not store are
written to `<db>.<run>.unstored.jsonl` beside it, or, where that cannot be written either (a
full disk), in a fallback folder. Each line is one JSON object: a `run` (the run record; the
last one wins), a `generation` or an `event`, every field as stored. JSON escapes keep every
value exact, lone surrogates and huge integers included. `import_unstored` loads such files into
a database, skipping rows it already holds, so importing twice adds nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from soakgate.errors import StoreError, UsageError
from soakgate.records import Event, Generation, Run
from soakgate.store.base import Store
from soakgate.store.sidecar_schema import checked

FORMAT = 1
"""Version of the sidecar format, in each file's first line."""


def _line(kind: str, record: Any) -> str:
    return json.dumps({kind: dataclasses.asdict(record)}, ensure_ascii=True) + "\n"


class Sidecar:
    """Appends unstored rows of one run to a JSON Lines file; fsync'd after every write."""

    def __init__(self, db: Path, run: Run, fallbacks: Sequence[Path] | None = None) -> None:
        self.db = db
        self.run = run
        self.folders = [db.parent, *(fallbacks or [Path(tempfile.gettempdir()), Path.home()])]
        self.path: Path | None = None
        """The file written (None until the first write)."""
        self.generations = 0
        """Generations written to it."""
        self._file: IO[str] | None = None
        self._failed: list[str] = []

    def __call__(self, generations: Sequence[Generation], events: Sequence[Event]) -> None:
        """Write rows; try the next folder when one cannot take them (StoreError if none can)."""
        text = "".join(_line("generation", g) for g in generations)
        text += "".join(_line("event", e) for e in events)
        self._write(text)
        self.generations += len(generations)

    def write_run(self, run: Run) -> None:
        """Record the run's final state (its status, its end)."""
        self.run = run
        self._write(_line("run", run))

    def _write(self, text: str) -> None:
        while True:
            if self._file is None:
                self._open_next()
            assert self._file is not None
            start = self._file.tell()
            try:
                self._file.write(text)
                self._file.flush()
                os.fsync(self._file.fileno())
                return
            except OSError as exc:  # a full disk: drop the partial write, try the next folder
                self._abandon(start, exc)

    def _open_next(self) -> None:
        if self.path is not None:  # closed after writing: go on appending to the same file
            try:
                self._file = self.path.open("a", encoding="ascii")
                return
            except OSError as exc:
                self._failed.append(f"{self.path.parent}: {exc.strerror or exc}")
        while self.folders:
            folder = self.folders.pop(0)
            path = folder / f"{self.db.name}.{self.run.run_id}.unstored.jsonl"
            try:
                handle = path.open("a", encoding="ascii")
            except OSError as exc:
                self._failed.append(f"{folder}: {exc.strerror or exc}")
                continue
            try:
                if handle.tell() == 0:
                    header = {"soakgate_unstored": FORMAT, "database": str(self.db)}
                    handle.write(json.dumps(header) + "\n" + _line("run", self.run))
                    handle.flush()
                    os.fsync(handle.fileno())
            except OSError as exc:  # no room even for the header: leave no empty file behind
                self._failed.append(f"{folder}: {exc.strerror or exc}")
                with contextlib.suppress(OSError):
                    handle.close()
                with contextlib.suppress(OSError):
                    path.unlink()
                continue
            self._file, self.path = handle, path
            return
        tried = "; ".join(self._failed)
        raise StoreError(f"the unstored rows could not be written anywhere ({tried})")

    def _abandon(self, start: int, exc: OSError) -> None:
        assert self._file is not None and self.path is not None
        self._failed.append(f"{self.path.parent}: {exc.strerror or exc}")
        try:
            self._file.truncate(start)
            self._file.close()
        except OSError:
            pass
        self._file, self.path = None, None

    def close(self) -> None:
        """Close the file."""
        if self._file is not None:
            self._file.close()
            self._file = None


SQLITE_MAGIC = b"SQLite format 3\x00"
BATCH = 1000
"""Rows imported per transaction: what memory holds at a time, whatever the file's size."""


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line) of a sidecar after its header, read as a stream; UsageError when the
    file cannot be read or is not a sidecar (a database given in its place is named as such)."""
    try:
        with path.open("rb") as raw:
            if raw.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC:
                raise UsageError(
                    f"{path} is an SQLite database, not a file of unstored rows (the database "
                    "comes first: soakgate import DB FILE)"
                )
            raw.seek(0)
            for number, data in enumerate(raw, start=1):
                try:
                    line = data.decode("ascii")
                except UnicodeDecodeError:
                    raise UsageError(
                        f"{path}:{number}: not a line of unstored rows (sidecars are ASCII JSON)"
                    ) from None
                if number == 1:
                    if '"soakgate_unstored"' not in line:
                        raise UsageError(f"{path} is not a soakgate file of unstored rows")
                    continue
                if line.strip():
                    yield number, line
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None


def _records(path: Path) -> Iterator[tuple[int, Run | Generation | Event]]:
    """Every record of a sidecar, each checked against the schema (`sidecar_schema`), streamed;
    UsageError naming the first bad line."""
    for number, line in _lines(path):
        try:
            parsed = json.loads(line)
            if not isinstance(parsed, dict) or len(parsed) != 1:
                raise ValueError("a line holds one object with one key: run, generation or event")
            ((kind, data),) = parsed.items()
            record = checked(kind, data)
        except (ValueError, TypeError, RecursionError) as exc:
            raise UsageError(f"{path}:{number}: not an unstored row ({exc})") from None
        yield number, record


def scan_unstored(path: Path) -> Run:
    """Check a whole sidecar without storing anything; its run record (the last one), or
    UsageError naming the first bad line: a record out of the schema, a second run, or a row
    of a run the file does not name."""
    run: Run | None = None
    for number, record in _records(path):
        if isinstance(record, Run):
            if run is not None and record.run_id != run.run_id:
                raise UsageError(
                    f"{path}:{number}: a second run {record.run_id!r} (the file is run "
                    f"{run.run_id}'s)"
                )
            run = record
        elif run is None or record.run_id != run.run_id:
            named = f"the file names run {run.run_id}" if run else "no run record precedes it"
            raise UsageError(
                f"{path}:{number}: a row of run {record.run_id!r}, which {named} "
                "(rows of unknown runs are refused)"
            )
    if run is None:
        raise UsageError(f"{path} holds no run record")
    return run


@dataclass(slots=True)
class ImportResult:
    """What `import_unstored` did."""

    generations: int = 0
    """Generations added."""
    already_present: int = 0
    """Generations skipped because the database held them already."""
    events: int = 0
    """Events added."""
    runs: list[str] = field(default_factory=list)
    """Runs touched."""


def import_unstored(
    store: Store, paths: Sequence[Path], runs: Sequence[Run] | None = None, batch: int = BATCH
) -> ImportResult:
    """Load sidecar files into a store, `batch` rows at a time; rows and events it already
    holds are skipped. Every file is checked whole first (`scan_unstored`, unless the caller
    did and gives its `runs`): a bad line stores nothing of any file."""
    result = ImportResult()
    runs = runs if runs is not None else [scan_unstored(path) for path in paths]
    for path, run in zip(paths, runs, strict=True):
        known = {r.run_id: r for r in store.runs()}
        if run.run_id not in known or known[run.run_id].status == "running":
            store.save_run(run)
        seen = {_event_key(e) for e in store.events(run.run_id)}
        generations: list[Generation] = []
        events: list[Event] = []
        for _, record in _records(path):
            if isinstance(record, Generation):
                generations.append(record)
            elif isinstance(record, Event) and _event_key(record) not in seen:
                seen.add(_event_key(record))
                events.append(record)
            if len(generations) + len(events) >= batch:
                _add(store, run.run_id, generations, events, result)
                generations, events = [], []
        _add(store, run.run_id, generations, events, result)
        result.runs.append(run.run_id)
    return result


def _add(
    store: Store, run_id: str, generations: list[Generation], events: list[Event],
    result: ImportResult,
) -> None:  # fmt: skip
    present = store.request_ids(run_id, [g.request_id for g in generations])
    fresh = list({g.request_id: g for g in generations if g.request_id not in present}.values())
    if fresh or events:
        store.add(fresh, events)
    result.generations += len(fresh)
    result.already_present += len(generations) - len(fresh)
    result.events += len(events)


def _event_key(event: Event) -> tuple[str, float, str, str | None, str]:
    data = json.dumps(event.data, sort_keys=True)
    return (event.run_id, event.at, event.kind, event.target, data)
