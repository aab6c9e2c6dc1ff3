"""What to send (TargetSpec, RequestSpec) and what came back (Outcome)."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from soakgate import secrets
from soakgate.errors import UsageError
from soakgate.targets.proxy import proxy_for
from soakgate.targets.tls import SYSTEM, TlsOptions


@dataclass(frozen=True, slots=True)
class TargetSpec:
    """One server under test: the unit of analysis (typically one GPU's server)."""

    url: str
    """Base URL, e.g. http://127.0.0.1:8000 (a trailing /v1 is accepted)."""
    name: str = ""
    """Name of the unit in the store; defaults to host:port."""
    api_key: str | None = field(default=None, repr=False)
    """Bearer token sent to the server; never stored."""
    model: str | None = None
    """Model name; discovered from /v1/models when None."""
    tls: TlsOptions = SYSTEM
    """How an https target is verified and what certificate soakgate shows it."""

    def __post_init__(self) -> None:
        secrets.register(self.api_key)  # redacted from everything stored or printed
        secrets.register_url(self.url)
        if self.api_key and self.basic_auth():
            raise UsageError(
                f"target {secrets.mask_url(self.url)} has credentials in its URL and an API key "
                "is given too: use one of them"
            )

    def basic_auth(self) -> str | None:
        """The `Authorization` value for credentials in the URL (`http://user:pw@host`), if any."""
        parts = urlsplit(self.url)
        if parts.username is None:
            return None
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        value = "Basic " + base64.b64encode(pair.encode()).decode()
        secrets.register(value.split()[1])  # a gateway may echo the header it was sent
        return value

    @property
    def url_without_credentials(self) -> str:
        """The URL with its user info removed (credentials travel in a header)."""
        parts = urlsplit(self.url)
        netloc = parts.netloc.rpartition("@")[2]
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))

    @classmethod
    def parse(
        cls, text: str, api_key: str | None = None, model: str | None = None,
        tls: TlsOptions = SYSTEM,
    ) -> TargetSpec:  # fmt: skip
        """`[NAME=]URL` from the command line; a bad URL is a usage error."""
        name, _, url = text.partition("=") if "=" in text.split("://")[0] else ("", "", text)
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            shown = secrets.mask_url(text)
            raise UsageError(f"target {shown!r} is not an http(s) URL like http://127.0.0.1:8000")
        try:
            port = parts.port
        except ValueError as exc:
            raise UsageError(f"target {secrets.mask_url(text)!r} has a bad port") from exc
        base = f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"
        base = base.removesuffix("/v1")
        default_port = 443 if parts.scheme == "https" else 80
        proxy_for(base)  # a proxy variable soakgate cannot use is a usage error now, not later
        return cls(base, name or f"{parts.hostname}:{port or default_port}", api_key, model, tls)


RESPONSE_BASE_BYTES = 256 * 1024
RESPONSE_BYTES_PER_TOKEN = 4 * 1024


