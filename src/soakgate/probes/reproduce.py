"""How a replayed collapse is classified: pure counts in, one verdict out.

A stored collapse is sent again N times alone (greedy, and with its own sampling settings), then
N times inside a background soak at the original concurrency. If it collapses again alone, the
input triggers it whatever the load; if only under load, it depends on the server's state or the
batch it shares; if never, it was transient (or rarer than N replays can show: the counts and
their exact upper bounds are shown with the verdict, never the verdict alone).
"""

from __future__ import annotations

from dataclasses import dataclass

from soakgate.stats.rates import summarize_rate

PROBE_RUNS = frozenset({"replay", "replay-background"})
"""`load.probe` of the runs `soakgate replay` stores: the replayed generations and the
background soak. They are shown as a probe, never counted as units of the soak's analysis."""
INPUT_TRIGGERED = "input-triggered"
UNDER_LOAD = "only under load"
NEVER = "never"
NO_ANSWER = "inconclusive"
VERDICTS = (INPUT_TRIGGERED, UNDER_LOAD, NEVER, NO_ANSWER)
MEANING = {
    INPUT_TRIGGERED: "reproduces alone: the input triggers it",
    UNDER_LOAD: "reproduces only inside the soak: state- or batch-dependent",
    NEVER: "did not reproduce: transient, or rarer than the replays can show",
    NO_ANSWER: "too few replays answered cleanly to tell",
}


@dataclass(slots=True)
class Tally:
    """Replays of one request in one phase."""

    sent: int = 0
    """Replays sent."""
    collapsed: int = 0
    """Clean answers a detector flagged."""
    errors: int = 0
    """Replays that failed (never counted as a collapse or as a clean answer)."""

    @property
    def clean(self) -> int:
        """Replays that answered (the denominator)."""
        return self.sent - self.errors

    def add(self, collapsed: bool, error: bool) -> None:
        """Count one replay."""
        self.sent += 1
        self.errors += error
        self.collapsed += collapsed and not error

    def describe(self) -> str:
        """`2/5`, with the failed replays, or `0/5 (rate <= 45%)` with its exact one-sided bound."""
        text = f"{self.collapsed}/{self.clean}"
        if self.clean and not self.collapsed:
            bound = summarize_rate(0, self.clean).upper_bound_one_sided
            text += f" (<= {bound:.0%})"
        return text + (f", {self.errors} failed" if self.errors else "")

    def as_list(self) -> list[int]:
        """[collapsed, clean, errors], as stored in a `replay_verdict` event."""
        return [self.collapsed, self.clean, self.errors]


def classify(alone: Tally, under_load: Tally) -> str:
    """The verdict of one replayed collapse from its alone and under-load replays."""
    if alone.collapsed:
        return INPUT_TRIGGERED
    if under_load.collapsed:
        return UNDER_LOAD
    if not alone.clean or not under_load.clean:
        return NO_ANSWER
    return NEVER
