"""What a Ray unit sent, so that requests sent again after a lost node or a killed driver are
recorded rather than hidden (the server saw them twice; the database would hold one row).

A unit numbers its requests in its own range, one after another, and a re-placed or resumed
unit numbers on from the highest row stored. Rows the lost actor had not shipped are gone, so
the requests after that row go out again under the same request ids. Two facts bound what the
lost actor had sent: the highest number it reported at the last drain (`mark`: sent for
certain), and a *lease*, the highest number it was allowed to send, which the driver stores
before the unit may use it (sent at most). A re-sent row's `attempts` counts the certain earlier
sends and `details["resent"]` says how many were certain and how many possible; a `resent`
event names the ranges. On a killed driver only the stored lease is known: every re-send is
then possible, none certain.

The lease is 16 requests per slot ahead of the last drain, renewed (one `dispatch_lease` event)
when half is used: a unit answering more than 16 requests per second per slot waits for the
next drain (0.5 s), and a `lease_wait` note says so once per placement.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from soakgate.records import Event
from soakgate.store.outbox import Resend

LEASE_PER_SLOT = 16
"""Requests per unit of concurrency a unit may send beyond what the driver has drained."""


class Lease:
    """The node side: admits requests up to the lease's last number, and records the highest
    number sent (the soak's `gate` and `on_dispatch` hooks)."""

    def __init__(self, first_seq: int, through: int) -> None:
        self.sent = first_seq - 1
        """Highest number sent so far."""
        self.through = through
        self.waited = False
        """A request had to wait for the lease to be renewed."""
        self._admitted = first_seq - 1  # >= sent: a worker admitted may still find the soak over
        self._renewed: asyncio.Event | None = None
        self._closed = False

    async def admit(self, target: str) -> bool:
        """Wait until the lease covers one more request; False once closed."""
        while self._admitted >= self.through and not self._closed:
            self.waited = True
            if self._renewed is None:
                self._renewed = asyncio.Event()
            self._renewed.clear()
            await self._renewed.wait()
        if self._closed:
            return False
        self._admitted += 1
        return True

    def dispatched(self, target: str, seq: int) -> None:
        self.sent = max(self.sent, seq)

    def renew(self, through: int) -> None:
        """Extend the lease (the driver stored it first)."""
        if through > self.through:
            self.through = through
            if self._renewed is not None:
                self._renewed.set()

    def close(self) -> None:
        """Admit nothing more (the soak is stopping)."""
        self._closed = True
        if self._renewed is not None:
            self._renewed.set()


@dataclass(slots=True)
class DispatchBook:
    """The driver side, for one unit: its lease and what its actors reported sending."""

    target: str
    concurrency: int
    first_seq: int = 0
    """First number of the current actor."""
    mark: int = -1
    """Highest number the current actor reported sent (-1: none yet)."""
    lease: int = -1
    """Highest number the current actor may send (stored as a `dispatch_lease` event)."""
    resends: list[Resend] = field(default_factory=list)
    """Every range re-sent so far in this block (stored in `resent` events)."""

    def start(self, next_seq: int, stored: Sequence[Event]) -> list[Resend]:
        """A new actor numbers from `next_seq`: the ranges it sends again that a lost actor (of
        this invocation: `mark`; of a killed driver: the stored lease) sent or may have sent."""
        new: list[Resend] = []
        if self.lease >= 0:  # this driver saw the last actor: its mark is certain
            if self.mark >= next_seq:
                new.append((next_seq, self.mark, True))
            if self.lease > max(self.mark, next_seq - 1):
                new.append((max(self.mark + 1, next_seq), self.lease, False))
        else:
            self.resends = [r for e in stored if e.kind == "resent" and e.target == self.target
                            for r in _ranges(e.data.get("ranges"))]  # fmt: skip
            leases = [int(e.data.get("through", -1)) for e in stored
                      if e.kind == "dispatch_lease" and e.target == self.target]  # fmt: skip
            if leases and leases[-1] >= next_seq:
                new.append((next_seq, leases[-1], False))
        self.resends.extend(new)
        self.first_seq, self.mark, self.lease = next_seq, next_seq - 1, -1
        return new

    def renewal(self) -> int | None:
        """A longer lease when less than half is left (store it before handing it over)."""
        ahead = LEASE_PER_SLOT * max(1, self.concurrency)
        if self.lease - self.mark >= ahead // 2:
            return None
        self.lease = self.mark + ahead
        return self.lease

    def reported(self, sent: int) -> None:
        self.mark = max(self.mark, sent)

    def ended(self) -> int:
        """The actor ended and everything was drained: the lease shrinks to what it sent."""
        self.lease = self.mark
        return self.mark


def resent_event_data(cause: str, new: Sequence[Resend], lost: int) -> dict[str, Any]:
    """The `resent` event: the ranges sent again and the rows lost between them."""
    return {
        "cause": cause, "ranges": [list(r) for r in new], "lost_rows_below": lost,
        "certain": sum(b - a + 1 for a, b, sure in new if sure),
        "possible": sum(b - a + 1 for a, b, sure in new if not sure),
    }  # fmt: skip


def _ranges(value: Any) -> list[Resend]:
    if not isinstance(value, list):
        return []
    return [(int(r[0]), int(r[1]), bool(r[2])) for r in value
            if isinstance(r, list) and len(r) == 3]  # fmt: skip
