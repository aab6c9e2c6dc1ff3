"""One back-off per target, shared by all its workers, while it answers 429 or 503."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

START_S, MAX_S = 0.1, 10.0  # waits without Retry-After: doubled per storm window, up to MAX_S
RETRY_AFTER_MAX_S = 60.0  # a longer Retry-After is honoured up to this


class TargetBackoff:
    """When a target may be sent new requests again.

    A `rate_limited` answer opens a window in which none of the target's workers starts a
    request: as long as its `Retry-After` asks, else `START_S` doubled for every window that
    follows another without a clean answer between them (the requests in flight when a window
    opens answer inside it and do not lengthen it). A clean answer resets the doubling.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._wait_s = 0.0
        self.until = 0.0
        """Monotonic end of the open window; 0 once it is known to be over (workers look at it
        before calling `wait`, which costs a coroutine)."""
        self.storm = False
        """A window was opened since the last clean answer."""

    def rate_limited(self, retry_after_s: float | None) -> float | None:
        """Note a rate-limited answer; the seconds of the window it opens, or None when a window
        was already open."""
        now = self._clock()
        if retry_after_s is not None:
            seconds = min(max(retry_after_s, 0.0), RETRY_AFTER_MAX_S)
            if now + seconds <= self.until:
                return None
        elif now < self.until:
            return None
        else:
            self._wait_s = min(MAX_S, self._wait_s * 2 if self._wait_s else START_S)
            seconds = self._wait_s
        self.until = now + seconds
        self.storm = True
        return seconds

    def answered(self) -> None:
        """Note a clean answer: the next window starts short again."""
        self._wait_s = 0.0
        self.storm = False

    async def wait(self, stop: asyncio.Event, deadline: float) -> None:
        """Sleep while a window is open, but no longer than to `deadline` (monotonic) and not
        after `stop` is set."""
        now = self._clock()
        if self.until <= now:
            self.until = 0.0
            return
        seconds = min(self.until, deadline) - now
        if seconds > 0 and not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=seconds)
