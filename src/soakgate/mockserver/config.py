"""Configuration of the mock server: one dataclass, and the command-line flags that fill it."""

from __future__ import annotations

import argparse
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from soakgate.errors import UsageError
from soakgate.mockserver.knobs import KnobRule, collect_knobs, parse_rule

COLLAPSE_KINDS = ("bang_run", "word_loop", "empty")
FAULT_KINDS = ("http_500", "reset", "stall", "malformed_json", "truncated_stream", "server_error")
QUIRKS = ("no-done", "interrupt-streams", "chat-logprobs", "no-models", "buffered-stream")
DEFAULT_DIE_MESSAGE = "RuntimeError: UR_RESULT_ERROR_DEVICE_LOST: device lost"


@dataclass(slots=True)
class MockConfig:
    """Every knob of the mock server; the CLI flags map one to one onto these fields."""

    host: str = "127.0.0.1"
    """Interface to listen on (loopback by default)."""
    port: int = 0
    """Port to listen on; 0 picks a free one (announced on the readiness line)."""
    tls_cert: Path | None = None
    """Serve https with this PEM certificate chain (and `tls_key`); None: plain http."""
    tls_key: Path | None = None
    """The certificate's private key, when not in its file."""
    tls_client_ca: Path | None = None
    """Ask every client for a certificate signed by these authorities (mutual TLS)."""
    seed: int = 0
    """Server seed: drives injection decisions and the output of sampled (temperature > 0)
    requests that carry no `seed` of their own."""
    ignore_seeds: bool = False
    """Answer a sampled request by its request id even when it carries a `seed` (a stack that
    does not honour seeds); by default such a request is answered by (prompt, seed,
    temperature, top_p, choice), the same body the same answer."""
    model_name: str = "soakgate-mock"
    """Model id reported by /v1/models and in responses."""
    max_model_len: int = 32768
    """Context length (prompt + max_tokens) advertised at /v1/models and enforced like vLLM:
    a longer request is answered HTTP 400."""
    max_logprobs: int = 20
    """Most top alternatives a request may ask for (`prompt_logprobs`), vLLM's `--max-logprobs`:
    more is answered HTTP 400."""
    tokens_per_s: float = 0.0
    """Per-request generation pace; 0 = as fast as possible."""
    latency_ms: float = 0.0
    """Delay before the first token."""
    output_tokens: int | None = None
    """Fixed output length; None = the request's max_tokens."""
    stop_rate: float = 0.0
    """Probability that an output stops early with finish_reason `stop` (unless ignore_eos)."""
    saturation: float = 0.0
    """Concurrency C at which total throughput saturates (pace * min(1, C/in_flight)); 0 = off."""
    ground_truth: Path | None = None
    """JSONL file with one line per generation request: what was injected."""
    collapse_rate: float = 0.0
    """Collapse probability per request in the clean state."""
    burst_enter: float = 0.0
    """Per-request probability of entering the burst state."""
    burst_exit: float = 0.1
    """Per-request probability of leaving the burst state."""
    burst_collapse_rate: float = 0.5
    """Collapse probability per request while in the burst state."""
    burst_min_in_flight: int = 0
    """Bursts need load: with fewer requests in flight (this one included) the model is kept
    in the clean state, so collapses depend on the load, not on the prompt (0: off)."""
    state_collapse: tuple[int, int] | None = None
    """(W, P): the W requests of every P the server receives collapse, counted from its start
    (a collapse that follows the server's request count: neither the input nor the load)."""
    collapse_kinds: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(COLLAPSE_KINDS, 1.0)
    )
    """Collapse kind -> relative weight."""
    knobs: dict[str, str] = field(default_factory=dict)
    """The configuration the server was started with, as knob name -> value (`--knobs`,
    `--knob`, `$NAME` from `SOAKGATE_KNOB_NAME`): what `knob_collapse` rules look at."""
    knob_collapse: tuple[KnobRule, ...] = ()
    """Rules that raise the collapse rate when the knobs match: each request collapses with
    probability at least the largest matching rule's rate (not under `state_collapse`)."""
    fault_rates: dict[str, float] = field(default_factory=dict)
    """Fault kind -> probability per request."""
    stall_s: float = 30.0
    """How long a `stall` fault sleeps before answering."""
    perturb_rate: float = 0.0
    """Fraction of clean requests with a few ordinary tokens replaced (differential check)."""
    perturb_max_tokens: int = 3
    """Most tokens replaced in one perturbed request (at least one)."""
    perturb_from: int = 0
    """Perturb only tokens at this output position or later (late divergence, as ordinary
    batching noise in a non-batch-invariant stack gives; 0: anywhere)."""
    fluent_rate: float = 0.0
    """Fraction of clean requests with fluent corruption: a few word tokens replaced by ordinary
    words the mock's model finds unlikely (what reference scoring must catch)."""
    fluent_max_tokens: int = 3
    """Most tokens replaced in one fluently corrupted request (at least one)."""
    crosstalk_rate: float = 0.0
    """Fraction of answers that carry the tail of another recent request's prompt (its last
    words, its canary included) in their middle: a leak between requests, logged with the
    request it came from (`crosstalk` in the ground truth)."""
    invalid_structure_rate: float = 0.0
    """Fraction of structured answers (a JSON schema, a regex or tools asked for) made invalid
    in one named way: a JSON document truncated, a value of the wrong type, a required property
    missing, a property not allowed, a stray character; a string that misses the regex; tool
    arguments that break their schema, or a tool that does not exist. Each is checked to be
    invalid before it is sent, and named in the ground truth (`invalid_structure`)."""
    invalid_structure_after_in_flight: int = 0
    """Invalid structure only while at least this many requests are in flight (this one
    included): schema violations under concurrency (0: at any load)."""
    inconsistent_rate: float = 0.0
    """Fraction of free-text answers that carry log-probabilities or usage given one impossible
    number (the `inconsistent` check's positive control): a sampled token's log-probability NaN,
    -Infinity or positive, one position's alternatives out of order or summing above 1, a greedy
    answer's token below another alternative, or usage.completion_tokens 3 too many; the text
    is untouched, and the kind and position are in the ground truth (`inconsistent`)."""
    seed_drift_rate: float = 0.0
    """Fraction of free-text answers to requests that carry a `seed` (sampled or greedy) that
    drift: from a drawn output position p on, the first choice's tokens differ from the seeded
    answer's (the token at p in id and text), what a stack that is not batch invariant
    answers. Structured answers and collapsed or faulted ones never drift; other corruptions
    decided for the answer apply on top. p is in the ground truth (`seed_drift`)."""
    seed_drift_after_in_flight: int = 0
    """Seed drift only while at least this many requests are in flight (this one included):
    drift under concurrency (0: at any load)."""
    shift_rate: float = 0.0
    """Fraction of clean requests whose every token is drawn from a flattened distribution (each
    likely next token's probability raised to 1/shift_temperature, renormalised): fluent text,
    every token a little less likely under the model (a scaled or lost sublayer's signature)."""
    shift_temperature: float = 2.0
    """How flat the shifted requests' distribution is (1: the model's own)."""
    corrupt_at_in_flight: int = 0
    """State corruption (the control for the release gate): a request that arrives with at least
    this many requests in flight (itself included) may corrupt the server's state, after which
    every answer is garbage with HTTP 200, until the process crashes and is restarted (0: off)."""
    corrupt_rate: float = 1.0
    """Probability that such an arrival corrupts the state."""
    corrupt_crash_rate: float = 0.0
    """While corrupt, probability per arriving request that the process dies of SIGSEGV."""
    die_after: int | None = None
    """Exit with code 1 when generation request number die_after + 1 arrives."""
    die_message: str = DEFAULT_DIE_MESSAGE
    """Printed to stderr before dying."""
    die_once_file: Path | None = None
    """Only die if this file does not exist; it is created before dying."""
    quirks: frozenset[str] = frozenset()
    """Behaviours of real servers to reproduce (see QUIRKS)."""
    spec_decode: bool = False
    """Expose speculative-decoding counters in /metrics."""
    spec_accept: float = 0.39
    """Draft acceptance rate below spec_collapse_at requests in flight."""
    spec_accept_saturated: float = 0.10
    """Draft acceptance rate at or above spec_collapse_at requests in flight."""
    spec_collapse_at: int = 48
    """In-flight count at which acceptance falls."""

    def __post_init__(self) -> None:
        _check_probabilities(
            {
                "--stop-rate": self.stop_rate,
                "--collapse-rate": self.collapse_rate,
                "--burst-enter": self.burst_enter,
                "--burst-exit": self.burst_exit,
                "--burst-collapse-rate": self.burst_collapse_rate,
                "--perturb-rate": self.perturb_rate,
                "--fluent-rate": self.fluent_rate,
                "--shift-rate": self.shift_rate,
                "--crosstalk-rate": self.crosstalk_rate,
                "--invalid-structure-rate": self.invalid_structure_rate,
                "--inconsistent-rate": self.inconsistent_rate,
                "--seed-drift-rate": self.seed_drift_rate,
                "--spec-accept": self.spec_accept,
                "--spec-accept-saturated": self.spec_accept_saturated,
                "--corrupt-rate": self.corrupt_rate,
                "--corrupt-crash-rate": self.corrupt_crash_rate,
            }
        )
        _check_nonnegative(
            {
                "--tokens-per-s": self.tokens_per_s,
                "--latency-ms": self.latency_ms,
                "--saturation": self.saturation,
                "--stall-s": self.stall_s,
            }
        )
        if not 0 <= self.port <= 65535:
            raise UsageError(f"--port must be 0..65535, got {self.port}")
        if self.invalid_structure_after_in_flight < 0:
            raise UsageError(
                "--invalid-structure-after-in-flight must be >= 0, "
                f"got {self.invalid_structure_after_in_flight}"
            )
        if self.seed_drift_after_in_flight < 0:
            raise UsageError(
                f"--seed-drift-after-in-flight must be >= 0, got {self.seed_drift_after_in_flight}"
            )
        if self.burst_min_in_flight < 0:
            raise UsageError(f"--burst-min-in-flight must be >= 0, got {self.burst_min_in_flight}")
        if self.max_model_len < 1:
            raise UsageError(f"--max-model-len must be >= 1, got {self.max_model_len}")
        if self.output_tokens is not None and self.output_tokens < 1:
            raise UsageError(f"--output-tokens must be >= 1, got {self.output_tokens}")
        if self.corrupt_at_in_flight < 0:
            raise UsageError(
                f"--corrupt-at-in-flight must be >= 0, got {self.corrupt_at_in_flight}"
            )
        if self.die_after is not None and self.die_after < 0:
            raise UsageError(f"--die-after must be >= 0, got {self.die_after}")
        if self.perturb_from < 0:
            raise UsageError(f"--perturb-from must be >= 0, got {self.perturb_from}")
        if self.perturb_max_tokens < 1:
            raise UsageError("--perturb-max-tokens must be >= 1")
        if self.fluent_max_tokens < 1:
            raise UsageError("--fluent-max-tokens must be >= 1")
        if not self.shift_temperature > 0:
            raise UsageError(f"--shift-temperature must be > 0, got {self.shift_temperature}")
        if sum(self.fault_rates.values()) > 1.0 + 1e-9:
            raise UsageError("--fault-rate: the rates add up to more than 1")
        if any(not 0.0 <= rule.rate <= 1.0 for rule in self.knob_collapse):
            raise UsageError("--knob-collapse: rates must be between 0 and 1")
        unknown = set(self.quirks) - set(QUIRKS)
        if unknown:
            raise UsageError(f"--quirk: unknown {sorted(unknown)}; known: {', '.join(QUIRKS)}")


