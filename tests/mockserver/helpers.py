"""Helpers to talk to the mock at the raw HTTP level (aiohttp's client, not soakgate's)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import aiohttp

from soakgate.mockserver import MockConfig
from soakgate.mockserver.serve import serve

T = TypeVar("T")


@asynccontextmanager
async def running_mock(config: MockConfig) -> AsyncIterator[tuple[str, aiohttp.ClientSession]]:
    """A mock served in this event loop, and a client session; both closed on exit."""
    stop = asyncio.Event()
    url: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve(config, stop, url.set_result))
    try:
        waiters: set[asyncio.Future[Any]] = {url, task}
        await asyncio.wait(waiters, timeout=10, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()  # raises what stopped the server
        base = url.result()
        timeout = aiohttp.ClientTimeout(total=20)
        async with aiohttp.ClientSession(base, timeout=timeout) as session:
            yield base, session
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


def run_against(config: MockConfig, body: Callable[[aiohttp.ClientSession], Awaitable[T]]) -> T:
    """Run `body(session)` against an in-process mock with `config`."""

    async def main() -> T:
        async with running_mock(config) as (_, session):
            return await body(session)

    return asyncio.run(main())


async def post(
    session: aiohttp.ClientSession, path: str, body: dict[str, Any], request_id: str | None = None
) -> tuple[int, bytes]:
    """POST JSON; returns (status, raw body)."""
    headers = {"X-Request-Id": request_id} if request_id else {}
    async with session.post(path, json=body, headers=headers) as response:
        return response.status, await response.read()


def sse_events(raw: bytes) -> list[str]:
    """The `data:` payloads of an SSE body, in order (including `[DONE]`)."""
    events = []
    for block in raw.decode().split("\n\n"):
        if block.strip():
            assert block.startswith("data: "), block
            events.append(block[len("data: ") :])
    return events


def parse_stream(raw: bytes) -> tuple[list[dict[str, Any]], bool]:
    """(JSON chunks, whether the stream ended with [DONE])."""
    events = sse_events(raw)
    done = bool(events) and events[-1] == "[DONE]"
    return [json.loads(e) for e in events if e != "[DONE]"], done


def completion(prompt: str = "Tell me about caches.", **extra: Any) -> dict[str, Any]:
    """A completions request body."""
    return {"model": "soakgate-mock", "prompt": prompt, "max_tokens": 32, **extra}


def chat(content: str = "Tell me about caches.", **extra: Any) -> dict[str, Any]:
    """A chat request body."""
    messages = [{"role": "user", "content": content}]
    return {"model": "soakgate-mock", "messages": messages, "max_tokens": 32, **extra}
