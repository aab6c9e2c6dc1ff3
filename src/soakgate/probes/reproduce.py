"""How a replayed collapse is classified: pure counts in, one verdict out.

A stored collapse is sent again N times alone greedy and N times alone with its own sampling,
interleaved with a control prompt (a clean row of the same run), one request at a time; then N
times inside a background soak at the original concurrency. Three exact tests decide, each at
ALPHA, Bonferroni-split over the rows (or runs) it is applied to, so that a family of verdicts
claims something false at most ~3 x ALPHA of the time (`bench/bench_replay.py` simulates it):

- **input-triggered**: alone, this request collapses more often than the control prompt
  (Fisher's exact test, one-sided).
- **state-driven**: alone, the collapses of the replays and the control together come in runs
  in the server's request order (an exact Wald-Wolfowitz runs test on the sequence, too few runs),
  and the control collapsed too: the server's request count or uptime decides, not the prompt.
  One test over the whole replay, leaving out the input-triggered rows' replays (whose own
  collapses come in runs); it applies to every row that is not input-triggered.
- **only under load**: the request collapsed under load, and under load (its replays with the
  background soak) the server collapses more often than alone (Fisher, one-sided). A collapse
  seen under load no more often than alone is no evidence of load: the rate both ways is shown.
- **any input**: it collapsed again, but none of the above holds: the control prompt collapses
  alone as often, other prompts under load as often as it; the server collapses whatever it is
  sent (at 100% for a compiled program that drops an op, at 2% for a rare independent fault).
- **never**: no replay collapsed (with the exact upper bound of its rate).
- **inconclusive**: fewer than half of a phase's replays (or none of the control's) answered.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from soakgate.stats.rates import summarize_rate

PROBE_RUNS = frozenset({"replay", "replay-background"})
"""`load.probe` of the runs `soakgate replay` stores: the replayed generations and the
background soak. They are shown as a probe, never counted as units of the soak's analysis."""
INPUT_TRIGGERED = "input-triggered"
STATE_DRIVEN = "state-driven"
UNDER_LOAD = "only under load"
AS_OTHERS = "any input"
NEVER = "never"
NO_ANSWER = "inconclusive"
VERDICTS = (INPUT_TRIGGERED, STATE_DRIVEN, UNDER_LOAD, AS_OTHERS, NEVER, NO_ANSWER)
FINDINGS = frozenset({INPUT_TRIGGERED, STATE_DRIVEN, UNDER_LOAD})
"""Verdicts that tie a collapse to something (`soakgate replay` exits 1)."""
MEANING = {
    INPUT_TRIGGERED: "reproduces alone, more often than the control prompt: the input triggers it",
    STATE_DRIVEN: "collapses alone in runs of consecutive requests, the control prompt too: the "
    "server's request count or uptime decides, not the prompt",
    UNDER_LOAD: "reproduces under load, and the server collapses more under load than alone: "
    "state- or batch-dependent",
    AS_OTHERS: "collapsed again, but no more often than the control prompt alone and no more "
    "under load than alone: the server collapses whatever it is sent, at the rates shown; "
    "nothing ties it to this input, the load or the server's state",
    NEVER: "did not reproduce: transient, or rarer than the replays can show",
    NO_ANSWER: "too few replays answered to tell",
}
Row = TypeVar("Row")
ALPHA = 0.01
"""Level of each of the three tests (input, state, load), Bonferroni-split over what it is
applied to."""


@dataclass(slots=True)
class Tally:
    """Replays of one request (or the control, or the background soak) in one phase."""

    sent: int = 0
    """Requests sent."""
    collapsed: int = 0
    """Clean answers a detector flagged."""
    errors: int = 0
    """Requests that failed (never counted as a collapse or as a clean answer)."""

    @property
    def clean(self) -> int:
        """Requests that answered (the denominator)."""
        return self.sent - self.errors

    def add(self, collapsed: bool, error: bool) -> None:
        """Count one request."""
        self.sent += 1
        self.errors += error
        self.collapsed += collapsed and not error

    def plus(self, other: Tally) -> Tally:
        """Both tallies together."""
        return Tally(
            self.sent + other.sent, self.collapsed + other.collapsed, self.errors + other.errors
        )

    def answered_enough(self) -> bool:
        """At least half of what was sent answered (and something was sent)."""
        return self.sent > 0 and 2 * self.clean >= self.sent

    def short(self) -> str:
        """`2/5`, with the failed requests: a table cell."""
        return f"{self.collapsed}/{self.clean}" + (f", {self.errors} failed" if self.errors else "")

    def describe(self) -> str:
        """`2/5 (40% [5%, 85%])`, or `0/5 (<= 45%)` with its exact one-sided bound, and the
        failed requests."""
        text = f"{self.collapsed}/{self.clean}"
        if self.clean:
            rate = summarize_rate(self.collapsed, self.clean)
            if rate.upper_bound_one_sided is not None:
                text += f" (<= {rate.upper_bound_one_sided:.0%})"
            else:
                text += f" ({rate.rate:.0%} [{rate.ci_low:.0%}, {rate.ci_high:.0%}])"
        return text + (f", {self.errors} failed" if self.errors else "")

    def as_list(self) -> list[int]:
        """[collapsed, clean, errors], as stored in a `replay_verdict` event."""
        return [self.collapsed, self.clean, self.errors]


