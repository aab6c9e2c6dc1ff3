"""A lean HTTP/1.1 client connection for generation requests (pooled by `targets/pool.py`).

llhttp (the parser of Node.js, through `httptools`) parses the answers and asyncio transports
carry the bytes; this module only frames requests and bounds answers, which no library does
without its own per-request machinery. aiohttp's `ClientSession` costs ~0.14 ms of CPU per
request on top of this (BENCHMARKS.md, client cost), more than all of soakgate's own work per
request, and a load generator's CPU is its reach. The same pool carries a soak's other GETs
(model discovery, `/metrics` scrapes: `targets/fetch.py`); aiohttp is left to the HTTP reference,
the guard and a campaign's health checks.

Every answer is bounded: its head by `MAX_HEAD_BYTES`, its body by the cap the request was sent
with, its bytes on the wire by both (llhttp and httptools set no limit of their own: an endless
header grew to 386 MB in 30 s before these caps).
"""

from __future__ import annotations

import asyncio
import time
from typing import cast

import httptools

_HIGH_WATER = 256 * 1024  # unread answer bytes before the socket stops being read: also what one
# answer can hand the event loop at once
MAX_HEAD_BYTES = 64 * 1024
"""Cap on an answer's status line and headers (interim 1xx answers included)."""

GATEWAY_HEADERS = (
    b"x-litellm-attempted-retries", b"x-litellm-attempted-fallbacks",
    b"x-litellm-model-api-base", b"x-envoy-attempt-count", b"x-envoy-upstream-service-time",
    b"via",
)  # fmt: skip
"""Headers a gateway or proxy between soakgate and the server adds: how often it retried the
request upstream (LiteLLM, Envoy), and which upstream answered. Kept on the row."""
_KEPT_VALUE = 200  # characters kept of each header value the client records
# headers the client acts on: 0 frames the body; the others are kept for the client to check
_WATCHED = {
    b"content-length": 0, b"transfer-encoding": 0,
    b"x-request-id": 1, b"content-encoding": 2, b"retry-after": 3, b"server": 4,
    b"content-type": 5, **dict.fromkeys(GATEWAY_HEADERS, 6),
}  # fmt: skip


class HttpError(Exception):
    """The exchange failed below HTTP semantics (no status, or a broken answer)."""

    attempts = 1
    """Times the request was written before this failure (set by the pool)."""


class ConnectFailed(HttpError):
    """No connection could be opened: refused, unresolvable, unreachable, TLS handshake."""


class Disconnected(HttpError):
    """The server closed or reset the connection before its answer was complete."""


class Dropped(Disconnected):
    """The server closed or reset the connection after the request was written, before sending
    any byte of an answer: it may have received and worked on the request, so it is not sent
    again."""


class ProtocolError(HttpError):
    """The server's bytes are not an HTTP/1.x answer."""


class Oversized(HttpError):
    """The answer's head, body or bytes on the wire exceeded their cap."""


