"""Keep-alive connections to one origin, and when a request may be sent again.

A request is written once. A pooled connection is checked just before it is used (a close
or bytes nobody asked for, seen by the kernel but perhaps not yet by the event loop, retire
it unused); only a request whose write failed at once (not one byte left the machine) goes
out again on another connection. A request the server closed the connection on after it was
written is a `Dropped` failure: the server may have worked on it for seconds (RFC 9112
§9.3.1 lets a client retry only what it knows was not processed).

Some servers close a keep-alive connection right after an answer without saying so (llama.cpp
after every stream, a few milliseconds later), so a connection reused at once would carry a
request into that close. A new pool therefore lets each connection rest `probation_s` after
its answer before reusing it, opening new connections meanwhile: an origin whose connections
close while resting is never reused again; one whose connections outlive their rest and
answer again is trusted, and from then on a connection is reused as soon as it is free.
"""

from __future__ import annotations

import asyncio
import select
import ssl
import time
from collections import deque
from urllib.parse import urlsplit

from soakgate.targets.http1 import ConnectFailed, Connection, Disconnected, HttpError
from soakgate.targets.proxy import Proxy, ProxyRefused, Tunnel, connect_request

PROBATION_S = 0.1  # llama.cpp's close followed its last chunk by 0.01-7.6 ms on a busy machine
_TRUST_AFTER = 2  # connections that outlived their rest and answered again: the origin keeps them
_SILENT_CLOSE_S = 1.0  # an idle connection closed this soon after its answer: closed after answers
_IDLE_EXPIRY_S = 2.0  # older idle connections are closed, not reused (uvicorn closes at 5 s)
_MAX_WRITES = 3  # connections tried for one request whose writes failed at once


