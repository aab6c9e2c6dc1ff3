"""The batch writer never drops a batch: it retries a failing store, gives up once, and spills."""

from __future__ import annotations

from collections.abc import Sequence

from tests.store.test_stores import make_generation

from soakgate.errors import StoreError, StoreLost
from soakgate.records import Event, Generation
from soakgate.store import BatchWriter, MemoryStore


class FlakyStore(MemoryStore):
    """A store whose writes fail while `failing` is set (as a full disk does)."""

    def __init__(self) -> None:
        super().__init__()
        self.failing: type[StoreError] | None = None
        self.attempts = 0

    def add(self, generations: Sequence[Generation], events: Sequence[Event] = ()) -> None:
        self.attempts += 1
        if self.failing is not None:
            raise self.failing("database write failed: database or disk is full")
        super().add(generations, events)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_batch_the_store_refused_is_kept_and_stored_once_it_recovers() -> None:
    store, clock = FlakyStore(), Clock()
    writer = BatchWriter(store, interval_s=0.5, clock=clock)
    store.failing = StoreError
    for seq in range(5):
        writer.add_generation(make_generation(seq))
    clock.now = 0.5
    writer.maybe_flush()  # fails: the rows stay
    assert writer.pending == 5 and writer.failure is None
    writer.add_generation(make_generation(5))
    clock.now = 0.7
    writer.maybe_flush()  # not yet time to retry
    clock.now = 0.8
    store.failing = None
    writer.maybe_flush()  # retried after RETRY_INTERVAL_S
    assert [g.seq for g in store.generations()] == [0, 1, 2, 3, 4, 5]
    assert writer.pending == 0 and writer.flushed_rows == 6 and writer.failure is None


def test_a_store_that_stays_broken_fails_the_writer_once_and_every_row_is_spilled() -> None:
    store, clock = FlakyStore(), Clock()
    writer = BatchWriter(store, interval_s=0.5, clock=clock)
    spilled: list[int] = []
    failures: list[StoreError] = []
    writer.spill = lambda gens, events: spilled.extend(g.seq for g in gens)
    writer.on_failure = failures.append
    writer.add_generation(make_generation(0))
    writer.flush()  # stored
    store.failing = StoreError
    writer.add_generation(make_generation(1))
    clock.now = 0.5
    writer.flush()  # the first failure, at t=0.5; the writer gives up 1 s later
    for step in range(1, 5):
        clock.now = 0.5 + 0.25 * step
        writer.add_generation(make_generation(1 + step))
        writer.maybe_flush()
    assert len(failures) == 1 and "disk is full" in str(failures[0])
    attempts = store.attempts
    for seq in range(6, 9):
        writer.add_generation(make_generation(seq))
    writer.flush()
    assert store.attempts == attempts  # given up: the store is not hammered
    assert [g.seq for g in store.generations()] == [0]
    assert sorted(spilled) == list(range(1, 9)) and writer.pending == 0
    assert writer.spilled_rows == 8 and writer.flushed_rows == 1


def test_a_lost_store_fails_at_once_and_its_rows_are_rescued_into_the_spill() -> None:
    store, clock = FlakyStore(), Clock()
    writer = BatchWriter(store, clock=clock)
    spilled: list[int] = []
    writer.spill = lambda gens, events: spilled.extend(g.seq for g in gens)
    for seq in range(3):
        writer.add_generation(make_generation(seq))
    writer.flush()
    store.failing = StoreLost  # the file was deleted: what it holds is the run's only copy
    writer.add_generation(make_generation(3))
    writer.flush()
    assert isinstance(writer.failure, StoreLost)
    assert sorted(spilled) == [0, 1, 2, 3]


def test_rows_that_cannot_be_spilled_either_are_kept() -> None:
    store = FlakyStore()
    writer = BatchWriter(store, give_up_after_s=0.0)

    def no_room(gens: Sequence[Generation], events: Sequence[Event]) -> None:
        raise StoreError("the unstored rows could not be written anywhere")

    writer.spill = no_room
    store.failing = StoreError
    writer.add_generation(make_generation(0))
    writer.flush()
    writer.add_generation(make_generation(1))
    writer.flush()
    assert writer.failure is not None and writer.spill_error is not None
    assert [g.seq for g in writer.unstored[0]] == [0, 1] and writer.pending == 2
