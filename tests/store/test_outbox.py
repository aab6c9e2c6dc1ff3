"""The Ray unit's outbox store counts what passes through it as the real database does, and
hands every row over exactly once."""

from __future__ import annotations

from pathlib import Path

from tests.store.test_stores import make_generation

from soakgate.store import SqliteStore
from soakgate.store.base import TargetCounts
from soakgate.store.outbox import OutboxStore

BASE = 3 * 10**12


def test_outbox_counts_equal_the_databases_and_rows_are_taken_once(tmp_path: Path) -> None:
    rows = [
        make_generation(BASE + i, target="cuda:3", flags=["char_run"] if i % 3 == 0 else [], completion_tokens=i,
                        error_class="timeout" if i % 5 == 4 else None)
        for i in range(20)
    ]  # fmt: skip
    outbox = OutboxStore("cuda:3", {}, BASE)
    assert outbox.counts("r1") == {"cuda:3": TargetCounts(0, 0, 0, 0, BASE)}  # numbers from BASE
    real = SqliteStore(tmp_path / "runs.sqlite")
    try:
        for batch in (rows[:7], rows[7:]):
            outbox.add(batch)
            real.add(batch)
        assert outbox.counts("r1") == real.counts("r1")
    finally:
        real.close()
    taken, _ = outbox.take()
    assert [g.request_id for g in taken] == [g.request_id for g in rows]
    assert outbox.take() == ([], [])


def test_a_continued_unit_counts_on_from_what_the_driver_had_stored() -> None:
    stored = {"cuda:3": TargetCounts(5, 1, 2, 40, 0)}
    outbox = OutboxStore("cuda:3", stored, BASE + 5)
    outbox.add([make_generation(BASE + 5, target="cuda:3", completion_tokens=4)])
    assert outbox.counts("r1") == {"cuda:3": TargetCounts(6, 1, 2, 44, BASE + 6)}