@dataclass(frozen=True, slots=True)
class Evidence:
    """What one row's verdict rests on."""

    alone: Tally
    """This request alone (greedy and sampled)."""
    control_alone: Tally
    """The control prompt alone, over the whole replay."""
    under_load: Tally
    """This request inside the background soak."""
    load_pool: Tally
    """Everything answered under load for this row's run: its rows' replays and the
    background soak."""
    alone_pool: Tally
    """Everything answered alone over the whole replay: every replay and every control."""
    state_p: float
    """The runs test's p over the replay's alone sequence (1 when it cannot apply)."""
    rows: int
    """Rows replayed (the input test is split over them)."""
    runs: int
    """Source runs replayed (the load test is split over them)."""


@dataclass(frozen=True, slots=True)
class Judgement:
    """A verdict and the tests it rests on."""

    verdict: str
    input_p: float
    load_p: float
    state_p: float
    thresholds: dict[str, float] = field(default_factory=dict)
    """The level each p had to be below (ALPHA, split)."""


def fisher_greater(a: Tally, b: Tally) -> float:
    """One-sided exact p that `a` collapses more often than `b` (1 when either is empty)."""
    if not a.clean or not b.clean:
        return 1.0
    from scipy.stats import fisher_exact

    table = [[a.collapsed, a.clean - a.collapsed], [b.collapsed, b.clean - b.collapsed]]
    return float(fisher_exact(table, alternative="greater").pvalue)


def runs_test_p(outcomes: Sequence[bool]) -> float:
    """Exact one-sided p of the Wald-Wolfowitz runs test for too few runs: how likely, among
    all orders of these collapses and clean answers, so few runs are (1 when there are no
    collapses or no clean answers). Written by hand: scipy has no runs test and statsmodels'
    is a normal approximation, poor at the few dozen outcomes a replay has."""
    n1 = sum(outcomes)
    n2 = len(outcomes) - n1
    if not n1 or not n2:
        return 1.0
    observed = 1 + sum(a != b for a, b in itertools.pairwise(outcomes))
    total = math.comb(n1 + n2, n1)
    below = sum(_runs_ways(r, n1, n2) for r in range(2, observed + 1))
    return min(1.0, below / total)


def _runs_ways(runs: int, n1: int, n2: int) -> int:
    """Orders of n1 collapses and n2 clean answers (both > 0) with exactly `runs` runs."""
    if runs < 2:
        return 0
    if runs % 2 == 0:
        k = runs // 2
        return 2 * math.comb(n1 - 1, k - 1) * math.comb(n2 - 1, k - 1)
    k = (runs - 1) // 2
    return math.comb(n1 - 1, k) * math.comb(n2 - 1, k - 1) + math.comb(n1 - 1, k - 1) * math.comb(
        n2 - 1, k
    )


def input_triggered_rows(
    alone: Mapping[Row, Tally], control: Tally, alpha: float = ALPHA
) -> set[Row]:
    """The rows (keys of `alone`) whose replays alone collapse more often than the control."""
    level = alpha / max(len(alone), 1)
    return {k for k, t in alone.items() if t.collapsed and fisher_greater(t, control) < level}


def classify(evidence: Evidence, alpha: float = ALPHA) -> Judgement:
    """The verdict of one replayed collapse and the p of each test."""
    e = evidence
    levels = {"input": alpha / max(e.rows, 1), "state": alpha, "load": alpha / max(e.runs, 1)}
    input_p = fisher_greater(e.alone, e.control_alone)
    load_p = fisher_greater(e.load_pool, e.alone_pool)
    answered = (
        e.alone.answered_enough() and e.under_load.answered_enough() and e.control_alone.clean > 0
    )

    def judged(verdict: str) -> Judgement:
        return Judgement(verdict, input_p, load_p, e.state_p, levels)

    if not answered:
        return judged(NO_ANSWER)
    if e.alone.collapsed and input_p < levels["input"]:
        return judged(INPUT_TRIGGERED)
    if e.control_alone.collapsed and e.state_p < levels["state"]:
        return judged(STATE_DRIVEN)
    if e.under_load.collapsed and load_p < levels["load"]:
        return judged(UNDER_LOAD)
    if e.alone.collapsed or e.under_load.collapsed:
        return judged(AS_OTHERS)
    return judged(NEVER)
