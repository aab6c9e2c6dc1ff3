"""What a soak is given and what it returns: the load, the request-check and reference-scoring
hooks it calls, and the per-target tallies (shared by the driver, the campaign and the CLI)."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from soakgate.load.streamcheck import StreamTiming
from soakgate.prompts import Prompt, PromptPicker
from soakgate.records import JUDGED, SPARSE_CHECKS, Generation, Run, failed_checks
from soakgate.targets import OpenAIClient, Outcome, RequestSpec, TargetSpec

if TYPE_CHECKING:
    from soakgate.store import BatchWriter


class RequestCheck(Protocol):
    """A check made in a worker's own slot on the requests it chooses, supplied by the soak's
    caller (`probes.differential.Differential`: chosen requests sent greedy to the target and
    to a reference, and compared); the driver imports none of them. Opened once per soak."""

    async def open(self, targets: Sequence[TargetSpec], concurrency: int) -> OpenCheck:
        """Ready for the soak (in its event loop): connections made, references discovered."""
        ...


class AnswerCheck(Protocol):
    """A check of every request and answer, supplied by the soak's caller
    (`checks.crosstalk.Crosstalk`); the driver imports none of them."""

    def sent(self, seq: int, prompt: Prompt, same_as: int | None = None) -> Prompt:
        """Request `seq` is about to be sent: the prompt as it is to be sent (e.g. with a
        canary). `same_as`: the request repeats request `same_as` exactly (a twin: the same
        prompt as sent, its canary too)."""
        ...

    def answered(self, generation: Generation, outcome: Outcome | None = None) -> None:
        """The row of an answer, before it is stored (and what came back, where the check needs
        more than the row keeps: log-probabilities): a failed check is named in its `checks`
        with its evidence in its details."""
        ...

    def judge(self, generations: Sequence[Generation]) -> None:
        """The rows of a batch about to be scored and stored, in the order they were queued:
        a check may judge here, a batch at a time, what `answered` only noted (cheaper away
        from the network code)."""
        ...


OpenAnswerCheck = Callable[[Run, bool], AnswerCheck]
"""Opens an AnswerCheck for a run (True: a resumed run, stored before; the check keeps the
settings the run stored, and stores its own in the run's detectors)."""


class OpenCheck(Protocol):
    """A `RequestCheck` ready for one soak's requests."""

    def choose(
        self, target: str, seq: int, spec: RequestSpec, prompt: Prompt | None = None,
        request_id: str = "",
    ) -> RequestSpec | None:  # fmt: skip
        """Request `seq` of `target` (`request_id`, its `prompt` as sent) as it is to be sent
        when the check chose it, else None; asked of every request."""
        ...

    async def check(
        self, target: str, prompt: Prompt, spec: RequestSpec, request_id: str, outcome: Outcome
    ) -> tuple[int | None, dict[str, object]]:
        """After a chosen request's clean answer: its divergence (None: not compared) and what
        its row keeps of the check (`details.differential`)."""
        ...

    async def close(self) -> None:
        """The soak is over: close what `open` made."""
        ...


@dataclass(frozen=True, slots=True)
class Twin:
    """The second request of a twin pair: request `first`'s body (prompt, spec with its seed)
    sent again to the same target."""

    first: int
    """The first request's sequence number."""
    prompt: Prompt
    """The prompt the first was picked (before an answer check changed it: the same change
    is made again)."""
    spec: RequestSpec
    """The first's request, seed included."""


class TwinCheck(Protocol):
    """Twin requests (`checks.twins.Twins`), supplied by the soak's caller: the driver asks it
    which requests are a pair's first and when their twins are due, and hands it both answers;
    it imports none of it."""

    async def at_rest(self, clients: Sequence[OpenAIClient], picker: PromptPicker) -> None:
        """Before the first request: pairs sent one at a time to each target, nothing else in
        flight (the stack's own twin rate)."""
        ...

    def due(self, target: str, seq: int) -> Twin | None:
        """A twin to send as request `seq` of `target` (its first was sent long enough ago);
        asked once for every request."""
        ...

    def first(self, target: str, seq: int, prompt: Prompt, spec: RequestSpec) -> RequestSpec | None:
        """Request `seq` as a pair's first (its seeded request, its twin now pending), or None
        when it is not one."""
        ...

    async def settled(self, twin: Twin) -> None:
        """Wait until the twin's first has its row (its answer, error or cancellation)."""
        ...

    def mark(self, generation: Generation) -> None:
        """Every row, as it is made: a first's answer is kept, a twin's is compared with its
        first's and marked (`twin_mismatch` or `+twin_mismatch` in its checks)."""
        ...


OpenTwinCheck = Callable[[Run, "BatchWriter", bool], TwinCheck | None]
"""Opens the twin check for a run (True: a resumed run; the check keeps the settings the run
stored), writing its events with the writer; None: the run sends no twins."""


class GenerationScorer(Protocol):
    """A second look at chosen rows before they are stored (reference scoring, reference/):
    the driver only asks it; the row waits at most `budget_s`, with at most `backlog` rows
    waiting, and the worker goes on with its next request meanwhile."""

    budget_s: float
    backlog: int

    def selects(self, target: str, seq: int) -> bool: ...
    async def score(self, generation: Generation, outcome: Outcome, prompt: Prompt) -> None: ...
    def unscored(self, generation: Generation, reason: str) -> None: ...


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """How much load, for how long."""

    concurrency: int = 8
    """Requests kept in flight per target."""
    requests: int | None = None
    """Requests per target (None: until the duration ends)."""
    duration_s: float | None = None
    """Seconds to soak (None: until the request count is reached)."""
    grace_s: float = 30.0
    """At the end, how long in-flight requests may finish before they are cancelled."""
    rate: float | None = None
    """Open-loop arrivals per second per target (`load.arrivals`); None: closed loop, a new
    request the moment one finishes. `concurrency` is then the cap on requests in flight."""
    arrivals: str = "poisson"
    """The arrival process with `rate`: `poisson` or `constant`."""
    ramp_s: float | None = None
    """Seconds over which the load rises from nothing to full (`--ramp`): with `rate`, the
    arrival rate rises linearly; in the closed loop, the workers start one after another."""


UNREACHED = frozenset({"connection_refused", "connection_reset", "dropped", "timeout"})
"""Error classes that say the server did not answer at all (`soakgate_target_up` 0)."""
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 60.0, 120.0, 300.0)
"""Upper bounds (seconds) of the latency histograms served with --metrics-port (+Inf after)."""


