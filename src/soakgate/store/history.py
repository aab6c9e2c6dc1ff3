"""What came before one stored generation on its target, counted in SQL: the requests its run
sent there since the serving incarnation began, when the target was last idle, and the run of
consecutive collapses it sits in. The state collapses of a leaking or wearing server key on
(`soakgate report --collapse ID`); each query walks the run's rows in send order (`seq`, the
run's index), never the whole table into Python."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

STREAK_LIMIT = 10_000
"""Consecutive collapses counted each way at most (beyond: `at least`)."""


@dataclass(frozen=True, slots=True)
class TargetHistory:
    """The derived state of one row."""

    requests_before: int
    """Requests the run sent to the target in this incarnation before this one."""
    busy_since: float
    """Unix time the target's current busy period began (its last idle moment)."""
    collapses_before: int
    """Answered rows just before this one (in send order) that collapsed, without a clean one
    between (at most STREAK_LIMIT)."""
    collapses_after: int
    """The same just after it."""


def target_history(
    db: sqlite3.Connection, run_id: str, target: str, seq: int, incarnation: int
) -> TargetHistory:
    """The derived state of row `seq` of `run_id` on `target`."""
    (before,) = db.execute(
        "SELECT COUNT(*) FROM generations WHERE run_id=? AND target=? AND incarnation=? "
        "AND seq<?", (run_id, target, incarnation, seq),
    ).fetchone()  # fmt: skip
    (busy_since,) = db.execute(
        "SELECT MAX(started_at) FROM (SELECT seq, started_at, MAX(ended_at) OVER (ORDER BY seq "
        "ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS busy_until FROM generations "
        "WHERE run_id=? AND target=? AND seq<=?) "
        "WHERE busy_until IS NULL OR busy_until < started_at",
        (run_id, target, seq),
    ).fetchone()  # fmt: skip
    return TargetHistory(
        int(before), float(busy_since), _streak(db, run_id, target, seq, "<", "DESC"),
        _streak(db, run_id, target, seq, ">", "ASC"),
    )  # fmt: skip


def _streak(
    db: sqlite3.Connection, run_id: str, target: str, seq: int, side: str, order: str
) -> int:
    """Collapsed answered rows next to `seq` on one side, up to the first clean one."""
    rows = db.execute(
        f"SELECT collapsed FROM generations WHERE run_id=? AND target=? AND seq{side}? "
        f"AND error_class IS NULL ORDER BY seq {order} LIMIT ?",
        (run_id, target, seq, STREAK_LIMIT + 1),
    )
    count = 0
    for (collapsed,) in rows:
        if not collapsed:
            break
        count += 1
    return min(count, STREAK_LIMIT)
