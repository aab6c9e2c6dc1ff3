"""The store interface every backend implements, and the hash chain of the plan ledger."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from soakgate.prompts import Prompt
from soakgate.records import Event, Generation, Run


@dataclass(frozen=True, slots=True)
class TargetCounts:
    """Per-target tallies of a run, enough to resume it and to show progress."""

    requests: int
    """Generations stored (errors included)."""
    collapses: int
    """Clean generations some detector flagged."""
    errors: int
    """Generations that ended in an error."""
    completion_tokens: int
    """Sum of completion tokens over clean generations."""
    next_seq: int
    """One past the highest sequence number stored for the run (all targets)."""


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One hash-chained ledger entry (e.g. a plan registered before any data)."""

    index: int
    """Position in the ledger, from 0."""
    at: float
    """Unix time of registration."""
    kind: str
    """Entry kind, e.g. `plan`."""
    payload: dict[str, Any]
    """Entry content (for a plan: its sha256, the run id, the plan itself)."""
    prev_hash: str
    """Hash of the previous entry ('' for the first)."""
    entry_hash: str
    """SHA-256 over prev_hash and the canonical entry content."""


def chain_hash(prev_hash: str, at: float, kind: str, payload: dict[str, Any]) -> str:
    """The ledger hash of one entry, chained to its predecessor."""
    body = json.dumps([prev_hash, at, kind, payload], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()


def verify_chain(entries: Sequence[LedgerEntry]) -> int | None:
    """Index of the first entry whose hash does not chain, or None when the ledger is intact."""
    prev = ""
    for entry in entries:
        expected = chain_hash(prev, entry.at, entry.kind, entry.payload)
        if entry.prev_hash != prev or entry.entry_hash != expected:
            return entry.index
        prev = entry.entry_hash
    return None


class Store(Protocol):
    """What the soak engine, the guard and the analysis need from a store."""

    def save_run(self, run: Run) -> None:
        """Insert or update a run record."""

    def add(self, generations: Sequence[Generation], events: Sequence[Event] = ()) -> None:
        """Append generations and events durably, in one transaction."""

    def runs(self) -> list[Run]:
        """Every run, oldest first."""

    def generations(self, run_id: str | None = None) -> Iterator[Generation]:
        """Generations in (run, seq) order, optionally of one run."""

    def save_prompts(self, run_id: str, prompts: Sequence[Prompt]) -> None:
        """Store each distinct prompt of a run once (what `soakgate replay` sends again)."""

    def prompts(self, run_id: str) -> dict[str, Prompt]:
        """Prompt id -> the prompt a run sent."""

    def request_ids(self, run_id: str) -> set[str]:
        """Request ids of the generations stored for one run."""

    def events(self, run_id: str | None = None) -> list[Event]:
        """Events in time order, optionally of one run."""

    def counts(self, run_id: str) -> dict[str, TargetCounts]:
        """Per-target tallies of one run."""

    def append_ledger(self, kind: str, payload: dict[str, Any], at: float) -> LedgerEntry:
        """Append a hash-chained ledger entry."""

    def ledger(self) -> list[LedgerEntry]:
        """The whole ledger, in order."""

    def close(self) -> None:
        """Flush and release resources."""