@dataclass(slots=True)
class Buckets:
    """A latency histogram: observations per LATENCY_BUCKETS bucket (the last: above them all),
    their count and their sum."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    total: float = 0.0

    def observe(self, seconds: float) -> None:
        """Add one observation."""
        self.counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.total += seconds

    def add(self, other: Buckets) -> None:
        """Add another histogram's observations."""
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.total += other.total

    def cumulative(self) -> list[tuple[str, int]]:
        """Prometheus's buckets: (upper bound, observations at or below it), +Inf last."""
        found, running = [], 0
        for bound, count in zip((*LATENCY_BUCKETS, float("inf")), self.counts, strict=True):
            running += count
            found.append(("+Inf" if bound == float("inf") else f"{bound:g}", running))
        return found


@dataclass(slots=True)
class TargetTally:
    """Running counts for one target, for progress and the final table."""

    target: str
    requests: int = 0
    collapses: int = 0
    errors: int = 0
    tokens: int = 0
    clean_tokens: int = 0
    in_flight: int = 0
    errors_by_class: dict[str, int] = field(default_factory=dict)
    label: str = ""
    """The label this target's rows carry in this soak."""
    last_collapse_at: float | None = None
    """When the last collapsed answer ended (Unix time)."""
    scored: int = 0
    """Rows scored under the reference."""
    suspects: int = 0
    """Scored rows the reference flagged `suspect`."""
    unscored: int = 0
    """Rows chosen for reference scoring that could not be scored."""
    shift_judged: int = 0
    """Scored rows judged against the calibration's 90th percentile (`above_p90`)."""
    shifted: int = 0
    """Of them, rows above it (one in ten of a reference-like unit's)."""
    checks: dict[str, int] = field(default_factory=dict)
    """Integrity check -> answered rows that failed it (`records.CHECKS`)."""
    judged: dict[str, int] = field(default_factory=dict)
    """Sparse check (`records.SPARSE_CHECKS`) -> answered rows it judged."""
    streams: StreamTiming = field(default_factory=StreamTiming)
    """Whether its streamed answers come whole (a buffering proxy: `load.streamcheck`)."""
    last_at: float | None = None
    """When the last counted generation ended, error or not (Unix time)."""
    latency: Buckets = field(default_factory=Buckets)
    """End-to-end latency of its clean generations."""
    ttft: Buckets = field(default_factory=Buckets)
    """Time to first token of its clean streamed generations."""
    up: bool | None = None
    """Whether its last counted request reached the server (no connection error or timeout);
    None before the first."""
    backoff_s: float = 0.0
    """Seconds its workers held back: after connection errors, and in rate-limit windows."""
    backoffs: int = 0
    """Times a worker held back."""

    def count(self, generation: Generation) -> None:
        """Add one finished generation."""
        self.requests += 1
        self.last_at = generation.ended_at
        self.up = generation.error_class not in UNREACHED
        self.streams.count(generation)
        if not generation.ok:
            self.errors += 1
            key = generation.error_class or "unknown"
            self.errors_by_class[key] = self.errors_by_class.get(key, 0) + 1
            return
        tokens = generation.completion_tokens or 0
        self.tokens += tokens
        self.latency.observe(generation.ended_at - generation.started_at)
        if generation.stream and generation.ttft_s is not None:
            self.ttft.observe(generation.ttft_s)
        for name in failed_checks(generation.checks):
            self.checks[name] = self.checks.get(name, 0) + 1
        for name in generation.checks:
            judged = name.removeprefix(JUDGED)
            if judged in SPARSE_CHECKS:
                self.judged[judged] = self.judged.get(judged, 0) + 1
        if generation.suspect is not None:
            self.scored += 1
            self.suspects += generation.suspect
            above = generation.details["reference"].get("above_p90")
            if above is not None:
                self.shift_judged += 1
                self.shifted += above
        elif "reference" in generation.details:
            self.unscored += 1
        if generation.collapsed:
            self.collapses += 1
            self.last_collapse_at = generation.ended_at
        else:
            self.clean_tokens += tokens


@dataclass(slots=True)
class SoakResult:
    """What a soak did: tallies per target and how long it ran."""

    run: Run
    tallies: dict[str, TargetTally]
    elapsed_s: float
    stopped_by: str
    warnings: list[str] = field(default_factory=list)
    """What the soak noticed while it ran (also stored as events), one line each."""
