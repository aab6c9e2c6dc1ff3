"""Typed records that flow through the pipeline and into the store: one row per generation."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# Error classes a failed request can be stored with. Order matters nowhere; names are stable.
ERROR_CLASSES = (
    "connection_refused",  # nothing listening / DNS failure
    "connection_reset",  # peer closed or reset the connection mid-request
    "timeout",  # no (complete) answer within the request timeout
    "http_4xx",  # server answered with a 4xx status
    "http_5xx",  # server answered with a 5xx status
    "malformed_json",  # body or SSE event was not the JSON we expect
    "truncated_stream",  # stream (or body) ended without a finish_reason
    "server_error",  # server declared an error inside a 200 response (error object / event)
    "cancelled",  # in flight when the soak was stopped (Ctrl-C / duration reached)
    "client_error",  # anything else raised in the client; detail holds the exception
    "dropped",  # the server closed the connection after the request was sent, before answering
    "oversized",  # the answer's headers or body exceeded the configured size cap
    "rate_limited",  # the server answered 429 or 503 (overloaded); Retry-After is honoured
    "response_mismatch",  # the answer is not this request's (an echoed X-Request-Id differs)
    "unexpected_choices",  # more choices than requested, or choices with a bad index
    "proxy_error",  # a proxy's or gateway's own error page (nginx's 502), not the server's answer
)
CHECKS = ("crosstalk", "invalid_structure", "inconsistent", "twin_mismatch")
"""Integrity checks a clean answer can fail, each an outcome of its own (`Generation.checks`):
`crosstalk`, an answer that carries another request's canary or a long span of another request's
prompt that its own does not explain; `invalid_structure`, an answer that breaks the JSON
schema, regex or tool calls its request asked for; `inconsistent`, an answer whose
log-probabilities or usage no correct server returns (`soakgate.checks`); `twin_mismatch`, the
second of two requests sent with the same body and seed whose answer is not the first's
(`checks.twins`)."""
UNJUDGED = "-"
"""In `Generation.checks`, `-<check>` marks an answer the check did not judge in a run that ran
it (`-invalid_structure`: a free prompt's answer, or one the budget cut); the check's rate counts
only the answers it judged."""
JUDGED = "+"
"""In `Generation.checks`, `+<check>` marks an answer a sparse check (SPARSE_CHECKS) judged and
passed: such a check judges few rows, so it marks those it judged instead of all the others."""
SPARSE_CHECKS = frozenset({"twin_mismatch"})
"""Checks whose judged rows are those marked `+<check>` (passed) or `<check>` (failed)."""
NOT_ANY_FAILURE = frozenset({"twin_mismatch"})
"""Checks left out of "any failure": a twin mismatch is a property of a pair, read against the
stack's own rate at rest (many stacks' sampled answers depend on the batch), never a failure of
one answer on its own."""


def failed_checks(checks: list[str]) -> list[str]:
    """The checks an answer failed (`Generation.checks` without its UNJUDGED and JUDGED
    marks)."""
    return [name for name in checks if not name.startswith((UNJUDGED, JUDGED))]


NOT_THE_SERVERS = ("cancelled", "client_error", "http_4xx")
"""Error classes that say nothing about the server under test: the soak stopped the request,
soakgate itself failed, or the server refused the request as invalid (the client's settings:
a prompt past the model length, an unknown model). Every other class is a failure of the
server: refused, reset or dropped connections, timeouts, 5xx, 429/503, malformed or truncated
answers, errors inside a 200, oversized, mismatched or extra answers."""


@dataclass(slots=True)
class Generation:
    """One request to one target and everything that came back; the unit row of the store."""

    run_id: str
    """The run this generation belongs to."""
    request_id: str
    """Unique id of the request; also sent to the server as the X-Request-Id header."""
    target: str
    """The unit of analysis: one server instance (one GPU), named by URL or a given name."""
    label: str
    """Configuration label of the run (e.g. `eager`, `b31-graph`)."""
    seq: int
    """Order in which requests were issued within the run (0-based, per run)."""
    prompt_id: str
    """Id of the prompt that was sent."""
    endpoint: str
    """`completions` or `chat`."""
    stream: bool
    """Whether the response was streamed (SSE)."""
    started_at: float
    """Unix time the request was sent."""
    ended_at: float
    """Unix time the response finished (or failed)."""
    ttft_s: float | None = None
    """Seconds to the first content token (streaming only)."""
    prompt_tokens: int | None = None
    """Prompt tokens from the server's usage, if reported."""
    completion_tokens: int | None = None
    """Completion tokens from the server's usage (or counted token ids / stream chunks)."""
    finish_reason: str | None = None
    """The server's finish_reason (`stop`, `length`, ...)."""
    http_status: int | None = None
    """HTTP status of the response, when one arrived."""
    error_class: str | None = None
    """None for a clean response, else one of ERROR_CLASSES."""
    error_detail: str | None = None
    """Short human detail for an error (first 300 characters)."""
    text: str | None = None
    """The generated text (None when not stored under `--store-text flagged`)."""
    text_sha256: str = ""
    """SHA-256 of the generated text, always stored."""
    token_ids: list[int] | None = None
    """Generated token ids, when the server returned them."""
    scores: dict[str, float] = field(default_factory=dict)
    """Detector name -> score (e.g. `char_run` -> longest run length)."""
    details: dict[str, Any] = field(default_factory=dict)
    """Detector name -> evidence (e.g. the repeated character)."""
    flags: list[str] = field(default_factory=list)
    """Names of the detectors that flagged this generation."""
    incarnation: int = 0
    """Which incarnation (restart count) of the target's server served the request."""
    reference_divergence: int | None = None
    """Differential check: first diverging position against the reference (-1: identical)."""
    attempts: int = 1
    """Times the request was sent: more than 1 when a retry provably never reached the server
    (a pooled connection found closed before the request was written), or when a Ray unit sends
    again a request a lost actor had sent for certain (`details["resent"]`)."""
    reference_score: float | None = None
    """Reference scoring: the generation's anomaly score under the reference (None: not scored;
    `details["reference"]` says why when it was chosen but could not be scored)."""
    suspect: bool | None = None
    """Reference scoring: True when the score is above the calibrated threshold (None: not
    scored). Independent of `collapsed`: a row can be both."""
    checks: list[str] = field(default_factory=list)
    """Names of the integrity checks (CHECKS) this clean answer failed (and `-<name>` of those
    that did not judge it, `UNJUDGED`), evidence in
    `details[name]`. Apart from `flags`: a failed check is not a collapse."""
    gateway_retries: int | None = None
    """Times a gateway between soakgate and the server said it retried the request upstream
    (`x-litellm-attempted-retries`, `x-envoy-attempt-count`; headers in `details["gateway"]`);
    None when no gateway said. A clean row with retries hides that many upstream failures."""

    @property
    def ok(self) -> bool:
        """True when the request completed without an error."""
        return self.error_class is None

    @property
    def collapsed(self) -> bool:
        """True when any detector flagged a clean response (errors are never collapses)."""
        return self.error_class is None and bool(self.flags)


