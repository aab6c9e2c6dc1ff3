"""A hostile proxy double on loopback for structured output: it forwards OpenAI-compatible
requests to a real server and, for a seeded share of them, replaces the request's structure
(`json_schema`, `response_format`, `structured_outputs`, `guided_json`) with the one another
request sent last — the server then constrains the answer with another request's schema, as a
grammar or token mask applied to the wrong request under load would.

    python -m tests.schema_swap --upstream URL --rate 0.2 --seed 1 --log FILE   # prints its URL

Every generation request is logged, one JSON line each: its request id and whether its
structure was swapped (the ground truth of `invalid_structure`). Streams are passed through.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from tests.gateway import serve_forever
from tests.hostile import LoggingServerProcess

FIELDS = ("json_schema", "response_format", "structured_outputs", "guided_json")


class SchemaSwap:
    def __init__(self, upstream: str, rate: float, seed: int, log: Path) -> None:
        self.upstream, self.rate = upstream.rstrip("/"), rate
        self.random = random.Random(seed)
        self.log = log.open("a", buffering=1)
        self.last: tuple[str, Any] | None = None
        self.session: aiohttp.ClientSession | None = None

    def _swap(self, body: dict[str, Any]) -> bool:
        """Put the structure another request sent last into `body` (True when it differs)."""
        field = next((f for f in FIELDS if f in body), None)
        if field is None:
            return False
        mine, other = body[field], self.last
        swap = other is not None and other != (field, mine) and self.random.random() < self.rate
        self.last = (field, mine)
        if swap and other is not None:
            del body[field]
            body[other[0]] = other[1]
        return swap

    async def forward(self, request: web.Request) -> web.StreamResponse:
        assert self.session is not None
        raw = await request.read()
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() in ("content-type", "x-request-id", "authorization")}  # fmt: skip
        swapped, streamed = False, False
        if request.method == "POST" and raw:
            body = json.loads(raw)
            swapped, streamed = self._swap(body), bool(body.get("stream"))
            raw = json.dumps(body).encode()
            line = {"rid": request.headers.get("x-request-id"), "swapped": swapped}
            self.log.write(json.dumps(line) + "\n")
        upstream = await self.session.request(
            request.method, f"{self.upstream}{request.path_qs}", data=raw, headers=headers
        )
        answer = web.StreamResponse(status=upstream.status)
        answer.content_type = upstream.content_type
        await answer.prepare(request)
        if streamed:
            async for chunk in upstream.content.iter_any():
                await answer.write(chunk)
        else:
            await answer.write(await upstream.read())
        upstream.release()
        await answer.write_eof()
        return answer


class SchemaSwapProcess(LoggingServerProcess):
    """The proxy as a subprocess on loopback; `seen()`: every generation request (`rid`,
    `swapped`)."""

    def __init__(self, upstream: str, rate: float, seed: int, log: Path) -> None:
        args = ["--upstream", upstream, "--rate", str(rate), "--seed", str(seed)]
        super().__init__("tests.schema_swap", args, log)


async def _serve(upstream: str, rate: float, seed: int, log: Path) -> None:
    proxy = SchemaSwap(upstream, rate, seed, log)
    # a new upstream connection per request: llama.cpp closes idle keep-alive connections,
    # and a request sent on one it just closed would be lost to the proxy, not to the server
    proxy.session = aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=300), connector=aiohttp.TCPConnector(force_close=True)
    )
    await serve_forever(proxy.forward)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--rate", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--log", type=Path, required=True)
    args = parser.parse_args()
    asyncio.run(_serve(args.upstream, args.rate, args.seed, args.log))


if __name__ == "__main__":
    main()