STRUCTURE_VIA = ("openai", "llamacpp", "vllm", "guided")
"""The request fields a structured prompt's constraint can be sent in (`RequestSpec`)."""


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """How each request is made: endpoint, streaming and sampling parameters."""

    endpoint: str = "completions"
    """`completions` or `chat`."""
    stream: bool = True
    """Stream the response as server-sent events."""
    max_tokens: int = 128
    """Maximum tokens to generate."""
    temperature: float = 0.8
    """Sampling temperature (0 is greedy)."""
    top_p: float | None = None
    """Nucleus sampling parameter, sent only when set."""
    seed: int | None = None
    """Sampling seed, sent only when set."""
    ignore_eos: bool = False
    """Ask the server to ignore EOS (vLLM, llama.cpp), for fixed-length generations."""
    logprobs: bool = False
    """Ask for logprobs of the sampled tokens."""
    top_logprobs: int = 0
    """Alternatives asked for at every position (chat `top_logprobs`, completions `logprobs`),
    with `logprobs`; 0: the sampled token's only (completions still lists 1)."""
    return_token_ids: bool = False
    """Ask for generated token ids (vLLM's `return_token_ids`)."""
    timeout_s: float = 120.0
    """Whole-request timeout in seconds."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Extra body fields passed through verbatim."""
    structure_via: str = "openai"
    """How a structured prompt's constraint is sent (`STRUCTURE_VIA`): `openai`
    (`response_format`), `llamacpp` (`json_schema`), `vllm` (`structured_outputs`), `guided`
    (vLLM's older `guided_json` / `guided_regex`); tools are sent as `tools` in every one."""
    max_response_bytes: int | None = None
    """Cap on an answer's body (after any Content-Encoding is undone); a longer answer is an
    `oversized` error. None: `response_cap` derives it from `max_tokens`."""

    def __post_init__(self) -> None:
        if self.endpoint not in ("completions", "chat"):
            raise UsageError(f"endpoint must be completions or chat, not {self.endpoint!r}")
        if self.max_tokens < 1:
            raise UsageError(f"max tokens must be at least 1, not {self.max_tokens}")
        if not 0 <= self.temperature <= 10:
            raise UsageError(f"temperature must be in [0, 10], not {self.temperature}")
        if self.timeout_s <= 0:
            raise UsageError(f"timeout must be positive, not {self.timeout_s}")
        if self.structure_via not in STRUCTURE_VIA:
            given, known = self.structure_via, ", ".join(STRUCTURE_VIA)
            raise UsageError(f"structure via must be one of {known}, not {given!r}")
        if self.max_response_bytes is not None and self.max_response_bytes < 1:
            raise UsageError(f"max response bytes must be >= 1, not {self.max_response_bytes}")

    @property
    def response_cap(self) -> int:
        """Bytes an answer's body may have: `max_response_bytes`, else 256 KiB plus 4 KiB per
        token (a streamed token's event is ~0.2-0.5 KB on vLLM and llama.cpp, logprobs
        included)."""
        if self.max_response_bytes is not None:
            return self.max_response_bytes
        return RESPONSE_BASE_BYTES + RESPONSE_BYTES_PER_TOKEN * self.max_tokens

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form for the run record."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass(slots=True)
class Outcome:
    """What one request produced: content, usage, timings, or an error class."""

    started_at: float
    """Unix time the request was sent."""
    ended_at: float = 0.0
    """Unix time it finished."""
    ttft_s: float | None = None
    """Seconds to the first content (streaming)."""
    text: str = ""
    """Generated text."""
    token_ids: list[int] | None = None
    """Generated token ids, when the server returned them."""
    prompt_token_ids: list[int] | None = None
    """The prompt's token ids, when the server returned them (vLLM `return_token_ids`)."""
    finish_reason: str | None = None
    """The server's finish reason."""
    prompt_tokens: int | None = None
    """Prompt tokens from usage."""
    completion_tokens: int | None = None
    """Completion tokens from usage, else counted token ids."""
    http_status: int | None = None
    """HTTP status code."""
    error_class: str | None = None
    """None when clean, else one of records.ERROR_CLASSES."""
    error_detail: str | None = None
    """Short detail of the error."""
    logprobs_count: int = 0
    logprob_parts: list[Any] | None = None
    """The log-probability objects as they came, one per body or event (`checks.numbers`)."""
    """How many per-token logprob entries came back."""
    attempts: int = 1
    """Times the request was sent (a retry only when it provably never reached the server)."""
    retry_after_s: float | None = None
    """Seconds the server asked the client to wait (`Retry-After` on a 429 or 503)."""
    tool_calls: list[dict[str, str]] | None = None
    """The answer's tool calls (chat), each {"id", "name", "arguments"} with its arguments'
    JSON text as it came (streamed fragments joined)."""
    gateway: dict[str, str] | None = None
    """Headers a gateway or proxy added (`http1.GATEWAY_HEADERS`), when it added any."""
