"""One sweeping timer for every request in flight, instead of a loop timer per request."""

from __future__ import annotations

import asyncio
import time
from typing import Any

Task = asyncio.Task[Any]


class Deadlines:
    """Cancels tasks that outlive their deadline; checked every `resolution_s`.

    `asyncio.timeout` schedules and cancels a loop timer per request, measured at 9% of the
    client's own instructions per request (BENCHMARKS.md); here a request costs two dict
    operations and one sweeping task serves them all, at the price of a timeout firing up to
    `resolution_s` late. The sweeper exists only while some request is armed.
    """

    def __init__(self, resolution_s: float = 0.1) -> None:
        self.resolution_s = resolution_s
        self._due: dict[Task, float] = {}
        self._expired: set[Task] = set()
        self._sweeper: Task | None = None

    def arm(self, task: Task, seconds: float) -> None:
        """Watch `task`: cancel it if it is still armed `seconds` from now."""
        self._due[task] = time.monotonic() + seconds
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    def disarm(self, task: Task) -> bool:
        """Stop watching `task`; True when this watchdog had cancelled it (its time ran out).

        The caller then owes the task an `uncancel()`, as `asyncio.timeout` does for its own.
        """
        self._due.pop(task, None)
        if task in self._expired:
            self._expired.discard(task)
            return True
        return False

    def expired(self, task: Task) -> bool:
        """True once the sweeper has cancelled `task` (until it is disarmed)."""
        return task in self._expired

    async def _sweep(self) -> None:
        try:
            while self._due:
                await asyncio.sleep(self.resolution_s)
                now = time.monotonic()
                late = [task for task, due in self._due.items() if due <= now]
                for task in late:
                    if task not in self._expired:
                        self._expired.add(task)
                        task.cancel()
        finally:
            self._sweeper = None
