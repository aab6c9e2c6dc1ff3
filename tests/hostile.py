"""A hostile OpenAI-compatible server on plain asyncio streams: each behaviour misbehaves
exactly to the byte (a BOM, a lone CR, a dropped connection after 0.5 s of work, a 200 MB
body, a stray answer, `Retry-After`, ...).

    python -m tests.hostile BEHAVIOUR --log FILE     # prints its URL, serves until killed

Every generation request it reads is logged, one JSON line each (connection, request id, the
text it answered with or null, the request's headers), so that a test can compare the rows in
the database with what the server saw. `HostileProcess` runs it as a subprocess.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import json
import re
import subprocess
import sys
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import brotli

from soakgate.targets.encoding import zstd

REPO = Path(__file__).resolve().parents[1]
COLLAPSE = "!" * 300  # what a broken kernel emits: caught by the default char_run detector
BOM = b"\xef\xbb\xbf"
BIG = 200 * 1024 * 1024  # bytes of the huge answers


@dataclass
class Request:
    """One request as read: which connection, how many came before it on that connection."""

    connection: int
    nth: int
    head: bytes
    body: dict[str, Any]

    @property
    def rid(self) -> str:
        match = re.search(rb"(?i)\r\nx-request-id: *([^\r]*)", self.head)
        return match.group(1).decode() if match else ""

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def chat(self) -> bool:
        return b"/chat/" in self.head.split(b"\r\n", 1)[0]


Writer = asyncio.StreamWriter
Handler = Callable[["Hostile", Request, Writer], Awaitable[bool]]  # False: close the connection


class Hostile:
    """The server: reads requests, lets the behaviour answer, logs what it saw."""

    def __init__(self, behaviour: str, log: Path | None = None) -> None:
        self.handler = BEHAVIOURS[behaviour]
        self.log = log.open("a", buffering=1) if log else None
        self.connections = 0
        self.count = 0  # generation requests read, all connections
        self.last: dict[int, bytes] = {}  # connection -> its last answer (the `stray` behaviour)

    async def handle(self, reader: asyncio.StreamReader, writer: Writer) -> None:
        index, self.connections = self.connections, self.connections + 1
        nth = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
                raw = await reader.readexactly(int(length.group(1)) if length else 0)
                if head.startswith(b"GET /v1/models"):
                    writer.write(_json_answer({"data": [{"id": "hostile"}]}))
                    continue
                if not head.startswith(b"POST "):
                    writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    continue
                request = Request(index, nth, head, json.loads(raw or b"{}"))
                nth += 1
                self.count += 1
                if not await self.handler(self, request, writer):
                    return
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def saw(self, request: Request, text: str | None, **extra: Any) -> None:
        """Log a request and the text answered to it (None: no answer), with `extra` fields."""
        headers = dict(
            (k.decode().lower(), v.decode())
            for k, v in re.findall(rb"\r\n([^:\r]+): *([^\r]*)", request.head)
        )
        line = {"connection": request.connection, "nth": request.nth, "rid": request.rid,
                "text": text, "headers": headers, "body": request.body,
                "path": request.head.split(b" ", 2)[1].decode(), **extra}  # fmt: skip
        if self.log is not None:
            self.log.write(json.dumps(line) + "\n")

    def text(self, request: Request) -> str:
        """The text of an answer: a collapse for every other request, else a clean sentence."""
        if self.count % 2 == 0:
            return COLLAPSE
        return f"A clean answer to {request.rid}, in plain words."


# --- bytes of answers -------------------------------------------------------------------------


def _json_answer(body: dict[str, Any], status: str = "200 OK", extra: bytes = b"") -> bytes:
    data = json.dumps(body).encode()
    return b"HTTP/1.1 %s\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s" % (
        status.encode(), extra, len(data), data,
    )  # fmt: skip


def choice(request: Request, text: str, finish: str | None, index: int = 0) -> dict[str, Any]:
    """One choice of a body or a stream event."""
    if request.chat:
        key = "delta" if request.stream else "message"
        return {"index": index, key: {"content": text}, "finish_reason": finish}
    return {"index": index, "text": text, "finish_reason": finish}


def event(payload: dict[str, Any] | str, end: bytes = b"\n") -> bytes:
    """One SSE event (its line ends `end`)."""
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return b"data: " + data.encode() + end + end


def sse_body(request: Request, text: str, end: bytes = b"\n") -> bytes:
    """A whole clean stream: the text in four events, the finish, usage, [DONE]."""
    step = max(1, len(text) // 4)
    pieces = [text[i : i + step] for i in range(0, len(text), step)]
    events = [event({"choices": [choice(request, p, None)]}, end) for p in pieces]
    events.append(event({"choices": [choice(request, "", "length")]}, end))
    events.append(event({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 16}}, end))  # fmt: skip
    events.append(event("[DONE]", end))
    return b"".join(events)


def json_body(request: Request, text: str) -> bytes:
    return json.dumps({
        "choices": [choice(request, text, "length")],
        "usage": {"prompt_tokens": 3, "completion_tokens": 16},
    }).encode()  # fmt: skip


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces if p) + b"0\r\n\r\n"


def head(request: Request, length: int | None = None, extra: bytes = b"") -> bytes:
    """A 200 head for the request's kind: SSE chunked, or JSON with this Content-Length."""
    if request.stream:
        kind, framing = b"text/event-stream", b"Transfer-Encoding: chunked\r\n"
    else:
        kind, framing = b"application/json", b"Content-Length: %d\r\n" % (length or 0)
    return b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\n%s%s\r\n" % (kind, framing, extra)


