"""A gateway double on loopback: forwards OpenAI-compatible requests to an upstream server and,
as LiteLLM and Envoy do, sends a request again when the upstream answers 5xx or a body that is
not JSON, then returns the last answer with the gateway's retry headers.

    python -m tests.gateway --upstream URL --flavour litellm|envoy --log FILE   # prints its URL

`litellm` answers `x-litellm-attempted-retries: N` (and `x-litellm-model-api-base`), `envoy`
`x-envoy-attempt-count: N + 1` (and `x-envoy-upstream-service-time`). Every request it read is
logged, one JSON line each (request id, upstream attempts, the status returned), so a test can
compare the rows stored with what the gateway did. Streams are passed through, never retried
(a gateway cannot take back a stream it has begun). aiohttp on both sides.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from tests.hostile import LoggingServerProcess

RETRIES = 3
"""Upstream attempts after the first, at most."""


class Gateway:
    def __init__(self, upstream: str, flavour: str, log: Path) -> None:
        self.upstream, self.flavour = upstream.rstrip("/"), flavour
        self.log = log.open("a", buffering=1)
        self.session: aiohttp.ClientSession | None = None

    async def forward(self, request: web.Request) -> web.StreamResponse:
        assert self.session is not None
        body = await request.read()
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() in ("content-type", "x-request-id", "authorization")}  # fmt: skip
        streamed = request.method == "POST" and _streamed(body)
        url = f"{self.upstream}{request.path_qs}"
        started = time.monotonic()
        attempts = 0
        while True:
            attempts += 1
            upstream = await self.session.request(request.method, url, data=body, headers=headers)
            if streamed:
                return await self._pass_stream(request, upstream, attempts)
            payload = await upstream.read()
            upstream.release()
            if not _retryable(upstream.status, payload) or attempts > RETRIES:
                break
        self._record(request, attempts, upstream.status)
        answer = web.Response(body=payload, status=upstream.status,
                              content_type=upstream.content_type)  # fmt: skip
        answer.headers.update(self._headers(attempts, time.monotonic() - started))
        return answer

    async def _pass_stream(
        self, request: web.Request, upstream: aiohttp.ClientResponse, attempts: int
    ) -> web.StreamResponse:
        self._record(request, attempts, upstream.status)
        answer = web.StreamResponse(status=upstream.status)
        answer.content_type = upstream.content_type
        answer.headers.update(self._headers(attempts, 0.0))
        await answer.prepare(request)
        async for chunk in upstream.content.iter_any():
            await answer.write(chunk)
        upstream.release()
        await answer.write_eof()
        return answer

    def _headers(self, attempts: int, seconds: float) -> dict[str, str]:
        if self.flavour == "litellm":
            return {"x-litellm-attempted-retries": str(attempts - 1),
                    "x-litellm-model-api-base": self.upstream}  # fmt: skip
        return {"x-envoy-attempt-count": str(attempts),
                "x-envoy-upstream-service-time": str(int(seconds * 1000))}  # fmt: skip

    def _record(self, request: web.Request, attempts: int, status: int) -> None:
        if request.method == "POST":
            line = {"rid": request.headers.get("x-request-id"), "attempts": attempts,
                    "status": status}  # fmt: skip
            self.log.write(json.dumps(line) + "\n")


def _streamed(body: bytes) -> bool:
    try:
        return bool(json.loads(body).get("stream"))
    except (ValueError, AttributeError):
        return False


def _retryable(status: int, payload: bytes) -> bool:
    """What LiteLLM retries: an upstream 5xx, or an answer it cannot parse."""
    if status >= 500:
        return True
    try:
        json.loads(payload)
    except ValueError:
        return True
    return False


class GatewayProcess(LoggingServerProcess):
    """The gateway as a subprocess on loopback; `seen()`: every generation request it answered
    (`rid`, upstream `attempts`, the `status` it returned)."""

    def __init__(self, upstream: str, flavour: str, log: Path) -> None:
        super().__init__("tests.gateway", ["--upstream", upstream, "--flavour", flavour], log)


async def _serve(upstream: str, flavour: str, log: Path) -> None:
    gateway = Gateway(upstream, flavour, log)
    gateway.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))
    await serve_forever(gateway.forward)


async def serve_forever(handler: Any) -> None:
    """Serve every path with `handler` on a free loopback port; print the URL; never return."""
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"http://127.0.0.1:{port}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--flavour", choices=("litellm", "envoy"), default="litellm")
    parser.add_argument("--log", type=Path, required=True)
    args = parser.parse_args()
    asyncio.run(_serve(args.upstream, args.flavour, args.log))


if __name__ == "__main__":
    main()
