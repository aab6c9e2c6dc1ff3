"""The client of one OpenAI-compatible target (generation requests and model discovery on its
own HTTP/1.1 pool); every failure becomes an error class."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import email.utils
import errno
import json
import time
from typing import Any

from soakgate import __version__
from soakgate.errors import TargetError, UsageError
from soakgate.prompts import Prompt
from soakgate.secrets import mask_url
from soakgate.targets import fetch, http1, parse
from soakgate.targets.deadlines import Deadlines
from soakgate.targets.encoding import Decoder
from soakgate.targets.gateway import proxy_page
from soakgate.targets.pool import Pool
from soakgate.targets.proxy import proxy_for
from soakgate.targets.spec import Outcome, RequestSpec, TargetSpec
from soakgate.targets.sse import SseSplitter
from soakgate.targets.tls import SYSTEM, TlsOptions

_PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
_BODY_CACHE_SIZE = 4096  # request bodies kept encoded; bounded for huge prompt files
_SENTINEL = "\x00soakgate: the text ends here\x00"  # where a marker is spliced into a body
_ENCODED_SENTINEL = json.dumps(_SENTINEL)[1:-1].encode()
_RATE_LIMITED = (429, 503)  # "too many requests" and "overloaded": the target backs off
_SLICE = 64 * 1024  # bytes of a stream parsed per turn of the event loop (~0.5 ms of work)
OVERSIZED_TEXT_KEPT = 16 * 1024
"""Characters of text kept from an `oversized` answer (the rest would only fill the store)."""


class ResponseMismatch(Exception):
    """The answer's echoed `X-Request-Id` is another request's."""


def headers_for(target: TargetSpec) -> dict[str, str]:
    """Request headers; the API key (or the URL's credentials) goes here and nowhere else (a key
    with a line break is a UsageError on every path, model discovery included: it could inject
    headers)."""
    headers = {"Content-Type": "application/json"}
    if target.api_key:
        if any(c in target.api_key for c in "\r\n\0"):
            raise UsageError("the API key contains a line break or a NUL character")
        headers["Authorization"] = f"Bearer {target.api_key}"
    elif (basic := target.basic_auth()) is not None:
        headers["Authorization"] = basic
    return headers


async def discover_model(session: Session, target: TargetSpec) -> str:
    """The first model id the target lists at /v1/models (TargetError when it cannot)."""
    shown = mask_url(f"{target.url_without_credentials}/v1/models")
    pool = session.pool(target.url, target.tls)
    try:
        status, body = await fetch.get(pool, "/v1/models", headers_for(target), timeout_s=15)
    except (TimeoutError, http1.HttpError, OSError, parse.ResponseFormatError) as exc:
        raise TargetError(f"cannot reach {mask_url(target.url)}: {describe(exc)}") from exc
    if status != 200:
        raise TargetError(f"{shown} answered HTTP {status}")
    try:
        listed = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TargetError(f"{shown} did not answer JSON") from exc
    try:
        return str(listed["data"][0]["id"])
    except (KeyError, IndexError, TypeError) as exc:
        raise TargetError(f"{shown} lists no model; pass --model") from exc


def describe(exc: BaseException) -> str:
    """A short one-line description of an exception."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__


def classify(exc: BaseException) -> str:
    """Map a transport exception to one of records.ERROR_CLASSES."""
    if isinstance(exc, asyncio.TimeoutError):
        return "timeout"
    if isinstance(exc, http1.ConnectFailed | ConnectionRefusedError):
        return "connection_refused"
    if isinstance(exc, http1.Dropped):
        return "dropped"
    if isinstance(exc, http1.Oversized):
        return "oversized"
    if isinstance(exc, ResponseMismatch):
        return "response_mismatch"
    if isinstance(exc, parse.UnexpectedChoices):
        return "unexpected_choices"
    if isinstance(exc, http1.Disconnected | ConnectionResetError | BrokenPipeError):
        return "connection_reset"
    if isinstance(exc, OSError) and exc.errno in (errno.ECONNRESET, errno.EPIPE):
        return "connection_reset"
    if isinstance(exc, json.JSONDecodeError | UnicodeDecodeError | parse.ResponseFormatError):
        return "malformed_json"
    if isinstance(exc, parse.ServerDeclaredError):
        return "server_error"
    return "client_error"


