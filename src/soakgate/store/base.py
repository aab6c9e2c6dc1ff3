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


LEDGER_ANCHOR = "ledger_anchor"
"""Key of `run.load` holding the hash of the ledger entry that registered the run's plan: the
runs table remembers the ledger's head, so a ledger cut at its tail is noticed
(`missing_anchor`); a hash chain alone cannot see entries removed from its end."""


def chain_hashes(entries: Sequence[LedgerEntry]) -> set[str]:
    """Every entry hash a ledger vouches for: its own, and, in a merged ledger, those each shard
    had in its own chain (the entries after a `shard` entry, re-chained from '')."""
    found = {e.entry_hash for e in entries}
    for index, entry in enumerate(entries):
        if entry.kind != "shard":
            continue
        prev = ""
        for kept in entries[index + 1 : index + 1 + int(entry.payload.get("entries", 0))]:
            prev = chain_hash(prev, kept.at, kept.kind, kept.payload)
            found.add(prev)
    return found


def missing_anchor(runs: Sequence[Run], entries: Sequence[LedgerEntry]) -> str | None:
    """Why the ledger lacks an entry a run anchored (its tail cut, or the entry removed), or
    None when every anchored entry is there."""
    known = chain_hashes(entries)
    for run in runs:
        anchor = run.load.get(LEDGER_ANCHOR)
        if isinstance(anchor, str) and anchor not in known:
            return (
                f"the plan ledger lacks the entry run {run.run_id} registered its plan in "
                f"({anchor[:12]}...): its tail was cut or the entry removed"
            )
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

    def request_ids(self, run_id: str, among: Sequence[str] | None = None) -> set[str]:
        """Request ids of the generations stored for one run (only those `among`, when given:
        what an import checks a batch against without reading every id of the run)."""

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
