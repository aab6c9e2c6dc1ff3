"""aiohttp client for one OpenAI-compatible target; every failure becomes an error class."""

from __future__ import annotations

import asyncio
import errno
import json
import time
from typing import Any

import aiohttp

from soakgate.errors import TargetError
from soakgate.prompts import Prompt
from soakgate.targets import parse
from soakgate.targets.deadlines import Deadlines
from soakgate.targets.spec import Outcome, RequestSpec, TargetSpec

_PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
_STALE_RETRIES = 4  # tries on a stale pooled connection before the final one
_BODY_CACHE_SIZE = 4096  # request bodies kept encoded; bounded for huge prompt files


def headers_for(target: TargetSpec) -> dict[str, str]:
    """Request headers; the API key goes here and nowhere else."""
    headers = {"Content-Type": "application/json"}
    if target.api_key:
        headers["Authorization"] = f"Bearer {target.api_key}"
    return headers


async def discover_model(session: aiohttp.ClientSession, target: TargetSpec) -> str:
    """The first model id the target lists at /v1/models (TargetError when it cannot)."""
    url = f"{target.url}/v1/models"
    try:
        timeout = aiohttp.ClientTimeout(total=15)
        async with session.get(url, headers=headers_for(target), timeout=timeout) as response:
            if response.status != 200:
                raise TargetError(f"{url} answered HTTP {response.status}")
            body = await response.json(content_type=None)
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        raise TargetError(f"cannot reach {target.url}: {describe(exc)}") from exc
    except json.JSONDecodeError as exc:
        raise TargetError(f"{url} did not answer JSON") from exc
    try:
        return str(body["data"][0]["id"])
    except (KeyError, IndexError, TypeError) as exc:
        raise TargetError(f"{url} lists no model; pass --model") from exc