class Connection(asyncio.Protocol):
    """One keep-alive connection and the answer to the request it carries now."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._paused = False
        self._framed = False  # Content-Length or Transfer-Encoding seen: the end is not the close
        self._expecting = False  # a request was sent and its answer is not complete yet
        self._wire = 0  # bytes of the current answer received, framing included
        self._wire_cap = 0
        self._body = 0  # bytes of the current answer's body
        self._body_cap = 0
        self._head = 0  # bytes of the current answer's header names and values
        self._over = ""  # what passed its cap, once something has
        self.fd = -1
        """The socket's file descriptor (the pool polls idle connections for a close)."""
        self.status = 0
        """HTTP status of the current answer (0 until its headers are in)."""
        self.complete = False
        """The whole answer has arrived."""
        self.answered = False
        """Some byte of an answer has arrived on this connection."""
        self.error: HttpError | None = None
        self.reusable = True
        """The server allows another request on this connection."""
        self.request_id: bytes | None = None
        """The answer's `X-Request-Id` header, when the server echoes one."""
        self.encoding: bytes | None = None
        """The answer's `Content-Encoding` header, if any."""
        self.retry_after: bytes | None = None
        """The answer's `Retry-After` header, if any."""
        self.server: bytes | None = None
        """The answer's `Server` header, if any."""
        self.content_type: bytes | None = None
        """The answer's `Content-Type` header, if any."""
        self.gateway: dict[str, str] = {}
        """The answer's GATEWAY_HEADERS (lowercase name -> value), as a gateway sent them."""
        self.answers = 0
        """Answers completed on this connection."""
        self.attempts = 1
        """Times the current request was written (on this or earlier connections)."""
        self.idle_since = 0.0
        """Monotonic time the connection was last given back to its pool."""
        self.lost_at: float | None = None
        """Monotonic time the connection was closed, from either side."""

    # --- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        self.fd = sock.fileno() if sock is not None else -1

    def data_received(self, data: bytes) -> None:
        if not self._expecting:  # unasked-for bytes (e.g. a proxy's 408 on an idle connection)
            self.reusable = False
            return
        self.answered = True
        self._wire += len(data)
        if self._wire > self._wire_cap:
            return self._oversized(f"more than {self._wire_cap} bytes on the wire")
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ProtocolError(f"invalid HTTP answer: {exc}"))
            self.abort()
            return
        if self._over:
            self._oversized(self._over)
        elif not self.status and self._wire > MAX_HEAD_BYTES and self._expecting:
            self._oversized(f"a head over {MAX_HEAD_BYTES} bytes")

    def connection_lost(self, exc: Exception | None) -> None:
        self.reusable = False
        self.lost_at = time.monotonic()
        if self._expecting and self.error is None:
            if self.status >= 200 and not self._framed:
                self._done()  # the body was delimited by the close (RFC 9112 §6.3)
            else:
                why = f": {exc}" if exc else ""
                if self.answered:
                    when = "before its answer was complete"
                    self._fail(Disconnected(f"the server closed the connection {when}{why}"))
                else:
                    self._fail(Dropped(f"the server closed the connection before answering{why}"))
        self._wake()

    # --- httptools callbacks ------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head += len(name) + len(value)
        field = _WATCHED.get(name.lower())
        if field is None:
            return
        if field == 0:
            self._framed = True
        elif self.status or not self._expecting:  # a trailer, or a stray answer's header
            return
        elif field == 1:
            self.request_id = value
        elif field == 2:
            self.encoding = value
        elif field == 3:
            self.retry_after = value
        elif field == 4:
            self.server = value[:_KEPT_VALUE]
        elif field == 5:
            self.content_type = value[:_KEPT_VALUE]
        else:
            self.gateway[name.lower().decode("latin-1")] = value[:_KEPT_VALUE].decode("latin-1")

    def on_headers_complete(self) -> None:
        if not self._expecting:  # a second answer after ours, in the same bytes
            self.reusable = False
            return
        if self._head > MAX_HEAD_BYTES:  # it came whole in one read
            self._over = f"a head over {MAX_HEAD_BYTES} bytes"
            return
        status = self._parser.get_status_code()
        if status >= 200:  # a 1xx answer is interim: the real one follows on this connection
            self.status = status
            self._wake()

    def on_body(self, body: bytes) -> None:
        if not self._expecting:
            return
        self._body += len(body)
        if self._body > self._body_cap:
            self._over = f"a body over {self._body_cap} bytes"
            return
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > _HIGH_WATER and not self._paused and self._transport is not None:
            self._transport.pause_reading()
            self._paused = True
        self._wake()

    def on_message_complete(self) -> None:
        if self.status and self._expecting and not self._over:
            self.reusable = self.reusable and self._parser.should_keep_alive()
            self._done()
        self._framed = False

    # --- the request side ---------------------------------------------------------------------

    def send(self, data: bytes, max_body: int) -> bool:
        """Write a whole request whose answer's body may be up to `max_body` bytes; the previous
        answer must be complete and taken. False when the write failed at once: not one byte of
        the request left this machine (the socket was already reset)."""
        self.status, self.complete, self.answered = 0, False, False
        self.request_id = self.encoding = self.retry_after = None
        self.server = self.content_type = None
        if self.gateway:
            self.gateway = {}
        self._wire = self._body = self._head = 0
        self._over = ""
        self._body_cap = max_body
        self._wire_cap = MAX_HEAD_BYTES + 2 * max_body  # chunk framing included
        self._expecting = True
        assert self._transport is not None
        self._transport.write(data)
        return not self._transport.is_closing()

    async def headers(self) -> int:
        """Wait for the answer's status line and headers; its status."""
        while not self.status:
            await self._next()
        return self.status

    async def read(self) -> bytes:
        """The whole body of the answer."""
        parts = []
        while not self.complete:
            if self._paused:  # taking what has come resumes reading
                parts.append(self._take())
            await self._next()
        if not parts:
            return self._take()
        parts.append(self._take())
        return b"".join(parts)

    async def chunk(self) -> bytes:
        """The next piece of the body as it arrives (whatever the socket gave); b"" at its end."""
        while not self._chunks:
            if self.complete:
                return b""
            await self._next()
        return self._take()

    def abort(self) -> None:
        """Drop the connection at once (an unfinished answer cannot be skipped over)."""
        self.reusable = False
        if self._transport is not None:
            self._transport.abort()

    def close(self) -> None:
        """Close the connection after anything still being written."""
        self.reusable = False
        if self._transport is not None:
            self._transport.close()

    @property
    def closed(self) -> bool:
        return self._transport is None or self._transport.is_closing()

    def _take(self) -> bytes:
        """Everything received and not yet taken."""
        data = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks, self._buffered = [], 0
        if self._paused and self._transport is not None:
            self._transport.resume_reading()
            self._paused = False
        return data

    async def _next(self) -> None:
        """Wait for the next callback from the transport or the parser, raising its error."""
        if self.error is not None:
            raise self.error
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None
        if self.error is not None:
            raise self.error

    def _done(self) -> None:
        self.complete, self._expecting = True, False
        self.answers += 1
        self._wake()

    def _oversized(self, what: str) -> None:
        self._fail(Oversized(f"the answer has {what}"))
        self.abort()

    def _fail(self, error: HttpError) -> None:
        if self.error is None:
            self.error = error
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
