"""What a local soak sent, so that requests `--resume` sends again after a `kill -9` are recorded
rather than hidden (the server saw them once before; the database holds one row).

A soak numbers its requests one after another and a resumed soak numbers on from the highest
row stored, so the requests that were in flight when the process died go out again under the
same request ids. Before a request past the stored *lease* is sent, the lease (the highest
number the soak may send) is extended and committed as a `dispatch_lease` event; a soak that
ends stores a final lease, the last number it sent. On resume, the numbers from the next one up
to the last stored lease may have been sent before: each row among them says so
(`details["resent"]`, `possible`), and one `resent` event names the range. The same record as a
Ray campaign's killed driver (`campaign.dispatch`), whose leases are per unit.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from soakgate.records import Event, Generation, Run
from soakgate.store import BatchWriter
from soakgate.store.outbox import Resend, mark_resent

LEASE_PER_SLOT = 16
"""Requests per request in flight that a soak may send beyond its stored lease."""


@dataclass(slots=True)
class SendLease:
    """The soak's lease on request numbers, and the ranges a resumed soak sends again."""

    writer: BatchWriter
    run: Run
    ahead: int
    """How far past a number being claimed the lease is extended."""
    through: int = -1
    """Highest number the soak may send (stored)."""
    resends: list[Resend] = field(default_factory=list)

    def claim(self, seq: int) -> None:
        """Called before request `seq` is sent: extend and commit the lease if it ends below."""
        if seq <= self.through:
            return
        self.through = seq + self.ahead - 1
        self.writer.add_event(Event(self.run.run_id, time.time(), "dispatch_lease", None,
                                    {"through": self.through}))  # fmt: skip
        self.writer.flush()  # committed before the request it covers is sent

    def mark(self, generation: Generation) -> None:
        """A row of a request that may have been sent before this soak."""
        mark_resent((generation,), self.resends)

    def close(self, last_sent: int) -> None:
        """The soak ended with every request it sent stored: the lease shrinks to them."""
        if self.through >= 0:
            self.writer.add_event(Event(self.run.run_id, time.time(), "dispatch_lease", None,
                                        {"through": last_sent, "final": True}))  # fmt: skip


def open_lease(writer: BatchWriter, run: Run, next_seq: int, in_flight: int) -> SendLease:
    """The lease of a soak that numbers from `next_seq`; when an earlier soak of the run leased
    numbers from there on and did not end (a `kill -9`), a `resent` event for that range."""
    lease = SendLease(writer, run, LEASE_PER_SLOT * max(1, in_flight))
    stored = _leases(writer.store.events(run.run_id))
    if stored and stored[-1] >= next_seq:
        lease.resends = [(next_seq, stored[-1], False)]
        writer.add_event(Event(run.run_id, time.time(), "resent", None, {
            "cause": "killed", "ranges": [[next_seq, stored[-1], False]], "certain": 0,
            "possible": stored[-1] - next_seq + 1,
        }))  # fmt: skip
    return lease


def _leases(events: Sequence[Event]) -> list[int]:
    """The run's own leases (a Ray unit's carry its target), in order."""
    return [int(e.data.get("through", -1)) for e in events
            if e.kind == "dispatch_lease" and e.target is None]  # fmt: skip
