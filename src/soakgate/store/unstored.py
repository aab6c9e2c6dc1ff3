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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from soakgate.errors import StoreError, UsageError
from soakgate.records import Event, Generation, Run
from soakgate.store.base import Store

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


@dataclass(slots=True)
class Unstored:
    """What one sidecar file holds."""

    run: Run
    generations: list[Generation] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)


def read_unstored(path: Path) -> Unstored:
    """Parse a sidecar file (UsageError naming the line when it is not one)."""
    try:
        lines = path.read_text(encoding="ascii").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    if not lines or '"soakgate_unstored"' not in lines[0]:
        raise UsageError(f"{path} is not a soakgate file of unstored rows")
    run: Run | None = None
    generations: list[Generation] = []
    events: list[Event] = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            (kind, data), = json.loads(line).items()  # fmt: skip
            if kind == "run":
                run = Run(**data)
            elif kind == "generation":
                generations.append(Generation(**data))
            elif kind == "event":
                events.append(Event(**data))
            else:
                raise ValueError(f"unknown record {kind!r}")
        except (ValueError, TypeError, AttributeError) as exc:
            raise UsageError(f"{path}:{number}: not an unstored row ({exc})") from None
    if run is None:
        raise UsageError(f"{path} holds no run record")
    return Unstored(run, generations, events)


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


def import_unstored(store: Store, paths: Sequence[Path]) -> ImportResult:
    """Load sidecar files into a store; rows and events it already holds are skipped."""
    result = ImportResult()
    for path in paths:
        unstored = read_unstored(path)
        run = unstored.run
        known = {r.run_id: r for r in store.runs()}
        if run.run_id not in known or known[run.run_id].status == "running":
            store.save_run(run)
        present = store.request_ids(run.run_id)
        fresh = [g for g in unstored.generations if g.request_id not in present]
        seen = {_event_key(e) for e in store.events(run.run_id)}
        new_events = [e for e in unstored.events if _event_key(e) not in seen]
        store.add(fresh, new_events)
        result.generations += len(fresh)
        result.already_present += len(unstored.generations) - len(fresh)
        result.events += len(new_events)
        result.runs.append(run.run_id)
    return result


def _event_key(event: Event) -> tuple[str, float, str, str | None, str]:
    data = json.dumps(event.data, sort_keys=True)
    return (event.run_id, event.at, event.kind, event.target, data)
