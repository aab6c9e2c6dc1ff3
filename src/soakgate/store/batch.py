"""Buffers generations and events and commits them at least every `interval_s` seconds.

A batch the store fails to take is kept and retried; when the store stays broken for
`give_up_after_s` (or is lost: deleted, replaced, made immutable) the writer fails once, tells
`on_failure` (the soak stops), and from then on spills every row to `spill` (a sidecar file)
instead. Nothing handed to the writer is dropped.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence

from soakgate import secrets
from soakgate.errors import StoreError, StoreLost
from soakgate.records import Event, Generation
from soakgate.store.base import Store

Spill = Callable[[Sequence[Generation], Sequence[Event]], None]
RETRY_INTERVAL_S = 0.25
"""How often a failing store is tried again."""
RESCUE_CHUNK = 5000
"""Rows read back at a time from a lost database file."""


class BatchWriter:
    """Batched, time-bounded writes: a kill -9 loses at most the last `interval_s` of results."""

    def __init__(
        self,
        store: Store,
        interval_s: float = 0.5,
        max_rows: int = 2000,
        clock: Callable[[], float] = time.monotonic,
        give_up_after_s: float = 1.0,
    ) -> None:
        self.prepare: Callable[[list[Generation]], None] | None = None
        """Called on each batch just before it is stored (the soak scores its rows here)."""
        self.on_failure: Callable[[StoreError], None] | None = None
        """Told once, when the writer gives up on the store."""
        self.spill: Spill | None = None
        """Where rows go once the store has failed (None: they are kept in `unstored`)."""
        self.store = store
        self.interval_s = interval_s
        self.max_rows = max_rows
        self.give_up_after_s = give_up_after_s
        self._clock = clock
        self._generations: list[Generation] = []
        self._events: list[Event] = []
        self._ready: list[Generation] = []  # prepared, not yet stored
        self._last_flush = clock()
        self._failing_since: float | None = None
        self._runs: set[str] = set()  # runs this writer stored rows of (rescued if the file goes)
        self.flushed_rows = 0
        """Generations committed to the store."""
        self.spilled_rows = 0
        """Generations written to `spill` instead."""
        self.failure: StoreError | None = None
        """Why the writer gave up on the store (None while it works)."""
        self.first_failed_at: float | None = None
        """Unix time of the first failed write of the current failing stretch."""
        self.spill_error: StoreError | None = None
        """Why the last spill failed, if it did (its rows are kept in `unstored`)."""
        self.unstored: tuple[list[Generation], list[Event]] = ([], [])
        """Rows neither stored nor spilled (no spill set, or the spill failed too)."""

    def add_generation(self, generation: Generation) -> None:
        """Queue one generation; flush when the buffer is full or the interval has passed."""
        self._generations.append(generation)
        self.maybe_flush()

    def add_event(self, event: Event) -> None:
        """Queue one event (flushed with the next batch)."""
        if secrets.active():
            event = Event(event.run_id, event.at, event.kind, event.target,
                          secrets.redact_json(event.data))  # fmt: skip
        self._events.append(event)
        self.maybe_flush()

    def maybe_flush(self) -> None:
        """Flush if the buffer is full or the interval passed since the last flush (a failing
        store is retried every RETRY_INTERVAL_S, not on every row)."""
        elapsed = self._clock() - self._last_flush
        if self._failing_since is not None:
            if elapsed >= RETRY_INTERVAL_S:
                self.flush()
        elif elapsed >= self.interval_s or len(self._generations) >= self.max_rows:
            self.flush()

    def flush(self) -> None:
        """Prepare what is buffered and commit it in one transaction; never raises for the
        store (a failure is kept in `failure`), only for a failing `prepare`."""
        now = self._last_flush = self._clock()
        generations, self._generations = self._generations, []
        self._ready.extend(generations)
        try:
            if self.prepare is not None and generations:
                self.prepare(generations)
        finally:  # rows are stored even if preparing them failed: nothing collected is lost
            if secrets.active():
                for generation in generations:
                    _redact(generation)
            self._commit(now)

    def _commit(self, now: float) -> None:
        if not self._ready and not self._events:
            return
        if self.failure is not None:
            self._spill(self._take())
            return
        try:
            check = getattr(self.store, "check", None)
            if check is not None:
                check()
            self.store.add(self._ready, self._events)
        except StoreError as exc:
            if self._failing_since is None:
                self._failing_since, self.first_failed_at = now, time.time()
            if isinstance(exc, StoreLost) or now - self._failing_since >= self.give_up_after_s:
                self._fail(exc)
        else:
            self._runs.update(g.run_id for g in self._ready)
            self.flushed_rows += len(self._ready)
            self._take()
            self._failing_since = self.first_failed_at = None

    def _take(self) -> tuple[list[Generation], list[Event]]:
        taken = self._ready, self._events
        self._ready, self._events = [], []
        return taken

    def _fail(self, error: StoreError) -> None:
        """Give up on the store: rescue what a lost file took with it, spill the rest."""
        self.failure = error
        self._failing_since = None
        if isinstance(error, StoreLost) and not getattr(self.store, "poisoned", False):
            self._rescue()
        self._spill(self._take())
        if self.on_failure is not None:
            self.on_failure(error)

    def _rescue(self) -> None:
        """Spill what a deleted or replaced file held of this writer's runs: the unlinked file
        is still readable through the open connection, and its rows are their only copy now.
        Streamed in chunks, so a run of millions of rows never has to fit in memory."""
        for run_id in sorted(self._runs):
            rows = self.store.generations(run_id)
            while chunk := list(itertools.islice(rows, RESCUE_CHUNK)):
                self._spill((chunk, []))
            self._spill(([], self.store.events(run_id)))

    def _spill(self, rows: tuple[list[Generation], list[Event]]) -> None:
        generations, events = rows
        kept_generations, kept_events = self.unstored
        generations, events = kept_generations + generations, kept_events + events
        self.unstored = ([], [])
        if not generations and not events:
            return
        try:
            if self.spill is None:
                raise StoreError("no sidecar file to write the unstored rows to")
            self.spill(generations, events)
        except StoreError as exc:
            self.spill_error = exc
            self.unstored = (generations, events)
            return
        self.spilled_rows += len(generations)

    @property
    def pending(self) -> int:
        """Generations buffered but not yet committed (or spilled)."""
        return len(self._generations) + len(self._ready) + len(self.unstored[0])


def _redact(generation: Generation) -> None:
    """Replace registered secrets (an API key a gateway echoed) in what the row stores."""
    if generation.error_detail:
        generation.error_detail = secrets.redact(generation.error_detail)
    if generation.text:
        text = secrets.redact(generation.text, urls=False)
        if text != generation.text:
            generation.text = text
            generation.details["redacted"] = True  # text_sha256 is of the text as generated
    if generation.details:
        generation.details = secrets.redact_json(generation.details, urls=False)


class ObservingWriter(BatchWriter):
    """A BatchWriter that shows every generation and every event to an observer as it is
    queued (a campaign's fault ledger sees each row; its live metrics each event)."""

    def __init__(
        self,
        store: Store,
        on_generation: Callable[[Generation], None] | None = None,
        interval_s: float = 0.5,
    ) -> None:
        super().__init__(store, interval_s=interval_s)
        self.on_generation = on_generation
        """Shown every generation before it is queued (a campaign's `FaultLedger.observe`)."""
        self.on_event: Callable[[Event], None] | None = None
        """Shown every event queued (the campaign's live metrics count the guard's faults)."""

    def add_event(self, event: Event) -> None:
        """Queue, and show the event to `on_event`."""
        super().add_event(event)
        if self.on_event is not None:
            self.on_event(event)

    def add_generation(self, generation: Generation) -> None:
        """Observe, then queue."""
        if self.on_generation is not None:
            self.on_generation(generation)
        super().add_generation(generation)