class Session:
    """The connections of one soak or probe: one keep-alive pool per target (`http1`, the
    cheaper path per request), for its generation requests and its model discovery."""

    def __init__(self) -> None:
        self._pools: dict[tuple[str, TlsOptions], Pool] = {}

    def pool(self, url: str, tls: TlsOptions = SYSTEM) -> Pool:
        """The generation connections to the target at `url` (one pool per URL and TLS)."""
        key = (url, tls)
        pool = self._pools.get(key)
        if pool is None:
            pool = Pool(url, ssl_context=tls.for_url(url), proxy=proxy_for(url))
            self._pools[key] = pool
        return pool

    async def close(self) -> None:
        """Close every connection."""
        for pool in self._pools.values():
            await pool.close()

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()


class OpenAIClient:
    """Sends generation requests to one target over the target's pool in a `Session`."""

    def __init__(self, session: Session, target: TargetSpec, model: str) -> None:
        self.session = session
        self.target = target
        self.model = model
        self._pool = session.pool(target.url, target.tls)
        self._heads = {
            endpoint: _request_head(self._pool, path, target) for endpoint, path in _PATHS.items()
        }
        self._requests: dict[Prompt, tuple[bytes, bytes]] = {}
        self._splices: dict[Prompt, tuple[bytes, ...]] = {}  # () where it cannot be spliced
        self._requests_spec: RequestSpec | None = None
        self._deadlines = Deadlines()

    def _request(self, prompt: Prompt, spec: RequestSpec) -> tuple[bytes, bytes]:
        """The request's head up to its request id, and its body; cached per prompt, since
        encoding them anew per request costs CPU. A prompt marked for one request (a canary:
        `MarkedPrompt`) is never twice the same: its base's body is encoded once, around a
        sentinel, and the marker spliced in (the bytes a whole encoding gives, as a test
        checks)."""
        if spec is not self._requests_spec:
            self._requests, self._splices, self._requests_spec = {}, {}, spec
        base = getattr(prompt, "base", None)
        if base is not None and prompt.text.startswith(base.text):
            parts = self._splices.get(base)
            if parts is None:
                parts = self._splice_points(base, spec)
            if parts:
                marker = json.dumps(prompt.text[len(base.text) :])[1:-1].encode()
                return self._with_head(spec, marker.join(parts))
        request = self._requests.get(prompt)
        if request is None:
            request = self._with_head(
                spec, json.dumps(parse.build_payload(spec, prompt, self.model)).encode()
            )
            if len(self._requests) < _BODY_CACHE_SIZE:
                self._requests[prompt] = request
        return request

    def _with_head(self, spec: RequestSpec, body: bytes) -> tuple[bytes, bytes]:
        head = b"%sContent-Length: %d\r\nX-Request-Id: " % (self._heads[spec.endpoint], len(body))
        return head, body

    def _splice_points(self, base: Prompt, spec: RequestSpec) -> tuple[bytes, ...]:
        """The body of `base`'s request cut where its text ends (empty: the text's end cannot
        be told, as when the prompt holds the sentinel itself; such prompts are encoded whole;
        remembered either way)."""
        payload = parse.build_payload(spec, base.with_text(base.text + _SENTINEL), self.model)
        body = json.dumps(payload).encode()
        parts = tuple(body.split(_ENCODED_SENTINEL))
        found = parts if len(parts) == 2 else ()
        if len(self._splices) < _BODY_CACHE_SIZE:
            self._splices[base] = found
        return found

    async def generate(
        self, prompt: Prompt, spec: RequestSpec, request_id: str, outcome: Outcome | None = None
    ) -> Outcome:
        """Send one request, filling `outcome`; failures become error classes, never exceptions.

        Cancellation propagates, with `outcome` marked `cancelled` so the caller can store it.
        """
        outcome = outcome or Outcome(started_at=time.time())
        # time to first token counts from `started_at` (the caller may have made the outcome a
        # moment before: a busy machine can preempt it in between)
        began = time.perf_counter() - max(0.0, time.time() - outcome.started_at)
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("generate() must run in an asyncio task")
        self._deadlines.arm(task, spec.timeout_s)
        try:
            head, body = self._request(prompt, spec)
            rid = request_id.encode()
            if b"\r" in rid or b"\n" in rid:
                raise ValueError(f"request id {request_id!r} has a line break")
            request = b"".join((head, rid, b"\r\n\r\n", body))
            await self._exchange(outcome, spec, request, rid, began)
        except asyncio.CancelledError:
            if not self._timed_out(task):
                outcome.error_class, outcome.error_detail = "cancelled", "soak stopped"
                outcome.ended_at = time.time()
                raise
            outcome.error_class = "timeout"
            outcome.error_detail = f"no complete answer within {spec.timeout_s:g} s"
        except Exception as exc:  # every failure is a record, never a crash of the soak
            if isinstance(exc, http1.HttpError):
                outcome.attempts = exc.attempts
            outcome.error_class = outcome.error_class or classify(exc)
            outcome.error_detail = outcome.error_detail or describe(exc)
        finally:
            if self._deadlines.disarm(task):  # its time ran out as the answer completed
                task.uncancel()
        outcome.ended_at = time.time()
        parse.finish(outcome)
        return outcome

    def _timed_out(self, task: asyncio.Task[Any]) -> bool:
        """After a CancelledError: True when only the request's deadline cancelled the task."""
        return self._deadlines.disarm(task) and task.uncancel() == 0

    async def _exchange(
        self, outcome: Outcome, spec: RequestSpec, request: bytes, rid: bytes, began: float
    ) -> None:
        """Send the request and read the whole answer into `outcome`."""
        cap = spec.response_cap
        connection = await self._pool.send(request, cap)
        outcome.attempts = connection.attempts
        try:
            outcome.http_status = status = connection.status
            if connection.gateway:
                outcome.gateway = connection.gateway
            echoed = connection.request_id
            if echoed is not None and echoed != rid and echoed.strip(b" \t") != rid:
                # an answer left over from another request (RFC 9110 drops the value's spaces)
                connection.abort()
                raise ResponseMismatch(f"the answer carries X-Request-Id {echoed[:100]!r}")
            decoder = None
            if connection.encoding is not None and connection.encoding.lower() != b"identity":
                decoder = Decoder(connection.encoding, cap)
            if status >= 400:
                await _refused(outcome, connection, decoder)
                return
            answer = parse.Answer(outcome, spec.endpoint == "chat")
            done = False
            try:
                if spec.stream:
                    done = await self._read_stream(answer, connection, decoder, began)
                else:
                    body = await connection.read()
                    if decoder is not None:
                        body = decoder.feed(body)
                        decoder.close()
                    parse.fold_body(answer, parse.decode_event(body))
            except http1.Oversized as exc:  # every such row would be as long as the cap
                came = answer.close(keep=OVERSIZED_TEXT_KEPT)
                kept = min(came, OVERSIZED_TEXT_KEPT)
                outcome.error_detail = f"{describe(exc)}; text kept: {kept} of {came} characters"
                raise
            finally:
                answer.close()  # the text that came is kept, whatever failed
            answer.check()
            if outcome.finish_reason is None:
                outcome.error_class = "truncated_stream"
                how = "with [DONE]" if done else "without [DONE]"
                outcome.error_detail = (
                    f"stream ended {how} and without a finish_reason"
                    if spec.stream
                    else "response without a finish_reason"
                )
        finally:
            self._pool.release(connection)  # kept alive only when its answer was read whole

    async def _read_stream(
        self,
        answer: parse.Answer,
        connection: http1.Connection,
        decoder: Decoder | None,
        began: float,
    ) -> bool:
        """Fold server-sent events into the answer; True when the stream said [DONE].

        Each piece taken is at most what the connection buffers before it pauses reading, and
        taking the next one waits for the event loop: no stream holds the loop for long."""
        done = False
        splitter = SseSplitter()
        template = parse.StreamTemplate(answer.chat)
        while chunk := await connection.chunk():
            if decoder is not None:
                chunk = decoder.feed(chunk)
            for start in range(0, len(chunk), _SLICE):
                if start:  # a big piece is parsed a slice per turn of the event loop
                    await asyncio.sleep(0)
                piece = chunk if len(chunk) <= _SLICE else chunk[start : start + _SLICE]
                done = _fold_payloads(answer, splitter.feed(piece), template, began) or done
                if splitter.error is not None:
                    raise parse.ServerDeclaredError(_error_message(splitter.error))
        if decoder is not None:
            decoder.close()
        done = _fold_payloads(answer, splitter.close(), template, began) or done
        if splitter.error is not None:
            raise parse.ServerDeclaredError(_error_message(splitter.error))
        return done