def describe(exc: BaseException) -> str:
    """A short one-line description of an exception."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__


def classify(exc: BaseException) -> str:
    """Map a transport exception to one of records.ERROR_CLASSES."""
    if isinstance(exc, asyncio.TimeoutError | aiohttp.ServerTimeoutError):
        return "timeout"
    if isinstance(exc, aiohttp.ClientConnectorError | ConnectionRefusedError):
        return "connection_refused"
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return "connection_reset"
    if isinstance(exc, ConnectionResetError | BrokenPipeError):
        return "connection_reset"
    if isinstance(exc, OSError) and exc.errno in (errno.ECONNRESET, errno.EPIPE):
        return "connection_reset"
    if isinstance(exc, aiohttp.ClientOSError | aiohttp.ClientConnectionError):
        return "connection_reset"
    if isinstance(exc, json.JSONDecodeError | UnicodeDecodeError | parse.ResponseFormatError):
        return "malformed_json"
    if isinstance(exc, parse.ServerDeclaredError):
        return "server_error"
    return "client_error"


def is_stale_connection(exc: BaseException) -> bool:
    """True for a connection that died before any response: the write of the request failed,
    or the server hung up before a status line (only ever raised before the response starts)."""
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return True
    return isinstance(exc, aiohttp.ClientOSError) and "Can not write request body" in str(exc)


class OpenAIClient:
    """Sends generation requests to one target over a shared aiohttp session."""

    def __init__(self, session: aiohttp.ClientSession, target: TargetSpec, model: str) -> None:
        self.session = session
        self.target = target
        self.model = model
        self._headers = headers_for(target)
        self._bodies: dict[Prompt, bytes] = {}
        self._bodies_spec: RequestSpec | None = None
        self._deadlines = Deadlines()

    def _body(self, prompt: Prompt, spec: RequestSpec) -> bytes:
        """The encoded request body, cached per prompt: re-encoding it per request costs CPU."""
        if spec is not self._bodies_spec:
            self._bodies, self._bodies_spec = {}, spec
        body = self._bodies.get(prompt)
        if body is None:
            body = json.dumps(parse.build_payload(spec, prompt, self.model)).encode()
            if len(self._bodies) < _BODY_CACHE_SIZE:
                self._bodies[prompt] = body
        return body

    async def generate(
        self, prompt: Prompt, spec: RequestSpec, request_id: str, outcome: Outcome | None = None
    ) -> Outcome:
        """Send one request, filling `outcome`; failures become error classes, never exceptions.

        Cancellation propagates, with `outcome` marked `cancelled` so the caller can store it.
        """
        outcome = outcome or Outcome(started_at=time.time())
        began = time.perf_counter()
        payload = self._body(prompt, spec)
        headers = {**self._headers, "X-Request-Id": request_id}
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("generate() must run in an asyncio task")
        self._deadlines.arm(task, spec.timeout_s)
        try:
            await self._exchange(outcome, spec, payload, headers, began)
        except asyncio.CancelledError:
            if not self._timed_out(task):
                outcome.error_class, outcome.error_detail = "cancelled", "soak stopped"
                outcome.ended_at = time.time()
                raise
            outcome.error_class = "timeout"
            outcome.error_detail = f"no complete answer within {spec.timeout_s:g} s"
        except Exception as exc:  # every failure is a record, never a crash of the soak
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
        self, outcome: Outcome, spec: RequestSpec, payload: bytes, headers: dict[str, str],
        began: float,
    ) -> None:  # fmt: skip
        """POST and read the whole response into `outcome`."""
        url = f"{self.target.url}{_PATHS[spec.endpoint]}"
        async with await self._post(url, payload, headers) as response:
            outcome.http_status = response.status
            if response.status >= 400:
                body = (await response.read())[:300].decode("utf-8", "replace")
                outcome.error_class = "http_4xx" if response.status < 500 else "http_5xx"
                outcome.error_detail = f"HTTP {response.status}: {body}"
                return
            chat = spec.endpoint == "chat"
            if spec.stream:
                await self._read_stream(outcome, response, chat, began)
            else:
                parse.fold_body(outcome, parse.decode_event(await response.read()), chat)
                if outcome.finish_reason is None:
                    outcome.error_class = "truncated_stream"
                    outcome.error_detail = "response without a finish_reason"

    async def _post(
        self, url: str, payload: bytes, headers: dict[str, str]
    ) -> aiohttp.ClientResponse:
        """POST, retrying when a pooled keep-alive connection turns out closed before any answer.

        llama.cpp closes the connection after every stream without saying so; the next request
        on it dies unanswered (RFC 9112 §9.3.1 lets a client retry a request the server never
        answered). Several pooled connections can be stale at once, hence a few tries.
        """
        for _ in range(_STALE_RETRIES):
            try:
                return await self.session.post(url, data=payload, headers=headers)
            except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError) as exc:
                if not is_stale_connection(exc):
                    raise
        return await self.session.post(url, data=payload, headers=headers)

    async def _read_stream(
        self, outcome: Outcome, response: aiohttp.ClientResponse, chat: bool, began: float
    ) -> None:
        """Fold server-sent events; a stream with no finish reason is truncated."""
        done = False
        splitter = parse.SseSplitter()
        async for chunk in response.content.iter_any():
            for data in splitter.feed(chunk):
                done = self._fold_data(outcome, data, chat, began) or done
        for data in splitter.close():
            done = self._fold_data(outcome, data, chat, began) or done
        if outcome.finish_reason is None:
            outcome.error_class = "truncated_stream"
            how = "with [DONE]" if done else "without [DONE]"
            outcome.error_detail = f"stream ended {how} and without a finish_reason"

    @staticmethod
    def _fold_data(outcome: Outcome, data: bytes, chat: bool, began: float) -> bool:
        """Fold one SSE data payload; True for the [DONE] sentinel."""
        if data == b"[DONE]":
            return True
        if parse.fold_event(outcome, parse.decode_event(data), chat) and outcome.ttft_s is None:
            outcome.ttft_s = time.perf_counter() - began
        return False


def make_session(concurrency: int) -> aiohttp.ClientSession:
    """One session per target with a connection pool sized to the concurrency."""
    connector = aiohttp.TCPConnector(limit=max(1, concurrency), force_close=False)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None))


async def connect(session: aiohttp.ClientSession, target: TargetSpec) -> OpenAIClient:
    """A client for one target, discovering its model name when not given."""
    model = target.model or await discover_model(session, target)
    return OpenAIClient(session, target, model)
