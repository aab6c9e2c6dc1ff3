"""Forward proxies: `HTTP_PROXY`, `HTTPS_PROXY` and `NO_PROXY`, read as curl and the standard
library read them, for every connection to a target (`targets.pool`: generation requests,
model discovery, `/metrics` scrapes).

The variables are read by `urllib.request` (lower case first, then upper case; `NO_PROXY` takes
host names, domain suffixes, `host:port` and `*`); only the parsing of the proxy's URL and the
CONNECT handshake are written here (RFC 9110 §9.3.6), since the pool speaks HTTP/1.1 itself. A
plain-http target is reached through an http proxy with absolute-form request targets (RFC
9112 §3.2.2); an https target through a CONNECT tunnel, TLS to the target inside it, so the
proxy sees neither the prompts nor the API key. The aiohttp sessions that remain (an HTTP
reference, the guard, a campaign's health checks) are given the same proxy
(`aiohttp_proxy`).
"""

from __future__ import annotations

import asyncio
import base64
import urllib.request
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from soakgate import secrets
from soakgate.errors import UsageError

_MAX_CONNECT_ANSWER = 16 * 1024  # a CONNECT answer's head longer than this is not a proxy's


@dataclass(frozen=True, slots=True)
class Proxy:
    """An http forward proxy that a target's connections go through."""

    host: str
    port: int
    shown: str
    """Its URL without credentials (for messages and the store)."""
    authorization: str | None = field(default=None, repr=False)
    """The `Proxy-Authorization` value for credentials in its URL."""

    def head_fields(self) -> dict[str, str]:
        """Header fields every request through this proxy carries."""
        return {} if self.authorization is None else {"Proxy-Authorization": self.authorization}


def proxy_for(url: str) -> Proxy | None:
    """The proxy the environment names for `url`, or None (no variable, or `NO_PROXY` covers
    its host); a proxy soakgate cannot use is a UsageError naming the variable."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    value = proxies.get(parts.scheme)
    if not value:
        return None
    host = parts.hostname or ""
    with_port = f"{host}:{parts.port}" if parts.port else host
    if urllib.request.proxy_bypass(with_port):  # NO_PROXY (the environment's, on Linux)
        return None
    return parse_proxy(value, f"{parts.scheme.upper()}_PROXY")


def parse_proxy(value: str, variable: str) -> Proxy:
    """An http proxy's URL (`http://[user:password@]host[:port]`; no scheme means http, port
    1080 when none, as curl reads it)."""
    text = value if "://" in value else f"http://{value}"
    parts = urlsplit(text)
    shown = secrets.mask_url(text)
    if parts.scheme != "http":
        raise UsageError(
            f"{variable}={shown}: only http:// proxies are supported (an https target is still "
            "encrypted end to end through one, in a CONNECT tunnel)"
        )
    try:
        port = parts.port or 1080
    except ValueError:
        raise UsageError(f"{variable}={shown}: the proxy's port is not a port number") from None
    if not parts.hostname:
        raise UsageError(f"{variable}={shown}: no proxy host")
    authorization = None
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        secret = base64.b64encode(pair.encode()).decode()
        secrets.register(secret)
        if parts.password:
            secrets.register(unquote(parts.password))
        authorization = f"Basic {secret}"
    netloc = parts.netloc.rpartition("@")[2]
    return Proxy(parts.hostname, port, f"http://{netloc}", authorization)


def aiohttp_proxy(url: str) -> dict[str, Any]:
    """aiohttp's keyword arguments for the proxy `url` goes through (none without one)."""
    import aiohttp  # imported here: a soak's own connections do not use it

    proxy = proxy_for(url)
    if proxy is None:
        return {}
    if proxy.authorization is None:
        return {"proxy": proxy.shown}
    return {"proxy": proxy.shown, "proxy_auth": aiohttp.BasicAuth.decode(proxy.authorization)}


class ProxyRefused(Exception):
    """The proxy would not open a tunnel (its status line, or what went wrong)."""


class Tunnel(asyncio.Protocol):
    """The client side of a CONNECT handshake: sends it, waits for the proxy's answer head."""

    def __init__(self, request: bytes) -> None:
        self._request = request
        self._buffer = bytearray()
        self.answered: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.write(self._request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        if self.answered.done():
            return
        self._buffer += data
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buffer) > _MAX_CONNECT_ANSWER:
                self.answered.set_exception(ProxyRefused("an answer head longer than 16 KiB"))
            return
        status = bytes(self._buffer[: self._buffer.find(b"\r\n")]).decode("latin-1")
        fields = status.split(" ", 2)
        if len(fields) < 2 or not fields[0].startswith("HTTP/1.") or not fields[1].isdigit():
            self.answered.set_exception(ProxyRefused(f"not an HTTP answer: {status[:80]!r}"))
        elif not 200 <= int(fields[1]) < 300:
            self.answered.set_exception(ProxyRefused(status[:120]))
        elif len(self._buffer) > end + 4:  # the target speaks only after our TLS hello
            self.answered.set_exception(ProxyRefused("bytes after its answer, before TLS"))
        else:
            self.answered.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.answered.done():
            self.answered.set_exception(ProxyRefused("it closed the connection"))


def connect_request(authority: str, proxy: Proxy) -> bytes:
    """The CONNECT request for a tunnel to `authority` (host:port)."""
    lines = [f"CONNECT {authority} HTTP/1.1", f"Host: {authority}"]
    lines += [f"{name}: {value}" for name, value in proxy.head_fields().items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