def _fold_payloads(
    answer: parse.Answer, payloads: list[bytes], template: parse.StreamTemplate, began: float
) -> bool:
    """Fold the SSE data payloads one piece of a stream completed; True when one was [DONE].
    Time to first token is the moment the piece that carried it was folded."""
    try:
        return parse.fold_payloads(answer, payloads, template)
    finally:
        if answer.content and answer.outcome.ttft_s is None:
            answer.outcome.ttft_s = time.perf_counter() - began


async def _refused(outcome: Outcome, connection: http1.Connection, decoder: Decoder | None) -> None:
    """Record an answer with an error status: 429 and 503 are `rate_limited`, with the wait the
    server asked for; another status is `proxy_error` when the answer is a proxy's own page
    (nginx's 502), else `http_4xx` or `http_5xx`. The body is read (keeping the connection) and
    its start is the detail."""
    status = connection.status
    if status in _RATE_LIMITED:
        outcome.error_class = "rate_limited"
        outcome.retry_after_s = retry_after_seconds(connection.retry_after)
    else:
        outcome.error_class = "http_4xx" if status < 500 else "http_5xx"
    outcome.error_detail = f"HTTP {status}"
    body = await connection.read()
    if decoder is not None:
        with contextlib.suppress(parse.ResponseFormatError, http1.Oversized):
            body = decoder.feed(body)
    shown = body[:300].decode("utf-8", "replace")
    proxy = proxy_page(connection.server, connection.content_type, body)
    if proxy is not None and status not in _RATE_LIMITED:
        outcome.error_class = "proxy_error"
        outcome.error_detail = f"HTTP {status} from a proxy ({proxy}): {shown}"[:600]
    else:
        outcome.error_detail = f"HTTP {status}: {shown}"


