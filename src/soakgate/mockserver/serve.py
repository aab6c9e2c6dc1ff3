"""Run a mock server until SIGTERM/SIGINT, announcing readiness with one line on stdout."""

from __future__ import annotations

import asyncio
import signal
import socket
import ssl
import sys
from collections.abc import Callable

from soakgate.errors import UsageError
from soakgate.mockserver.config import MockConfig
from soakgate.mockserver.knobs import describe

READY_PREFIX = "soakgate-mock listening on "
"""Start of the one readiness line printed to stdout once the socket is listening."""
_BACKLOG = 2048  # closed-loop soaks open hundreds of connections at once


def _listen(host: str, port: int) -> socket.socket:
    """A bound, listening socket; translated to UsageError when the address cannot be used."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(_BACKLOG)
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


def _announce(url: str) -> None:
    sys.stdout.write(f"{READY_PREFIX}{url}\n")
    sys.stdout.flush()


async def serve(
    config: MockConfig,
    stop: asyncio.Event | None = None,
    ready: Callable[[str], None] = _announce,
) -> None:
    """Serve until `stop` is set (or SIGTERM/SIGINT when no event is given); `ready(url)` is
    called once listening (default: print the readiness line)."""
    from aiohttp import web

    from soakgate.mockserver.app import MockServer

    context = _tls_context(config)
    sock = _listen(config.host, config.port)
    server = MockServer(config)
    if config.knobs or config.knob_collapse:  # what a configuration search sees is what it set
        print(
            f"soakgate-mock: {describe(config.knobs, server.injector.knob_rate)}", file=sys.stderr
        )
    runner = web.AppRunner(
        server.make_app(), access_log=None, handle_signals=False, shutdown_timeout=0.5
    )
    try:
        await runner.setup()
        await web.SockSite(runner, sock, backlog=_BACKLOG, ssl_context=context).start()
    except BaseException:
        sock.close()
        await runner.cleanup()
        raise
    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
    port = sock.getsockname()[1]
    host = f"[{config.host}]" if ":" in config.host else config.host
    ready(f"{'https' if context else 'http'}://{host}:{port}")
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def _tls_context(config: MockConfig) -> ssl.SSLContext | None:
    """The server's TLS context (None: plain http); a file it cannot use is a UsageError."""
    if config.tls_cert is None:
        if config.tls_key or config.tls_client_ca:
            raise UsageError("--tls-key and --tls-client-ca need --tls-cert")
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(config.tls_cert, config.tls_key)
        if config.tls_client_ca is not None:
            context.load_verify_locations(config.tls_client_ca)
            context.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as exc:
        raise UsageError(f"mock server TLS: {exc}") from None
    return context


def run_server(config: MockConfig) -> int:
    """Blocking entry point used by `soakgate mock-server` and `python -m soakgate.mockserver`."""
    asyncio.run(serve(config))
    return 0
