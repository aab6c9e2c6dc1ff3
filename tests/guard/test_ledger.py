"""Fault-window credit: errors of a dead incarnation since its window start, late or not."""

from __future__ import annotations

from soakgate.guard.ledger import FaultLedger
from soakgate.records import Generation
from soakgate.store import MemoryStore, ObservingWriter


def _row(target: str, incarnation: int, ended: float, error: str | None) -> Generation:
    return Generation(
        run_id="r", request_id=f"{target}-{incarnation}-{ended}-{error}", target=target,
        label="x", seq=0, prompt_id="p", endpoint="completions", stream=True,
        started_at=ended - 0.1, ended_at=ended, error_class=error, incarnation=incarnation,
    )  # fmt: skip


def test_only_errors_of_dead_incarnations_inside_the_window_are_credited() -> None:
    ledger = FaultLedger()
    ledger.observe(_row("a", 0, 10.0, "http_5xx"))  # before the window: a finding, no credit
    ledger.observe(_row("a", 0, 21.0, "connection_reset"))  # in flight at the fault
    ledger.observe(_row("a", 0, 22.0, None))  # clean rows never count
    ledger.observe(_row("b", 0, 21.0, "connection_refused"))  # other target, alive
    assert ledger.credit("a") == 0
    ledger.declare_dead("a", 0, window_start=20.0)
    assert ledger.credit("a") == 1
    ledger.observe(_row("a", 0, 23.0, "connection_refused"))  # late arrival, still credited
    ledger.observe(_row("a", 1, 24.0, "connection_refused"))  # new incarnation: not credited
    ledger.declare_dead("a", 0, window_start=0.0)  # declaring twice changes nothing
    assert (ledger.credit("a"), ledger.credit("b")) == (2, 0)


def test_observing_writer_shows_rows_to_the_ledger_and_stores_them() -> None:
    store = MemoryStore()
    ledger = FaultLedger()
    ledger.declare_dead("a", 0, 0.0)
    writer = ObservingWriter(store, ledger.observe, interval_s=0)
    writer.add_generation(_row("a", 0, 1.0, "connection_reset"))
    writer.flush()
    assert ledger.credit("a") == 1
    assert len(list(store.generations("r"))) == 1