def _check_probabilities(values: dict[str, float]) -> None:
    """Raise UsageError naming the first flag whose value is not in [0, 1]."""
    for flag, value in values.items():
        if not 0.0 <= value <= 1.0:
            raise UsageError(f"{flag} must be between 0 and 1, got {value}")


def _check_nonnegative(values: dict[str, float]) -> None:
    """Raise UsageError naming the first flag whose value is negative."""
    for flag, value in values.items():
        if value < 0:
            raise UsageError(f"{flag} must be >= 0, got {value}")


def parse_weights(text: str, known: tuple[str, ...], flag: str, default: float) -> dict[str, float]:
    """Parse `a,b=0.5,c` into {name: value}; a bare name gets `default`."""
    weights: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, value = item.partition("=")
        name = name.strip()
        if name not in known:
            raise UsageError(f"{flag}: unknown {name!r}; known: {', '.join(known)}")
        try:
            weights[name] = float(value) if value else default
        except ValueError:
            raise UsageError(f"{flag}: {value!r} is not a number") from None
        if not 0.0 <= weights[name] <= (1.0 if flag == "--fault-rate" else float("inf")):
            raise UsageError(f"{flag}: {name}={value} is out of range")
    return weights


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the mock server's flags (for `soakgate mock-server` and `-m soakgate.mockserver`)."""
    d = MockConfig()
    add = parser.add_argument
    add("--host", default=d.host, help="interface to listen on")
    add("--port", type=int, default=d.port, help="port; 0 picks a free one")
    add("--tls-cert", type=Path, metavar="PEM", help="serve https with this certificate chain")
    add("--tls-key", type=Path, metavar="PEM", help="its private key, if not in --tls-cert")
    add(
        "--tls-client-ca", type=Path, metavar="PEM",
        help="with --tls-cert: require client certificates signed by these authorities",
    )  # fmt: skip
    add("--seed", type=int, default=d.seed, help="server seed (injection decisions, sampling)")
    add(
        "--seed-text", metavar="TEXT",
        help="instead of --seed: the seed is the CRC-32 of TEXT, e.g. a campaign's {log_dir}, so "
        "every block's server draws afresh and a rerun draws the same",
    )  # fmt: skip
    add(
        "--ignore-seeds", action="store_true",
        help="answer sampled requests by request id even when they carry a seed (a stack that "
        "does not honour seeds)",
    )  # fmt: skip
    add("--model-name", default=d.model_name, help="model id to report")
    add(
        "--max-model-len", type=int, default=d.max_model_len,
        help="context length; a longer prompt + max_tokens is answered HTTP 400, like vLLM",
    )  # fmt: skip
    add(
        "--max-logprobs", type=int, default=d.max_logprobs,
        help="most prompt_logprobs alternatives a request may ask for (more: HTTP 400, as vLLM)",
    )  # fmt: skip
    add("--tokens-per-s", type=float, default=d.tokens_per_s, help="per-request pace; 0 = max")
    add("--latency-ms", type=float, default=d.latency_ms, help="delay before the first token")
    add("--output-tokens", type=int, default=None, help="fixed output length (none: max_tokens)")
    add("--stop-rate", type=float, default=d.stop_rate, help="probability of an early `stop`")
    add(
        "--saturation",
        type=float,
        default=d.saturation,
        help="concurrency where throughput saturates",
    )
    add("--ground-truth", type=Path, default=None, help="JSONL log of what was injected")
    add(
        "--collapse-rate",
        type=float,
        default=d.collapse_rate,
        help="collapse probability (clean state)",
    )
    add("--burst-enter", type=float, default=d.burst_enter, help="P(enter burst) per request")
    add("--burst-exit", type=float, default=d.burst_exit, help="P(leave burst) per request")
    add(
        "--burst-collapse-rate",
        type=float,
        default=d.burst_collapse_rate,
        help="collapse P in burst",
    )
    add(
        "--burst-min-in-flight",
        type=int,
        default=d.burst_min_in_flight,
        help="bursts only with at least this many requests in flight (0: any load)",
    )
    add(
        "--state-collapse", metavar="W:P", default=None,
        help="the W requests of every P the server receives collapse, counted from its start",
    )  # fmt: skip
    add(
        "--collapse-kinds", default=",".join(COLLAPSE_KINDS), help="kinds[=weight], comma separated"
    )
    add(
        "--knobs", metavar="JSON", default=None,
        help='configuration as a JSON object, flattened to dotted knobs: {"a":{"b":true}} sets '
        "a.b=true (strings as they are, other values as compact JSON)",
    )  # fmt: skip
    add(
        "--knob", metavar="NAME=VALUE", action="append", default=[],
        help="a knob (repeatable; wins over --knobs); each environment variable "
        "SOAKGATE_KNOB_<NAME> is knob $<NAME>",
    )  # fmt: skip
    add(
        "--knob-collapse", metavar="RULE", action="append", default=[],
        help="KEY=VALUE[&KEY=VALUE...]@RATE (repeatable): while every KEY's knob equals VALUE, "
        "requests collapse with the largest matching RATE (at least --collapse-rate)",
    )  # fmt: skip
    add("--fault-rate", default="", help="NAME=RATE[,NAME=RATE...] over " + ",".join(FAULT_KINDS))
    add("--stall-s", type=float, default=d.stall_s, help="sleep of a `stall` fault, s")
    add("--perturb-rate", type=float, default=d.perturb_rate, help="fraction of perturbed outputs")
    add(
        "--perturb-max-tokens", type=int, default=d.perturb_max_tokens, help="most tokens perturbed"
    )
    add("--perturb-from", type=int, default=d.perturb_from,
        help="perturb only output positions from this one on (0: anywhere)")  # fmt: skip
    add(
        "--fluent-rate", type=float, default=d.fluent_rate,
        help="fraction of outputs with a few words replaced by words the model finds unlikely",
    )  # fmt: skip
    add(
        "--fluent-max-tokens", type=int, default=d.fluent_max_tokens,
        help="most tokens replaced by fluent corruption",
    )  # fmt: skip
    add(
        "--shift-rate", type=float, default=d.shift_rate,
        help="fraction of outputs drawn whole from a flattened distribution (fluent, every token "
        "a little less likely)",
    )  # fmt: skip
    add(
        "--crosstalk-rate", type=float, default=d.crosstalk_rate,
        help="fraction of answers that carry the last words of another recent request's prompt "
        "(a leak between requests; the source is in the ground truth)",
    )  # fmt: skip
    add(
        "--invalid-structure-rate", type=float, default=d.invalid_structure_rate,
        help="fraction of structured answers (JSON schema, regex, tools) made invalid in one "
        "named way, checked to be invalid (the kind is in the ground truth)",
    )  # fmt: skip
    add(
        "--invalid-structure-after-in-flight", type=int,
        default=d.invalid_structure_after_in_flight, metavar="N",
        help="invalid structure only while at least N requests are in flight, this one included "
        "(0: at any load)",
    )  # fmt: skip
    add(
        "--inconsistent-rate", type=float, default=d.inconsistent_rate,
        help="fraction of answers with log-probabilities or usage given one impossible number "
        "(NaN, -Infinity, positive, unsorted, summing above 1, greedy not top, usage off by 3; "
        "the kind and position are in the ground truth)",
    )  # fmt: skip
    add(
        "--seed-drift-rate", type=float, default=d.seed_drift_rate,
        help="fraction of answers to requests with a seed that drift from the seeded answer "
        "from a drawn position p on (p is in the ground truth); structured, collapsed and "
        "faulted answers never drift",
    )  # fmt: skip
    add(
        "--seed-drift-after-in-flight", type=int, default=d.seed_drift_after_in_flight,
        metavar="N",
        help="seed drift only while at least N requests are in flight, this one included "
        "(0: at any load)",
    )  # fmt: skip
    add(
        "--shift-temperature", type=float, default=d.shift_temperature,
        help="flatness of shifted outputs: probabilities raised to 1/T (default 2)",
    )  # fmt: skip
    add(
        "--corrupt-at-in-flight", type=int, default=d.corrupt_at_in_flight,
        help="a request arriving with this many in flight (itself included) may corrupt the "
        "state: answers are garbage with HTTP 200 until a SIGSEGV crash (0: off)",
    )  # fmt: skip
    add("--corrupt-rate", type=float, default=d.corrupt_rate,
        help="probability that such an arrival corrupts the state")  # fmt: skip
    add("--corrupt-crash-rate", type=float, default=d.corrupt_crash_rate,
        help="while corrupt, probability per request of dying of SIGSEGV")  # fmt: skip
    add("--die-after", type=int, default=None, help="exit 1 after N generation requests")
    add("--die-message", default=d.die_message, help="stderr line printed when dying")
    add("--die-once-file", type=Path, default=None, help="die only if this file does not exist")
    add(
        "--quirk",
        action="append",
        default=[],
        choices=QUIRKS,
        help="real-server quirk (repeatable)",
    )
    add("--spec-decode", action="store_true", help="expose speculative-decoding counters")
    add("--spec-accept", type=float, default=d.spec_accept, help="acceptance rate")
    add(
        "--spec-accept-saturated",
        type=float,
        default=d.spec_accept_saturated,
        help="when saturated",
    )
    add("--spec-collapse-at", type=int, default=d.spec_collapse_at, help="in-flight where it falls")


