"""A lean HTTP/1.1 keep-alive client for generation requests.

llhttp (the parser of Node.js, through `httptools`) parses the answers and asyncio transports
carry the bytes; this module only frames requests and pools connections, which no library
does without its own per-request machinery. aiohttp's `ClientSession` costs ~0.14 ms of CPU
per request on top of this (BENCHMARKS.md, client cost), more than all of soakgate's own work
per request, and a load generator's CPU is its reach. aiohttp still does everything else
(model discovery, /metrics, health checks).
"""

from __future__ import annotations

import asyncio
import ssl
from typing import cast
from urllib.parse import urlsplit

import httptools

_HIGH_WATER = 1 << 20  # bytes of unread answer before the socket stops being read
_STALE_RETRIES = 4  # reused connections tried before a fresh one (several can be stale at once)


class HttpError(Exception):
    """The exchange failed below HTTP semantics (no status, or a broken answer)."""


class ConnectFailed(HttpError):
    """No connection could be opened: refused, unresolvable, unreachable, TLS handshake."""


class Disconnected(HttpError):
    """The server closed or reset the connection before its answer was complete."""


class ProtocolError(HttpError):
    """The server's bytes are not an HTTP/1.x answer."""


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
        self.status = 0
        """HTTP status of the current answer (0 until its headers are in)."""
        self.complete = False
        """The whole answer has arrived."""
        self.answered = False
        """Some byte of an answer has arrived on this connection."""
        self.error: HttpError | None = None
        self.reusable = True
        """The server allows another request on this connection."""

    # --- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        if not self._expecting:  # unasked-for bytes (e.g. a proxy's 408 on an idle connection)
            self.reusable = False
            return
        self.answered = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ProtocolError(f"invalid HTTP answer: {exc}"))
            self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.reusable = False
        if self.status >= 200 and not self.complete and not self._framed:
            self.complete = True  # the body was delimited by the close (RFC 9112 §6.3)
        elif not self.complete:
            why = f": {exc}" if exc else ""
            when = "before its answer was complete" if self.answered else "before answering"
            self._fail(Disconnected(f"the server closed the connection {when}{why}"))
        self._wake()

    # --- httptools callbacks ------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self._framed = True

    def on_headers_complete(self) -> None:
        if not self._expecting:  # a second answer after ours, in the same bytes
            self.reusable = False
            return
        status = self._parser.get_status_code()
        if status >= 200:  # a 1xx answer is interim: the real one follows on this connection
            self.status = status
            self._wake()

    def on_body(self, body: bytes) -> None:
        if not self._expecting:
            return
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > _HIGH_WATER and not self._paused and self._transport is not None:
            self._transport.pause_reading()
            self._paused = True
        self._wake()

    def on_message_complete(self) -> None:
        if self.status and self._expecting:
            self.complete, self._expecting = True, False
            self.reusable = self.reusable and self._parser.should_keep_alive()
            self._wake()
        self._framed = False

    # --- the request side ---------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        """Write a whole request; the previous answer must be complete and taken."""
        self.status, self.complete, self.answered = 0, False, False
        self._expecting = True
        assert self._transport is not None
        self._transport.write(data)

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

    def _fail(self, error: HttpError) -> None:
        if self.error is None:
            self.error = error
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class Pool:
    """Keep-alive connections to one origin, each carrying one request at a time.

    There is no limit on connections: one is opened per request in flight, and the caller
    bounds how many requests are in flight (the soak's concurrency).
    """

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        """Path of the base URL that every request path is appended to."""
        self.authority = parts.netloc.rpartition("@")[2]
        """The `Host` header: host[:port] as written in the URL."""
        self._ssl = ssl.create_default_context() if parts.scheme == "https" else None
        self._idle: list[Connection] = []
        self._open: set[Connection] = set()
        self._closed = False

    async def send(self, request: bytes) -> Connection:
        """Send a whole request; its connection once the answer's headers are in.

        A reused connection the server closed before answering is retried on another (RFC
        9112 §9.3.1: a request the server never answered may be sent again); llama.cpp closes
        the connection after every stream without saying so. Give the connection back with
        `release` (after taking the whole answer) or `discard`.
        """
        for attempt in range(_STALE_RETRIES + 1):
            connection = self._reuse() if attempt < _STALE_RETRIES else None
            fresh = connection is None
            if connection is None:
                connection = await self._connect()
            try:
                connection.send(request)
                await connection.headers()
                return connection
            except Disconnected:
                self.discard(connection)
                if fresh or connection.answered:
                    raise
            except BaseException:  # a failure, a timeout or a stop: the answer is abandoned
                self.discard(connection)
                raise
        raise AssertionError("unreachable: the last attempt always uses a fresh connection")

    def release(self, connection: Connection) -> None:
        """Take back a connection whose answer was read whole, keeping it alive if allowed."""
        if (
            connection.complete
            and connection.reusable
            and not connection.closed
            and not self._closed
        ):
            self._idle.append(connection)
        else:
            self.discard(connection)

    def discard(self, connection: Connection) -> None:
        """Drop a connection (its answer unfinished, failed, or not to be reused)."""
        self._open.discard(connection)
        if connection.complete:
            connection.close()
        else:
            connection.abort()

    async def close(self) -> None:
        """Close every connection; later requests fail."""
        self._closed = True
        for connection in list(self._open):
            self.discard(connection)
        self._idle.clear()
        await asyncio.sleep(0)  # let the transports report their close

    def _reuse(self) -> Connection | None:
        """The most recently used idle connection still open, if any."""
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed and connection.reusable:
                return connection
            self.discard(connection)
        return None

    async def _connect(self) -> Connection:
        if self._closed:
            raise ConnectFailed("the connection pool is closed")
        loop = asyncio.get_running_loop()
        try:
            _, connection = await loop.create_connection(
                lambda: Connection(loop), self.host, self.port, ssl=self._ssl
            )
        except OSError as exc:  # refused, unresolvable, unreachable, TLS handshake (SSLError)
            raise ConnectFailed(f"cannot connect to {self.authority}: {exc}") from exc
        self._open.add(connection)
        return connection
