"""Buffers generations and events and commits them at least every `interval_s` seconds."""

from __future__ import annotations

import time
from collections.abc import Callable

from soakgate.records import Event, Generation
from soakgate.store.base import Store


class BatchWriter:
    """Batched, time-bounded writes: a kill -9 loses at most the last `interval_s` of results."""

    def __init__(
        self,
        store: Store,
        interval_s: float = 0.5,
        max_rows: int = 2000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.prepare: Callable[[list[Generation]], None] | None = None
        """Called on each batch just before it is stored (the soak scores its rows here)."""
        self.store = store
        self.interval_s = interval_s
        self.max_rows = max_rows
        self._clock = clock
        self._generations: list[Generation] = []
        self._events: list[Event] = []
        self._last_flush = clock()
        self.flushed_rows = 0

    def add_generation(self, generation: Generation) -> None:
        """Queue one generation; flush when the buffer is full or the interval has passed."""
        self._generations.append(generation)
        self.maybe_flush()

    def add_event(self, event: Event) -> None:
        """Queue one event (flushed with the next batch)."""
        self._events.append(event)
        self.maybe_flush()

    def maybe_flush(self) -> None:
        """Flush if the buffer is full or `interval_s` passed since the last flush."""
        full = len(self._generations) >= self.max_rows
        if full or self._clock() - self._last_flush >= self.interval_s:
            self.flush()

    def flush(self) -> None:
        """Commit everything buffered in one transaction."""
        self._last_flush = self._clock()
        if not self._generations and not self._events:
            return
        generations, events = self._generations, self._events
        self._generations, self._events = [], []
        try:
            if self.prepare is not None and generations:
                self.prepare(generations)
        finally:  # rows are stored even if preparing them failed: nothing collected is lost
            self.store.add(generations, events)
            self.flushed_rows += len(generations)

    @property
    def pending(self) -> int:
        """Generations buffered but not yet committed."""
        return len(self._generations)