def answer(request: Request, text: str, extra: bytes = b"") -> bytes:
    """A well-formed answer with this text."""
    if request.stream:
        return head(request, extra=extra) + chunked(sse_body(request, text))
    body = json_body(request, text)
    return head(request, len(body), extra) + body


# --- behaviours -------------------------------------------------------------------------------


async def ok(server: Hostile, request: Request, writer: Writer) -> bool:
    text = server.text(request)
    server.saw(request, text)
    writer.write(answer(request, text))
    return True


async def drop_after_work(server: Hostile, request: Request, writer: Writer) -> bool:
    """Keep-alive: the first request of a connection is answered after 0.15 s (longer than a
    new pool lets a connection rest before reusing it); any later one is read, worked on for
    0.5 s, and its connection closed without a byte of answer."""
    if request.nth == 0:
        await asyncio.sleep(0.15)
        return await ok(server, request, writer)
    server.saw(request, None)
    await asyncio.sleep(0.5)
    return False


async def bom(server: Hostile, request: Request, writer: Writer) -> bool:
    """A UTF-8 BOM before the first event, which carries a collapse."""
    server.saw(request, COLLAPSE)
    writer.write(head(request) + chunked(BOM + sse_body(request, COLLAPSE)))
    return True


async def lone_cr(server: Hostile, request: Request, writer: Writer) -> bool:
    """Every SSE line ends with a lone CR (allowed by the standard), split across chunks."""
    text = server.text(request)
    server.saw(request, text)
    body = sse_body(request, text, end=b"\r")
    writer.write(head(request) + chunked(*(body[i : i + 7] for i in range(0, len(body), 7))))
    return True


async def two_choices(server: Hostile, request: Request, writer: Writer) -> bool:
    """An n=2 answer nobody asked for: choice 0 is a collapse, listed after a clean choice 1;
    streamed, their pieces interleave."""
    server.saw(request, COLLAPSE)
    clean = "A clean second choice nobody asked for."
    if not request.stream:
        body = json.dumps({"choices": [choice(request, clean, "length", 1),
                                       choice(request, COLLAPSE, "length", 0)]}).encode()  # fmt: skip
        writer.write(head(request, len(body)) + body)
        return True
    events = []
    for i in range(4):
        events.append(event({"choices": [choice(request, COLLAPSE[i * 75 : (i + 1) * 75], None, 0)]}))  # fmt: skip
        events.append(event({"choices": [choice(request, clean[i * 10 : (i + 1) * 10], None, 1)]}))  # fmt: skip
    events.append(event({"choices": [choice(request, "", "length", 1), choice(request, "", "length", 0)]}))  # fmt: skip
    writer.write(head(request) + chunked(*events, event("[DONE]")))
    return True


