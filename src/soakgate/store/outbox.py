"""A store on a Ray node that keeps no rows: what a unit's soak and guard store queues in an
outbox that the campaign's one writer (on the driver) drains into the real database. It keeps
running counts and the events (few), which is all the soak and the guard read back."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from soakgate.errors import StoreError
from soakgate.prompts import Prompt
from soakgate.records import Event, Generation, Run
from soakgate.store.base import LedgerEntry, TargetCounts

Resend = tuple[int, int, bool]
"""(first seq, last seq, certain): numbers an earlier actor of the unit sent (certain) or may
have sent (possible) whose rows were lost; the unit sends them again."""


def mark_resent(generations: Iterable[Generation], resends: Sequence[Resend]) -> None:
    """Record on each row the earlier sends of its request: `attempts` counts the certain ones,
    `details["resent"]` both kinds."""
    if not resends:
        return
    for generation in generations:
        certain = sum(1 for a, b, sure in resends if sure and a <= generation.seq <= b)
        possible = sum(1 for a, b, sure in resends if not sure and a <= generation.seq <= b)
        if certain or possible:
            generation.attempts += certain
            generation.details["resent"] = {"certain": certain, "possible": possible}


class OutboxStore:
    """The node side of a unit: `take()` hands over (and forgets) what was added since."""

    def __init__(
        self, target: str, counts: Mapping[str, TargetCounts], next_seq: int,
        resends: Sequence[Resend] = (),
    ) -> None:  # fmt: skip
        self._counts = {target: TargetCounts(0, 0, 0, 0, next_seq), **counts}
        self._resends = tuple(resends)
        self._next_seq = next_seq
        self._generations: list[Generation] = []
        self._events: list[Event] = []
        self._seen_events: list[Event] = []
        self.run: Run | None = None
        """The run record as the soak last saved it (its servers' models)."""

    def take(self) -> tuple[list[Generation], list[Event]]:
        """What was added since the last call."""
        taken = self._generations, self._events
        self._generations, self._events = [], []
        return taken

    def add(self, generations: Sequence[Generation], events: Sequence[Event] = ()) -> None:
        """Queue rows for the driver and count them; a row sent again after a lost actor says
        so (`campaign.dispatch.mark_resent`)."""
        mark_resent(generations, self._resends)
        for generation in generations:
            self._count(generation)
        self._generations.extend(generations)
        self._events.extend(events)
        self._seen_events.extend(events)

    def _count(self, row: Generation) -> None:
        old = self._counts.get(row.target, TargetCounts(0, 0, 0, 0, 0))
        self._counts[row.target] = TargetCounts(
            old.requests + 1, old.collapses + int(row.ok and row.collapsed),
            old.errors + int(not row.ok),
            old.completion_tokens + ((row.completion_tokens or 0) if row.ok else 0), 0,
        )  # fmt: skip
        self._next_seq = max(self._next_seq, row.seq + 1)

    def counts(self, run_id: str) -> dict[str, TargetCounts]:
        """Per-target tallies: what the driver had stored at dispatch plus what passed here;
        `next_seq` is the next number of this unit's own range (the unit's target is always
        there, so a soak starts numbering in that range even before its first row)."""
        return {
            name: TargetCounts(c.requests, c.collapses, c.errors, c.completion_tokens,
                               self._next_seq)
            for name, c in self._counts.items()
        }  # fmt: skip

    def save_run(self, run: Run) -> None:
        """Keep the record (the driver merges each unit's models into the stored run)."""
        self.run = run

    def events(self, run_id: str | None = None) -> list[Event]:
        """Events added on this node."""
        return [e for e in self._seen_events if run_id is None or e.run_id == run_id]

    def save_prompts(self, run_id: str, prompts: Sequence[Prompt]) -> None:
        """Nothing: the driver stores the block's prompts before any unit starts."""

    def runs(self) -> list[Run]:
        return [] if self.run is None else [self.run]

    def generations(self, run_id: str | None = None) -> Iterator[Generation]:
        raise StoreError("a Ray unit's outbox keeps no rows; read the driver's database")

    def prompts(self, run_id: str) -> dict[str, Prompt]:
        return {}

    def request_ids(self, run_id: str, among: Sequence[str] | None = None) -> set[str]:
        raise StoreError("a Ray unit's outbox keeps no rows; read the driver's database")

    def append_ledger(self, kind: str, payload: dict[str, Any], at: float) -> LedgerEntry:
        raise StoreError("the plan ledger is kept by the driver's database only")

    def ledger(self) -> list[LedgerEntry]:
        return []

    def close(self) -> None:
        """Nothing to release."""