@dataclass(slots=True)
class Run:
    """One soak: a label, its targets, the load spec and what was applied to score it."""

    run_id: str
    """Unique id of the run."""
    label: str
    """Configuration label."""
    targets: list[str]
    """Names of the targets (units of analysis)."""
    started_at: float
    """Unix time the run started."""
    load: dict[str, Any] = field(default_factory=dict)
    """Load spec: concurrency, max_tokens, endpoint, stream, duration, requests, sampling."""
    detectors: dict[str, Any] = field(default_factory=dict)
    """Detector configuration applied to every generation."""
    software: dict[str, Any] = field(default_factory=dict)
    """Versions: soakgate, python, and what the servers reported."""
    ended_at: float | None = None
    """Unix time the run ended (None while running or if it was killed)."""
    status: str = "running"
    """`running`, `completed`, `interrupted`."""
    plan_sha256: str | None = None
    """SHA-256 of the pre-registered plan the run follows, if any."""
    campaign: str | None = None
    """Campaign block id when the run is part of a campaign."""


@dataclass(slots=True)
class Event:
    """Something that happened during a run that is not a generation (fault, restart, telemetry)."""

    run_id: str
    """The run the event belongs to."""
    at: float
    """Unix time."""
    kind: str
    """Event kind, e.g. `engine_fault`, `restart`, `telemetry`, `look`, `note`."""
    target: str | None = None
    """The target concerned, if any."""
    data: dict[str, Any] = field(default_factory=dict)
    """Kind-specific payload."""


def sha256_text(text: str) -> str:
    """Hex SHA-256 of a text, the stable fingerprint stored for every generation."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def first_divergence(a: Sequence[object], b: Sequence[object]) -> int:
    """Where two answers part (token ids or characters; the differential check and twins):
    index of the first differing element, or -1 when identical (a length difference counts)."""
    for index, (left, right) in enumerate(zip(a, b, strict=False)):
        if left != right:
            return index
    return -1 if len(a) == len(b) else min(len(a), len(b))