async def error_event(server: Hostile, request: Request, writer: Writer) -> bool:
    """`event: error` with a message but no `error` key, then a finish as if all were well."""
    server.saw(request, "Partial")
    error = b'event: error\ndata: {"message": "CUDA error: an illegal memory access"}\n\n'
    start = event({"choices": [choice(request, "Partial", None)]})
    finish = event({"choices": [choice(request, "", "stop")]})
    writer.write(head(request) + chunked(start, error, finish, event("[DONE]")))
    return True


def _encoded(coding: str) -> Handler:
    compress: dict[str, Callable[[bytes], bytes]] = {
        "gzip": gzip.compress, "deflate": zlib.compress, "br": brotli.compress,
        "zstd": zstd.compress,
    }  # fmt: skip

    async def encoded(server: Hostile, request: Request, writer: Writer) -> bool:
        """The answer compressed although the client asked for identity."""
        text = server.text(request)
        server.saw(request, text)
        extra = b"Content-Encoding: %s\r\n" % coding.encode()
        if request.stream:
            data = compress[coding](sse_body(request, text))
            thirds = len(data) // 3 + 1
            pieces = [data[i : i + thirds] for i in range(0, len(data), thirds)]
            writer.write(head(request, extra=extra) + chunked(*pieces))
        else:
            data = compress[coding](json_body(request, text))
            writer.write(head(request, len(data), extra) + data)
        return True

    return encoded


async def stray(server: Hostile, request: Request, writer: Writer) -> bool:
    """Echoes X-Request-Id, and answers each request on a connection with the previous
    request's answer again first (unasked for), then its own; each after 30 ms of work (so
    that connections outlive a new pool's probation and are reused)."""
    text = server.text(request)
    server.saw(request, text)
    await asyncio.sleep(0.03)
    own = answer(request, text, b"X-Request-Id: %s\r\n" % request.rid.encode())
    previous = server.last.get(request.connection)
    server.last[request.connection] = own
    if previous is not None:
        writer.write(previous)
        await writer.drain()
        await asyncio.sleep(0.01)
    writer.write(own)
    return True


async def huge(server: Hostile, request: Request, writer: Writer) -> bool:
    """A 200 MB answer of ordinary words, written as fast as the client takes it."""
    server.saw(request, None)
    words = "the cat sat on the mat and looked at the door " * 20
    if request.stream:
        piece = event({"choices": [choice(request, words, None)]})
        block = b"%x\r\n%s\r\n" % (len(piece), piece) * 64
        writer.write(head(request))
    else:
        start = b'{"choices":[{"index":0,"text":"'
        writer.write(head(request, BIG) + start)
        block = words.encode() * 64
    sent = 0
    while sent < BIG:
        writer.write(block)
        await writer.drain()
        sent += len(block)
    return False


