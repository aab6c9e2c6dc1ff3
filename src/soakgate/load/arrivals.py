"""Open-loop arrivals (`run --rate R`): requests arrive on a schedule of their own, as production
traffic does, instead of the moment the previous one finished.

Each target has its own schedule: Poisson arrivals (exponential gaps, seeded: the same run sends
on the same schedule) or a constant rate, at `rate` requests per second. The target's
`--concurrency` workers are the cap on requests in flight: an arrival that finds every worker
busy is not sent and is counted as overflowed (never silently dropped: the soak stores the
counts as an `arrivals` event per target and prints a warning line). The schedule is kept in
absolute time: a late arrival does not delay the ones after it.

With a ramp of T seconds the rate rises linearly, rate·t/T, until T and stays at `rate` after:
an inhomogeneous Poisson process drawn by time rescaling (unit gaps in the integrated rate
Λ(t) = rate·g(t), g(t) = t²/2T before T and t − T/2 after, mapped back through g's inverse);
constant arrivals take unit steps of Λ instead of exponential ones.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable
from dataclasses import dataclass

POISSON, CONSTANT = "poisson", "constant"
KINDS = (POISSON, CONSTANT)


@dataclass(slots=True)
class ArrivalCounts:
    """What one target's schedule did."""

    arrived: int = 0
    """Arrivals the schedule produced."""
    overflowed: int = 0
    """Of them, arrivals that found every worker busy and were not sent."""


class Arrivals:
    """One target's arrival schedule, handing each arrival to an idle worker."""

    def __init__(self, rate: float, kind: str, seed: str, ramp_s: float | None = None) -> None:
        if kind not in KINDS:
            raise ValueError(f"arrivals must be one of {', '.join(KINDS)}, not {kind!r}")
        self.rate, self.kind, self.ramp_s = rate, kind, ramp_s or 0.0
        self.counts = ArrivalCounts()
        self._rng = random.Random(seed)
        self._idle = 0
        self._tickets: asyncio.Queue[None] | None = None
        self._closed: asyncio.Event | None = None

    def _gap(self) -> float:
        """The next gap in g (seconds at the full rate)."""
        if self.kind == CONSTANT:
            return 1.0 / self.rate
        return self._rng.expovariate(self.rate)

    def offset(self, g: float) -> float:
        """Seconds from the schedule's start at which g (the integrated rate over `rate`)
        is reached: g itself without a ramp."""
        ramp = self.ramp_s
        if g >= ramp / 2:
            return g + ramp / 2
        return math.sqrt(2 * ramp * g)

    def _queue(self) -> asyncio.Queue[None]:
        if self._tickets is None:  # made in the soak's event loop
            self._tickets = asyncio.Queue()
        return self._tickets

    def _ended(self) -> asyncio.Event:
        if self._closed is None:
            self._closed = asyncio.Event()
        return self._closed

    async def run(self, finished: Callable[[], bool], stop: asyncio.Event) -> None:
        """Produce arrivals until `finished()` (the target's count or time limit reached) or
        `stop`; each goes to an idle worker, or is counted as overflowed."""
        try:
            await self._schedule(finished, stop)
        finally:  # no arrival comes any more: the workers waiting for one are let go
            self._ended().set()

    async def _schedule(self, finished: Callable[[], bool], stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        tickets = self._queue()
        start, g = loop.time(), 0.0
        while not stop.is_set() and not finished():
            g += self._gap()
            delay = start + self.offset(g) - loop.time()
            if delay > 0:
                try:
                    await asyncio.wait_for(stop.wait(), delay)
                    return  # stopped before this arrival
                except TimeoutError:
                    pass
            if finished():
                return
            self.counts.arrived += 1
            if self._idle > tickets.qsize():
                tickets.put_nowait(None)
            else:
                self.counts.overflowed += 1

    async def wait(self, stop: asyncio.Event) -> bool:
        """A worker waits for the next arrival: True when one came, False when the soak stops
        or the schedule has ended."""
        tickets, ended = self._queue(), self._ended()
        if not tickets.empty():
            tickets.get_nowait()
            return True
        if ended.is_set():
            return False
        self._idle += 1
        getter = asyncio.ensure_future(tickets.get())
        others = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(ended.wait())]
        try:
            await asyncio.wait({getter, *others}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._idle -= 1
            for other in others:
                other.cancel()
            if not getter.done():
                getter.cancel()
        return getter.done() and not getter.cancelled()