def config_from_args(args: argparse.Namespace) -> MockConfig:
    """Build a validated MockConfig from parsed flags; raises UsageError on bad values."""
    kinds = parse_weights(args.collapse_kinds, COLLAPSE_KINDS, "--collapse-kinds", 1.0)
    if not kinds or sum(kinds.values()) <= 0:
        raise UsageError("--collapse-kinds: at least one kind with a positive weight is needed")
    return MockConfig(
        host=args.host,
        port=args.port,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
        seed=args.seed if args.seed_text is None else zlib.crc32(args.seed_text.encode()),
        ignore_seeds=args.ignore_seeds,
        model_name=args.model_name,
        max_model_len=args.max_model_len,
        max_logprobs=args.max_logprobs,
        tokens_per_s=args.tokens_per_s,
        latency_ms=args.latency_ms,
        output_tokens=args.output_tokens,
        stop_rate=args.stop_rate,
        saturation=args.saturation,
        ground_truth=args.ground_truth,
        collapse_rate=args.collapse_rate,
        burst_enter=args.burst_enter,
        burst_exit=args.burst_exit,
        burst_collapse_rate=args.burst_collapse_rate,
        burst_min_in_flight=args.burst_min_in_flight,
        state_collapse=_window(args.state_collapse),
        collapse_kinds=kinds,
        knobs=collect_knobs(args.knobs, args.knob, os.environ),
        knob_collapse=tuple(parse_rule(rule) for rule in args.knob_collapse),
        fault_rates=parse_weights(args.fault_rate, FAULT_KINDS, "--fault-rate", 0.0),
        stall_s=args.stall_s,
        perturb_rate=args.perturb_rate,
        perturb_max_tokens=args.perturb_max_tokens,
        perturb_from=args.perturb_from,
        fluent_rate=args.fluent_rate,
        fluent_max_tokens=args.fluent_max_tokens,
        shift_rate=args.shift_rate,
        crosstalk_rate=args.crosstalk_rate,
        invalid_structure_rate=args.invalid_structure_rate,
        invalid_structure_after_in_flight=args.invalid_structure_after_in_flight,
        inconsistent_rate=args.inconsistent_rate,
        seed_drift_rate=args.seed_drift_rate,
        seed_drift_after_in_flight=args.seed_drift_after_in_flight,
        shift_temperature=args.shift_temperature,
        corrupt_at_in_flight=args.corrupt_at_in_flight,
        corrupt_rate=args.corrupt_rate,
        corrupt_crash_rate=args.corrupt_crash_rate,
        die_after=args.die_after,
        die_message=args.die_message,
        die_once_file=args.die_once_file,
        quirks=frozenset(args.quirk),
        spec_decode=args.spec_decode,
        spec_accept=args.spec_accept,
        spec_accept_saturated=args.spec_accept_saturated,
        spec_collapse_at=args.spec_collapse_at,
    )


def _window(text: str | None) -> tuple[int, int] | None:
    """`W:P` as (W, P) with 0 < W <= P; UsageError otherwise."""
    if text is None:
        return None
    try:
        width, period = (int(part) for part in text.split(":"))
    except ValueError:
        raise UsageError(f"--state-collapse {text!r}: expected W:P, e.g. 6:18") from None
    if not 0 < width <= period:
        raise UsageError(f"--state-collapse {text!r}: need 0 < W <= P")
    return width, period
