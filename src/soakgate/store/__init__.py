"""Durable storage of runs, generations, events and the plan ledger (SQLite + in-memory twin)."""

from soakgate.store.base import LedgerEntry, Store, TargetCounts
from soakgate.store.batch import BatchWriter, ObservingWriter
from soakgate.store.memory import MemoryStore
from soakgate.store.sqlite import SqliteStore, open_analysis, open_store

__all__ = [
    "BatchWriter",
    "LedgerEntry",
    "MemoryStore",
    "ObservingWriter",
    "SqliteStore",
    "Store",
    "TargetCounts",
    "open_analysis",
    "open_store",
]