def retry_after_seconds(value: bytes | None) -> float | None:
    """Seconds a `Retry-After` header asks for (delay-seconds or an HTTP date); None when absent
    or unreadable."""
    if value is None:
        return None
    text = value.decode("latin-1").strip()
    if text.isascii() and text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # HTTP dates are GMT
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, when.timestamp() - time.time())


def _error_message(data: bytes) -> str:
    """The message of an `event: error`'s data: JSON `{"message"}` or `{"error"}`, else the text."""
    try:
        body = parse.decode_event(data)
    except ValueError:
        return data[:300].decode("utf-8", "replace")
    if isinstance(body, dict):
        error = body.get("error", body)
        message = error.get("message", error) if isinstance(error, dict) else error
        return str(message)[:300]
    return str(body)[:300]


def _request_head(pool: Pool, path: str, target: TargetSpec) -> bytes:
    """A request's head up to its per-request fields: request line and the fixed headers."""
    fields = {
        "Host": pool.authority,
        "User-Agent": f"soakgate/{__version__}",
        "Accept": "application/json, text/event-stream",
        "Accept-Encoding": "identity",
        **headers_for(target),
        **pool.head_fields,
    }
    if any(c in value for value in fields.values() for c in "\r\n\0"):
        raise UsageError("a request header (the API key?) contains a line break or a NUL character")
    lines = [f"POST {pool.target_prefix}{path} HTTP/1.1", *(f"{k}: {v}" for k, v in fields.items())]
    return ("\r\n".join(lines) + "\r\n").encode("utf-8")


def make_session() -> Session:
    """Connections for one soak or probe (a pool opens one per request in flight)."""
    return Session()


async def connect(session: Session, target: TargetSpec) -> OpenAIClient:
    """A client for one target, discovering its model name when not given."""
    model = target.model or await discover_model(session, target)
    return OpenAIClient(session, target, model)
