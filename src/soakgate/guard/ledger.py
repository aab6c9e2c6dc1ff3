"""Fault-window bookkeeping: which errors a dead incarnation caused, so they do not use up a
count-limited soak's request budget (they are stored as errors all the same)."""

from __future__ import annotations

from collections import defaultdict

from soakgate.records import Generation


class FaultLedger:
    """Per target: errors served by incarnations declared dead at or after their window start."""

    def __init__(self) -> None:
        self._window_start: dict[tuple[str, int], float] = {}
        self._error_ends: dict[tuple[str, int], list[float]] = defaultdict(list)
        self._credits: dict[str, int] = defaultdict(int)

    def observe(self, generation: Generation) -> None:
        """Count one stored generation (only errors matter)."""
        if generation.ok:
            return
        key = (generation.target, generation.incarnation)
        start = self._window_start.get(key)
        if start is None:
            self._error_ends[key].append(generation.ended_at)
        elif generation.ended_at >= start:
            self._credits[generation.target] += 1

    def declare_dead(self, target: str, incarnation: int, window_start: float) -> None:
        """Mark an incarnation dead from `window_start`; its errors since then become credit."""
        key = (target, incarnation)
        if key in self._window_start:
            return
        self._window_start[key] = window_start
        ends = self._error_ends.pop(key, [])
        self._credits[target] += sum(1 for end in ends if end >= window_start)

    def credit(self, target: str) -> int:
        """Extra requests the target may issue to make up for fault-window errors."""
        return self._credits.get(target, 0)
