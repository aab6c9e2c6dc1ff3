"""In-memory store with the same interface as SqliteStore, for fast tests of the engine."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from typing import Any

from soakgate.errors import StoreError
from soakgate.prompts import Prompt
from soakgate.records import Event, Generation, Run
from soakgate.store.base import LedgerEntry, TargetCounts, chain_hash
from soakgate.store.repair import storable, storable_event


class MemoryStore:
    """Keeps everything in lists; copies records so callers cannot mutate stored state."""

    def __init__(self) -> None:
        self._runs: dict[str, Run] = {}
        self._generations: list[Generation] = []
        self._request_ids: set[str] = set()
        self._events: list[Event] = []
        self._ledger: list[LedgerEntry] = []
        self._prompts: dict[str, dict[str, Prompt]] = {}

    def save_run(self, run: Run) -> None:
        """Insert or update a run record."""
        self._runs[run.run_id] = copy.deepcopy(run)

    def add(self, generations: Sequence[Generation], events: Sequence[Event] = ()) -> None:
        """Append generations and events; a duplicate request id rejects the whole batch, and
        each row is kept as SQLite would store it (`repair.storable`)."""
        ids = [g.request_id for g in generations]
        if len(set(ids)) != len(ids) or self._request_ids.intersection(ids):
            raise StoreError("database write failed: duplicate request_id")  # as SQLite's UNIQUE
        rows = [copy.deepcopy(storable(g)) for g in generations]
        self._request_ids.update(ids)
        self._generations.extend(rows)
        self._events.extend(storable_event(copy.deepcopy(e)) for e in events)

    def save_prompts(self, run_id: str, prompts: Sequence[Prompt]) -> None:
        """Keep each distinct prompt of a run once (a prompt already kept stays)."""
        mine = self._prompts.setdefault(run_id, {})
        for prompt in prompts:
            mine.setdefault(prompt.prompt_id, prompt)

    def prompts(self, run_id: str) -> dict[str, Prompt]:
        """Prompt id -> the prompt a run sent."""
        return dict(self._prompts.get(run_id, {}))

    def request_ids(self, run_id: str, among: Sequence[str] | None = None) -> set[str]:
        """Request ids of the generations stored for one run (only those `among`, when given)."""
        found = {g.request_id for g in self._generations if g.run_id == run_id}
        return found if among is None else found & set(among)

    def runs(self) -> list[Run]:
        """Every run, oldest first."""
        return sorted((copy.deepcopy(r) for r in self._runs.values()), key=lambda r: r.started_at)

    def generations(self, run_id: str | None = None) -> Iterator[Generation]:
        """Generations in (run, seq) order."""
        rows = [g for g in self._generations if run_id is None or g.run_id == run_id]
        for g in sorted(rows, key=lambda g: (g.run_id, g.seq)):
            yield copy.deepcopy(g)

    def events(self, run_id: str | None = None) -> list[Event]:
        """Events in time order."""
        rows = [e for e in self._events if run_id is None or e.run_id == run_id]
        return copy.deepcopy(sorted(rows, key=lambda e: e.at))

    def counts(self, run_id: str) -> dict[str, TargetCounts]:
        """Per-target tallies of one run."""
        rows = [g for g in self._generations if g.run_id == run_id]
        next_seq = max((g.seq for g in rows), default=-1) + 1
        result: dict[str, TargetCounts] = {}
        for target in sorted({g.target for g in rows}):
            mine = [g for g in rows if g.target == target]
            tokens = sum(g.completion_tokens or 0 for g in mine if g.ok)
            collapses = sum(g.collapsed for g in mine)
            errors = sum(not g.ok for g in mine)
            result[target] = TargetCounts(len(mine), collapses, errors, tokens, next_seq)
        return result

    def append_ledger(self, kind: str, payload: dict[str, Any], at: float) -> LedgerEntry:
        """Append a hash-chained entry."""
        prev = self._ledger[-1].entry_hash if self._ledger else ""
        entry = LedgerEntry(
            len(self._ledger), at, kind, copy.deepcopy(payload), prev,
            chain_hash(prev, at, kind, payload),
        )  # fmt: skip
        self._ledger.append(entry)
        return entry

    def ledger(self) -> list[LedgerEntry]:
        """The whole ledger, in order."""
        return list(self._ledger)

    def close(self) -> None:
        """Nothing to release."""
