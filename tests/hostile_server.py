"""A hostile OpenAI-compatible server on plain asyncio streams, exact to the byte.

Each scenario answers the n-th generation request (0-based, counted across connections) with
bytes it writes itself, so a misbehaviour is exactly what the test says. Every request received
is appended to a log file (`n request_id`), so a test can assert that the rows stored equal what
the server saw. Run as a process: `python -m tests.hostile_server --scenario NAME --port-file F`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
from collections.abc import Callable
from pathlib import Path

Answer = Callable[[int, dict[str, object], dict[str, str]], bytes]
"""(n, request body, request headers in lower case) -> the bytes to answer with."""
SCENARIOS: dict[str, Answer] = {}


def scenario(name: str) -> Callable[[Answer], Answer]:
    """Register an answer function under a scenario name."""

    def add(fn: Answer) -> Answer:
        SCENARIOS[name] = fn
        return fn

    return add


def http_answer(
    body: bytes, status: str = "200 OK", content_type: str = "application/json"
) -> bytes:
    """A whole keep-alive HTTP/1.1 answer with a Content-Length."""
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def completion_body(text_json: str, usage: str = '{"prompt_tokens": 3, "completion_tokens": 4}',
                    extra: str = "") -> bytes:  # fmt: skip
    """A completions body whose text (and usage) are given as raw JSON, escapes and all."""
    choice = f'{{"index": 0, "text": {text_json}, "finish_reason": "length"{extra}}}'
    return f'{{"id": "x", "object": "text_completion", "choices": [{choice}], "usage": {usage}}}'.encode()


CLEAN = completion_body('"A clean answer about caches."')


@scenario("clean")
def clean(n: int, request: dict[str, object], headers: dict[str, str]) -> bytes:
    """Every answer is ordinary text."""
    return http_answer(CLEAN)


@scenario("lone_surrogate")
def lone_surrogate(n: int, request: dict[str, object], headers: dict[str, str]) -> bytes:
    """Answer 7 carries a lone surrogate escape in its text (valid JSON, not valid Unicode)."""
    return http_answer(completion_body('"broken \\ud800 text"') if n == 7 else CLEAN)


@scenario("huge_usage")
def huge_usage(n: int, request: dict[str, object], headers: dict[str, str]) -> bytes:
    """Answer 7 reports 2**64 completion tokens (no SQLite integer holds it)."""
    usage = f'{{"prompt_tokens": {2**63}, "completion_tokens": {2**64}}}'
    return http_answer(completion_body('"text"', usage) if n == 7 else CLEAN)


@scenario("huge_token_id")
def huge_token_id(n: int, request: dict[str, object], headers: dict[str, str]) -> bytes:
    """Answer 7 returns a token id of 2**31 (past any int32 vocabulary)."""
    extra = f', "token_ids": [1, 2, {2**31}, 3]'
    usage = '{"prompt_tokens": 3, "completion_tokens": 4}'
    return http_answer(completion_body('"text"', usage, extra) if n == 7 else CLEAN)


@scenario("echo_key")
def echo_key(n: int, request: dict[str, object], headers: dict[str, str]) -> bytes:
    """A gateway that refuses every 4th request, echoing the credentials it was sent."""
    if n % 4:
        return http_answer(CLEAN)
    body = json.dumps({"error": f"invalid credentials: {headers.get('authorization', '')}"})
    return http_answer(body.encode(), "401 Unauthorized")


MODELS = http_answer(b'{"object": "list", "data": [{"id": "hostile", "object": "model"}]}')


class Server:
    """Reads HTTP/1.1 requests off each connection and answers them with the scenario."""

    def __init__(self, answer: Answer, log: Path | None) -> None:
        self.answer = answer
        self.log = log.open("a", buffering=1) if log else None
        self.count = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                fields = {k.strip().lower(): v.strip() for k, _, v in
                          (line.partition(":") for line in lines[1:] if line)}  # fmt: skip
                body = await reader.readexactly(int(fields.get("content-length", "0")))
                if lines[0].startswith("GET /v1/models"):
                    writer.write(MODELS)
                elif lines[0].startswith("POST"):
                    n, self.count = self.count, self.count + 1
                    if self.log is not None:
                        self.log.write(f"{n} {fields.get('x-request-id', '')}\n")
                    writer.write(self.answer(n, json.loads(body or b"{}"), fields))
                else:
                    writer.write(http_answer(b"{}", "404 Not Found"))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def main(args: argparse.Namespace) -> None:
    server = Server(SCENARIOS[args.scenario], args.log)
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    args.port_file.write_text(str(port))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with listener:
        await asyncio.wait_for(stop.wait(), args.lifetime)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), required=True)
    parser.add_argument("--port-file", type=Path, required=True)
    parser.add_argument("--log", type=Path)
    parser.add_argument("--lifetime", type=float, default=300.0, help="seconds before it exits")
    asyncio.run(main(parser.parse_args()))
