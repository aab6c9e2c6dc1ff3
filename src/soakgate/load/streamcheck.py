"""Notice a stream that arrives whole: when a streamed answer's first token comes when the whole
answer does, something between soakgate and the server (a proxy or gateway that buffers or
compresses the stream) is holding it back, and time to first token is not the server's.

Behind HAProxy's defaults and a compressing proxy, time to first token equalled the whole
answer's time (69-166 ms against 3-31 ms direct), and nothing said so. Pure counting over rows;
the soak's runner turns a verdict into a `stream_buffered` event and a `warning:` line.
"""

from __future__ import annotations

from dataclasses import dataclass

from soakgate.records import Generation

MIN_TOKENS = 8
"""Answers shorter than this are not judged (a few tokens may well come in one piece)."""
MIN_SECONDS = 0.05
"""Nor answers faster than this: a fast server may send a short answer in one write."""
WHOLE_SHARE = 0.9
"""An answer came whole when its first token took this share of its time or more."""
MIN_JUDGED = 20
"""Answers judged before a target's streams are called buffered..."""
BUFFERED_SHARE = 0.9
"""...and the share of them that must have come whole."""


def judge(generation: Generation) -> bool | None:
    """True when a streamed clean answer came whole (first token at the end), False when it
    did not, None when it cannot tell (not streamed, an error, too short or too fast)."""
    if not generation.stream or not generation.ok or generation.ttft_s is None:
        return None
    seconds = generation.ended_at - generation.started_at
    if (generation.completion_tokens or 0) < MIN_TOKENS or seconds < MIN_SECONDS:
        return None
    return generation.ttft_s >= WHOLE_SHARE * seconds


@dataclass(slots=True)
class StreamTiming:
    """One target's judged streams, and whether it has been called buffered yet."""

    judged: int = 0
    whole: int = 0
    ttft_s: float = 0.0
    """Time to first token summed over the judged answers."""
    seconds: float = 0.0
    """Whole-answer time summed over them."""
    warned: bool = False

    def count(self, generation: Generation) -> None:
        verdict = judge(generation)
        if verdict is None:
            return
        self.judged += 1
        self.whole += verdict
        self.ttft_s += generation.ttft_s or 0.0
        self.seconds += generation.ended_at - generation.started_at

    def warning(self, target: str) -> str | None:
        """The warning, the first time the target's streams look buffered; else None."""
        if self.warned or self.judged < MIN_JUDGED or self.whole < BUFFERED_SHARE * self.judged:
            return None
        self.warned = True
        return (
            f"{target}: in {self.whole} of {self.judged} streamed answers the first token came "
            f"with the whole answer (mean time to first token {self.ttft_s / self.judged:.3f} s "
            f"of {self.seconds / self.judged:.3f} s): a proxy or gateway between soakgate and "
            "the server may buffer or compress the stream, and time to first token is then not "
            "the server's"
        )