async def endless_header(server: Hostile, request: Request, writer: Writer) -> bool:
    """A header whose value never ends."""
    server.saw(request, None)
    writer.write(b"HTTP/1.1 200 OK\r\nX-Padding: ")
    block = b"a" * 65536
    for _ in range(BIG // len(block)):
        writer.write(block)
        await writer.drain()
    return False


async def rate_limit(server: Hostile, request: Request, writer: Writer) -> bool:
    """429 with `Retry-After: 1`, every time."""
    server.saw(request, None)
    writer.write(_json_answer({"error": "slow down"}, "429 Too Many Requests", b"Retry-After: 1\r\n"))  # fmt: skip
    return True


async def overloaded(server: Hostile, request: Request, writer: Writer) -> bool:
    """503 without Retry-After, every time."""
    server.saw(request, None)
    writer.write(_json_answer({"error": "overloaded"}, "503 Service Unavailable"))
    return True


def _raw_choice(text_json: str, usage_json: str, extra: str = "") -> bytes:
    """A non-streamed completions body written as raw JSON, escapes and all (what JSON allows
    and SQLite cannot hold: a lone surrogate, integers past 64 or 32 bits)."""
    choice = f'{{"index": 0, "text": {text_json}, "finish_reason": "length"{extra}}}'
    return f'{{"choices": [{choice}], "usage": {usage_json}}}'.encode()


_USAGE = '{"prompt_tokens": 3, "completion_tokens": 4}'
UNSTORABLE = {
    # the 8th request's answer, as raw JSON; every other request gets an ordinary answer
    "lone-surrogate": _raw_choice('"broken \\ud800 text"', _USAGE),
    "huge-usage": _raw_choice(
        '"text"', f'{{"prompt_tokens": {2**63}, "completion_tokens": {2**64}}}'
    ),
    "huge-token-id": _raw_choice('"text"', _USAGE, f', "token_ids": [1, 2, {2**31}, 3]'),
}


def _unstorable(kind: str) -> Handler:
    async def unstorable(server: Hostile, request: Request, writer: Writer) -> bool:
        if server.count != 8 or request.stream:
            return await ok(server, request, writer)
        server.saw(request, None)
        body = UNSTORABLE[kind]
        writer.write(head(request, len(body)) + body)
        return True

    return unstorable


async def echo_key(server: Hostile, request: Request, writer: Writer) -> bool:
    """A gateway that refuses every 4th request, echoing the credentials it was sent."""
    if server.count % 4 != 1:
        return await ok(server, request, writer)
    server.saw(request, None)
    sent = re.search(rb"(?i)\r\nauthorization: *([^\r]*)", request.head)
    credentials = sent.group(1).decode() if sent else ""
    writer.write(_json_answer({"error": f"invalid credentials: {credentials}"}, "401 Unauthorized"))
    return True


MARKUP = (
    "[bold]b31[graph][/bold] cfg[/tmp] </td><script>alert(1)</script> <b>bold</b> *em* _u_ "
    "`code` [link](http://x.invalid) | cell | \x1b[31mred\x1b[0m :thumbs_up: $x^2$ "
    '=HYPERLINK("http://x.invalid") \\ {{ raw }} %s &amp;'
)
"""Text that is markup in every format soakgate renders to: rich, HTML, Markdown, a
spreadsheet's formula, an ANSI escape, a rich emoji code, matplotlib's mathtext, jinja."""


async def markup(server: Hostile, request: Request, writer: Writer) -> bool:
    """Every answer is MARKUP; every other one then collapses (a run of `!`)."""
    text = MARKUP + (COLLAPSE if server.count % 2 == 0 else " and a clean end.")
    server.saw(request, text)
    writer.write(answer(request, text))
    return True


def _prompt(request: Request) -> str:
    if request.chat:
        return " ".join(str(m.get("content", "")) for m in request.body.get("messages", []))
    return str(request.body.get("prompt", ""))


async def trigger(server: Hostile, request: Request, writer: Writer) -> bool:
    """Collapses exactly the prompts that contain TRIGGER, whatever else happens."""
    text = COLLAPSE if "TRIGGER" in _prompt(request) else "A clean answer, in plain words."
    server.saw(request, text)
    writer.write(answer(request, text))
    return True


async def hang(server: Hostile, request: Request, writer: Writer) -> bool:
    """Reads the request and never answers (the connection stays open)."""
    server.saw(request, None)
    await asyncio.sleep(3600)
    return False


async def reset(server: Hostile, request: Request, writer: Writer) -> bool:
    """Reads the request and resets the connection."""
    server.saw(request, None)
    transport = writer.transport
    sock = transport.get_extra_info("socket")
    if sock is not None:  # SO_LINGER 0: close with a RST, not a FIN
        import socket
        import struct

        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()
    return False


async def garbage(server: Hostile, request: Request, writer: Writer) -> bool:
    """A 200 whose body is not JSON (nor server-sent events)."""
    server.saw(request, None)
    body = b"<html>\x00\xff garbage \xfe</html>"
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
    return True


BUDGET_COLLAPSES = ("^" * 16, "-" * 16, "=" * 16, "~" * 16, "\n\n" + "_" * 16, "A " + "*" * 24)
"""Separator runs that fill a 16-token cut output (one token a character): collapses."""
BUDGET_ORDINARY = (
    "Results\n" + "=" * 12, "| a | b |\n|---|---|\n| 1 | 2 |\n|---", "```python\ndef f(x):",
    "Step 1\n" + "-" * 10 + "\nInstall", "Hmm" + "." * 20, "Chapter 1 " + "." * 30,
    "Title: soak\n" + "~" * 14, "┌" + "─" * 40,
)  # fmt: skip
"""Ordinary outputs a 16-token budget cuts at a rule, an underline or leader dots."""


async def budget_fill(server: Hostile, request: Request, writer: Writer) -> bool:
    """Every third request a separator run that fills the cut output (`BUDGET_COLLAPSES` in
    turn), the others an ordinary output cut at a rule (`BUDGET_ORDINARY` in turn); every answer
    `finish_reason` `length`, 16 completion tokens."""
    turn, kind = divmod(server.count - 1, 3)
    pool = BUDGET_COLLAPSES if kind == 0 else BUDGET_ORDINARY
    text = pool[(turn * 2 + kind) % len(pool)]
    server.saw(request, text)
    writer.write(answer(request, text))
    return True


TIMED_FIRST_S, TIMED_PACE_S, TIMED_TOKENS = 0.2, 0.05, 5


async def timed(server: Hostile, request: Request, writer: Writer) -> bool:
    """A stream timed to the byte, for latency: the head and an empty first event at once, the
    first token TIMED_FIRST_S later, then a token every TIMED_PACE_S; logs its own clock (when
    it had read the request, and when it began to write the first token and the last bytes: a
    client can read bytes before the server's clock is read again after writing them, so only
    the moment before the write bounds the client's own time from below)."""
    received = time.time()
    text = "".join(f" w{i}" for i in range(TIMED_TOKENS))
    writer.write(head(request) + chunked(event({"choices": [choice(request, "", None)]}))[:-5])
    await writer.drain()
    await asyncio.sleep(TIMED_FIRST_S)
    first = 0.0
    for i in range(TIMED_TOKENS):
        if i:
            await asyncio.sleep(TIMED_PACE_S)
        first = first or time.time()
        writer.write(chunked(event({"choices": [choice(request, f" w{i}", None)]}))[:-5])
        await writer.drain()
    usage = {"prompt_tokens": 3, "completion_tokens": TIMED_TOKENS}
    last = time.time()
    writer.write(chunked(event({"choices": [choice(request, "", "length")]}),
                         event({"choices": [], "usage": usage}), event("[DONE]")))  # fmt: skip
    await writer.drain()
    server.saw(request, text, received=received, first_token=first, last_byte=last)
    return True


BEHAVIOURS: dict[str, Handler] = {
    "timed": timed,
    "ok": ok, "drop-after-work": drop_after_work, "bom": bom, "lone-cr": lone_cr,
    "two-choices": two_choices, "error-event": error_event, "gzip": _encoded("gzip"),
    "deflate": _encoded("deflate"), "br": _encoded("br"), "zstd": _encoded("zstd"), "stray": stray, "huge": huge,
    "endless-header": endless_header, "rate-limit": rate_limit, "overloaded": overloaded,
    **{kind: _unstorable(kind) for kind in UNSTORABLE}, "echo-key": echo_key,
    "markup": markup, "trigger": trigger, "hang": hang, "reset": reset, "garbage": garbage,
    "budget-fill": budget_fill,
}  # fmt: skip


class LoggingServerProcess:
    """A test server (`python -m MODULE ARGS`) as a subprocess on loopback that prints its URL
    and logs one JSON line per request it read; `seen()` reads that log."""

    def __init__(self, module: str, args: list[str], log: Path) -> None:
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, "-m", module, *args, "--log", str(log)],
            cwd=REPO, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()
        if not self.url.startswith("http://"):
            self.stop()
            raise RuntimeError(f"{module} did not start ({' '.join(args)})")

    def seen(self) -> list[dict[str, Any]]:
        """Every request the server logged, in order."""
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def request_ids(self) -> list[str]:
        """Request ids of the requests the server logged, in order."""
        return [request["rid"] for request in self.seen()]

    def __enter__(self) -> LoggingServerProcess:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


class HostileProcess(LoggingServerProcess):
    """The hostile server as a subprocess on loopback."""

    def __init__(self, behaviour: str, log: Path) -> None:
        super().__init__("tests.hostile", [behaviour], log)


async def _serve(behaviour: str, log: Path | None) -> None:
    server = Hostile(behaviour, log)
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    print(f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}", flush=True)
    async with listener:
        await listener.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("behaviour", choices=sorted(BEHAVIOURS))
    parser.add_argument("--log", type=Path)
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args.behaviour, args.log))


if __name__ == "__main__":
    main()