class Pool:
    """Keep-alive connections to one origin, each carrying one request at a time.

    There is no limit on connections: one is opened per request in flight (and, while the pool
    is on probation, per request whose connection is resting), and the caller bounds how many
    requests are in flight (the soak's concurrency).
    """

    def __init__(
        self,
        url: str,
        probation_s: float = PROBATION_S,
        ssl_context: ssl.SSLContext | None = None,
        proxy: Proxy | None = None,
    ) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        """Path of the base URL that every request path is appended to."""
        self.authority = parts.netloc.rpartition("@")[2]
        """The `Host` header: host[:port] as written in the URL."""
        self.probation_s = probation_s
        self.keeps_alive: bool | None = None
        """Whether the origin keeps connections open after answers (None: not known yet)."""
        https = parts.scheme == "https"
        self._ssl = (ssl_context or ssl.create_default_context()) if https else None
        self.proxy = proxy
        """The forward proxy the connections go through (`targets.proxy`), if any."""
        self.target_prefix = self.prefix
        """What every request target starts with: the base path, or for a plain-http target
        through a proxy the absolute form (`http://host:port/path`, RFC 9112 §3.2.2)."""
        self.head_fields: dict[str, str] = {}
        """Header fields for the proxy in every request (its credentials, plain http only)."""
        if proxy is not None and not https:
            self.target_prefix = f"http://{self.authority}{self.prefix}"
            self.head_fields = proxy.head_fields()
        self._idle: deque[Connection] = deque()  # oldest first
        self._open: set[Connection] = set()
        self._kept = 0
        self._closed = False
        self._poll = select.poll()

    async def send(self, request: bytes, max_body: int) -> Connection:
        """Send a whole request whose answer's body may be up to `max_body` bytes; its
        connection once the answer's headers are in, with `attempts` set.

        Give the connection back with `release` (after taking the whole answer) or `discard`.
        Failures raise an `HttpError` whose `attempts` says how often the request was written.
        """
        attempts = 0
        while True:
            connection = self._checkout()
            fresh = connection is None
            if connection is None:
                connection = await self._connect()
            attempts += 1
            try:
                if not connection.send(request, max_body):  # not one byte left: may go again
                    self.discard(connection)
                    if attempts < _MAX_WRITES:
                        continue
                    how = "a new" if fresh else "a reused"
                    raise Disconnected(f"the server reset {how} connection before the request")
                await connection.headers()
            except HttpError as exc:
                self.discard(connection)
                exc.attempts = attempts
                raise
            except BaseException:  # a timeout or a stop: the answer is abandoned
                self.discard(connection)
                raise
            connection.attempts = attempts
            return connection

    def release(self, connection: Connection) -> None:
        """Take back a connection whose answer was read whole, keeping it alive if allowed."""
        if (
            connection.complete
            and connection.reusable
            and not connection.closed
            and not self._closed
            and self.keeps_alive is not False
        ):
            if self.keeps_alive is None and connection.answers > 1:  # reused after its rest
                self._kept += 1
                self.keeps_alive = self._kept >= _TRUST_AFTER or None
            connection.idle_since = time.monotonic()
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

    def _checkout(self) -> Connection | None:
        """An idle connection fit to carry a request now, or None for a new one."""
        idle, now = self._idle, time.monotonic()
        while idle:  # the oldest first: closed (`reusable` is False then) or expired
            oldest = idle[0]
            if oldest.reusable and now - oldest.idle_since <= _IDLE_EXPIRY_S:
                break
            self._retire(idle.popleft())
        if self.keeps_alive is False:
            while idle:
                self.discard(idle.popleft())
        if not idle:
            return None
        if self.keeps_alive:  # trusted: the most recently used first
            while idle:
                connection = idle.pop()
                if self._fit(connection, now):
                    return connection
                self._retire(connection)
            return None
        if now - idle[0].idle_since < self.probation_s:  # on probation: the oldest, once rested
            return None
        connection = idle.popleft()
        if self._fit(connection, now):
            return connection
        self._retire(connection)
        return None

    def _fit(self, connection: Connection, now: float) -> bool:
        """Open, reusable, not expired, and nothing waiting on its socket (a close or stray
        bytes the event loop has not read yet)."""
        if connection.closed or not connection.reusable:
            return False
        if now - connection.idle_since > _IDLE_EXPIRY_S:
            return False
        if connection.fd < 0:
            return True
        self._poll.register(connection.fd, select.POLLIN)
        try:
            return not self._poll.poll(0)  # POLLHUP and POLLERR are reported whatever is asked
        finally:
            self._poll.unregister(connection.fd)

    def _retire(self, connection: Connection) -> None:
        """Discard an idle connection; one the server closed soon after its answer, unasked,
        means the origin closes connections after answers: none is reused from then on."""
        lost = connection.lost_at
        if lost is not None and lost - connection.idle_since < _SILENT_CLOSE_S:
            self.keeps_alive = False
        self.discard(connection)

    async def _connect(self) -> Connection:
        if self._closed:
            raise ConnectFailed("the connection pool is closed")
        loop = asyncio.get_running_loop()
        proxy = self.proxy
        try:
            if proxy is None:
                _, connection = await loop.create_connection(
                    lambda: Connection(loop), self.host, self.port, ssl=self._ssl
                )
            elif self._ssl is None:
                _, connection = await loop.create_connection(
                    lambda: Connection(loop), proxy.host, proxy.port
                )
            else:
                connection = await self._tunnel(proxy)
        except OSError as exc:  # refused, unresolvable, unreachable, TLS handshake (SSLError)
            via = "" if proxy is None else f" through the proxy {proxy.shown}"
            raise ConnectFailed(f"cannot connect to {self.authority}{via}: {exc}") from exc
        self._open.add(connection)
        return connection

    async def _tunnel(self, proxy: Proxy) -> Connection:
        """A connection to the target inside a CONNECT tunnel through `proxy`, TLS end to end."""
        loop, context = asyncio.get_running_loop(), self._ssl
        assert context is not None  # only https targets are tunnelled
        host = f"[{self.host}]" if ":" in self.host else self.host
        request = connect_request(f"{host}:{self.port}", proxy)
        transport, tunnel = await loop.create_connection(
            lambda: Tunnel(request), proxy.host, proxy.port
        )
        try:
            await tunnel.answered
            secured = await loop.start_tls(transport, tunnel, context, server_hostname=self.host)
        except ProxyRefused as exc:
            transport.abort()
            raise ConnectFailed(
                f"the proxy {proxy.shown} did not open a tunnel to {self.authority}: {exc}"
            ) from exc
        except BaseException:
            transport.abort()
            raise
        if secured is None:  # the loop closed the transport under us
            raise ConnectFailed(f"the tunnel to {self.authority} closed during TLS")
        connection = Connection(loop)
        secured.set_protocol(connection)
        connection.connection_made(secured)
        return connection
