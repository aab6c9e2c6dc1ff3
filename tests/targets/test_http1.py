"""targets/http1.py against a scripted raw HTTP/1.1 server on loopback: framing, keep-alive,
stale and broken connections, back-pressure, cancellation and TLS."""

from __future__ import annotations

import asyncio
import re
import shutil
import ssl
import subprocess
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

from soakgate.errors import UsageError
from soakgate.prompts import builtin_prompts
from soakgate.targets import OpenAIClient, RequestSpec, TargetSpec
from soakgate.targets.client import classify, make_session
from soakgate.targets.http1 import ConnectFailed, Disconnected, Dropped, ProtocolError
from soakgate.targets.pool import Pool

T = TypeVar("T")
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"


@dataclass
class Answer:
    """What the server writes for one request: pieces sent separately, then maybe a close."""

    pieces: tuple[bytes, ...]
    close: bool = False


def answer(*pieces: bytes, close: bool = False) -> Answer:
    return Answer(pieces, close)


class ScriptedServer:
    """Reads whole requests and answers each with the next scripted Answer; records requests
    with the index of the connection they came on."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.requests: list[tuple[int, bytes, bytes]] = []
        self.connections = 0
        self.closed_by_client = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        index, self.connections = self.connections, self.connections + 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    self.closed_by_client += 1
                    return
                length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
                body = await reader.readexactly(int(length.group(1)) if length else 0)
                self.requests.append((index, head, body))
                scripted = self.answers.pop(0)
                for piece in scripted.pieces:
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0.002)  # separate segments, separate reads
                if scripted.close:
                    return
        except ConnectionError:
            pass
        finally:
            writer.close()


def serve(server: ScriptedServer, body: Callable[[str], Awaitable[T]], **tls: object) -> T:
    """Run `body(url)` against the server on a loopback port."""

    async def main() -> T:
        context = tls.get("context")
        listener = await asyncio.start_server(
            server.handle,
            "127.0.0.1",
            0,
            ssl=context if isinstance(context, ssl.SSLContext) else None,
        )
        port = listener.sockets[0].getsockname()[1]
        scheme = "https" if context else "http"
        try:
            return await body(f"{scheme}://{tls.get('host', '127.0.0.1')}:{port}")
        finally:
            listener.close()
            await listener.wait_closed()

    return asyncio.run(main())


GET = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
CAP = 1 << 24  # the answer body cap these framing tests send with


def new_pool(url: str) -> Pool:
    """A pool that reuses a connection as soon as it is free: these tests are about framing
    (the probation of a new origin's connections is tested on its own, below)."""
    return Pool(url, probation_s=0)


async def exchange(pool: Pool, request: bytes = GET) -> bytes:
    """One request; its whole body (the connection goes back to the pool)."""
    connection = await pool.send(request, CAP)
    try:
        return await connection.read()
    finally:
        pool.release(connection)


def bodies(count: int) -> Callable[[str], Awaitable[list[bytes]]]:
    """A test body: `count` requests in turn through one pool; their answers' bodies."""

    async def body(url: str) -> list[bytes]:
        pool = new_pool(url)
        try:
            return [await exchange(pool) for _ in range(count)]
        finally:
            await pool.close()

    return body


def test_keep_alive_reuses_one_connection_for_content_length_answers() -> None:
    server = ScriptedServer(answer(OK), answer(OK), answer(OK))

    assert serve(server, bodies(3)) == [b"hello"] * 3
    assert [index for index, _, _ in server.requests] == [0, 0, 0]


def test_chunked_answers_arrive_whole_however_they_are_split() -> None:
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    pieces = tuple(chunked[i : i + 1] for i in range(len(chunked)))
    server = ScriptedServer(answer(*pieces), answer(OK))

    async def body(url: str) -> tuple[list[bytes], bytes]:
        pool = new_pool(url)
        connection = await pool.send(GET, CAP)
        got = []
        while piece := await connection.chunk():
            got.append(piece)
        pool.release(connection)
        again = await exchange(pool)
        await pool.close()
        return got, again

    got, again = serve(server, body)
    assert b"".join(got) == b"hello world" and len(got) >= 2  # streamed as it came
    assert again == b"hello" and server.connections == 1


def test_a_body_delimited_by_the_close_is_whole_and_the_connection_is_not_reused() -> None:
    server = ScriptedServer(
        answer(b"HTTP/1.1 200 OK\r\n\r\n", b"until ", b"the end", close=True), answer(OK)
    )

    assert serve(server, bodies(2)) == [b"until the end", b"hello"]
    assert [index for index, _, _ in server.requests] == [0, 1]


def test_connection_close_and_interim_answers() -> None:
    server = ScriptedServer(
        answer(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nhi"),
        answer(b"HTTP/1.1 100 Continue\r\n\r\n", OK),
    )

    assert serve(server, bodies(2)) == [b"hi", b"hello"]
    assert server.connections == 2  # `Connection: close` was honoured


def test_a_pooled_connection_the_server_closed_is_retired_unused_and_a_drop_is_not_resent() -> None:
    # the server answers, then closes without a word; then a new connection's request is read
    # and the connection closed unanswered
    server = ScriptedServer(answer(OK, close=True), answer(OK), answer(close=True))

    async def body(url: str) -> tuple[bytes, bytes, int, Dropped]:
        pool = new_pool(url)
        try:
            first = await exchange(pool)
            await asyncio.sleep(0.05)  # the close has landed; the idle connection is not used
            connection = await pool.send(GET, CAP)
            second, attempts = await connection.read(), connection.attempts
            pool.release(connection)
            pool._idle.clear()  # a new connection, which the server closes unanswered
            with pytest.raises(Dropped) as info:
                await exchange(pool)
            return first, second, attempts, info.value
        finally:
            await pool.close()

    first, second, attempts, dropped = serve(server, body)
    assert (first, second, attempts) == (b"hello", b"hello", 1)
    assert [index for index, _, _ in server.requests] == [0, 1, 2]  # nothing was sent twice
    assert "before answering" in str(dropped) and dropped.attempts == 1
    assert classify(dropped) == "dropped"


def test_an_answer_cut_short_raises_and_is_a_reset() -> None:
    server = ScriptedServer(
        answer(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n", b"only part", close=True)
    )

    async def body(url: str) -> Disconnected:
        pool = new_pool(url)
        try:
            with pytest.raises(Disconnected) as info:
                await exchange(pool)
            return info.value
        finally:
            await pool.close()

    error = serve(server, body)
    assert "before its answer was complete" in str(error)
    assert not isinstance(error, Dropped) and classify(error) == "connection_reset"


def test_garbage_is_a_protocol_error_and_nothing_listening_is_connect_failed() -> None:
    server = ScriptedServer(answer(b"SSH-2.0-OpenSSH_9.6\r\n\r\n"))

    async def body(url: str) -> None:
        pool = new_pool(url)
        try:
            with pytest.raises(ProtocolError):
                await exchange(pool)
        finally:
            await pool.close()

    serve(server, body)

    async def refused() -> ConnectFailed:
        listener = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        listener.close()
        await listener.wait_closed()
        pool = new_pool(f"http://127.0.0.1:{port}")
        with pytest.raises(ConnectFailed) as info:
            await exchange(pool)
        await pool.close()
        return info.value

    error = asyncio.run(refused())
    assert classify(error) == "connection_refused" and "cannot connect" in str(error)


def test_a_big_answer_is_read_whole_through_back_pressure() -> None:
    payload = bytes(range(256)) * (16 * 1024)  # 4 MiB, beyond the reading high-water mark
    server = ScriptedServer(
        answer(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(payload), payload),
        answer(OK),
    )

    async def body(url: str) -> tuple[int, bytes, bytes]:
        pool = new_pool(url)
        connection = await pool.send(GET, CAP)
        await asyncio.sleep(0.3)  # the whole answer is offered while nobody reads
        got = await connection.read()
        pool.release(connection)
        again = await exchange(pool)
        await pool.close()
        return len(got), got, again

    size, got, again = serve(server, body)
    assert size == len(payload) and got == payload and again == b"hello"


def test_a_cancelled_request_drops_its_connection() -> None:
    server = ScriptedServer(
        answer(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf"), answer(OK)
    )

    async def body(url: str) -> bytes:
        pool = new_pool(url)
        task = asyncio.create_task(exchange(pool))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        try:
            return await exchange(pool)  # not the half-read connection: a new one
        finally:
            await pool.close()

    assert serve(server, body) == b"hello"
    assert [index for index, _, _ in server.requests] == [0, 1]


def test_the_client_frames_its_requests_and_the_pool_closes_its_connections() -> None:
    completion = (
        b'{"choices":[{"text":"hi","finish_reason":"length"}],'
        b'"usage":{"prompt_tokens":3,"completion_tokens":1}}'
    )
    reply = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(completion), completion)
    server = ScriptedServer(answer(reply), answer(reply))
    spec = RequestSpec(stream=False, max_tokens=1)

    async def body(url: str) -> list[str | None]:
        target = TargetSpec.parse(f"gpu0={url}/proxy/v1", api_key="sk-test")
        async with make_session() as session:
            client = OpenAIClient(session, target, "m")
            outcomes = [
                await client.generate(builtin_prompts()[0], spec, f"run-{i}") for i in range(2)
            ]
        await asyncio.sleep(0.05)
        return [o.error_class or o.text for o in outcomes]

    assert serve(server, body) == ["hi", "hi"]
    heads = [head.decode() for _, head, _ in server.requests]
    assert all(h.startswith("POST /proxy/v1/completions HTTP/1.1\r\n") for h in heads)
    assert "\r\nAuthorization: Bearer sk-test\r\n" in heads[0]
    assert "\r\nX-Request-Id: run-0\r\n" in heads[0] and "\r\nX-Request-Id: run-1\r\n" in heads[1]
    assert re.search(r"\r\nHost: 127\.0\.0\.1:\d+\r\n", heads[0])
    assert server.requests[0][2].startswith(b'{"model": "m"')
    assert "\r\nAccept-Encoding: identity\r\n" in heads[0]
    # a new origin's connection rests after its answer (probation), so the second request
    # went on a second connection; both were closed with the session
    assert server.connections == 2 and server.closed_by_client == 2


def test_an_api_key_with_a_line_break_is_refused() -> None:
    async def body() -> None:
        async with make_session() as session:
            target = TargetSpec.parse("http://127.0.0.1:9", api_key="sk\r\nX-Evil: 1")
            with pytest.raises(UsageError):
                OpenAIClient(session, target, "m")

    asyncio.run(body())


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_https_targets_are_verified_against_the_trusted_certificates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)

    async def body(url: str) -> bytes:
        pool = new_pool(url)
        try:
            return await exchange(pool)
        finally:
            await pool.close()

    # not trusted: the handshake fails, a connect failure like any other
    with pytest.raises(ConnectFailed):
        serve(ScriptedServer(), body, context=context, host="localhost")
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    assert serve(ScriptedServer(answer(OK)), body, context=context, host="localhost") == b"hello"


def test_a_request_id_with_a_line_break_is_a_client_error_and_nothing_is_sent() -> None:
    server = ScriptedServer()

    async def body(url: str) -> tuple[str | None, str | None]:
        async with make_session() as session:
            client = OpenAIClient(session, TargetSpec.parse(url), "m")
            spec = RequestSpec(stream=False, max_tokens=1)
            outcome = await client.generate(builtin_prompts()[0], spec, "run-1\r\nX-Evil: 1")
        return outcome.error_class, outcome.error_detail

    error_class, detail = serve(server, body)
    assert error_class == "client_error" and "line break" in (detail or "")
    assert server.requests == []


def test_an_answer_nobody_asked_for_retires_the_connection() -> None:
    # some proxies send `408 Request Timeout` on an idle keep-alive connection; it must not be
    # taken for the answer to the next request sent on it
    timeout = b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 7\r\n\r\ntimeout"
    server = ScriptedServer(
        answer(OK + timeout), answer(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    )

    async def body(url: str) -> list[tuple[int, bytes]]:
        pool = new_pool(url)
        answers = []
        try:
            for _ in range(2):
                connection = await pool.send(GET, CAP)
                answers.append((connection.status, await connection.read()))
                pool.release(connection)
                await asyncio.sleep(0.05)
            return answers
        finally:
            await pool.close()

    assert serve(server, body) == [(200, b"hello"), (200, b"ok")]
    assert [index for index, _, _ in server.requests] == [0, 1]


def test_a_whole_answer_without_a_finish_reason_is_truncated() -> None:
    completion = b'{"choices":[{"text":"hi"}]}'
    reply = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(completion), completion)
    server = ScriptedServer(answer(reply))

    async def body(url: str) -> tuple[str | None, str | None, str]:
        async with make_session() as session:
            client = OpenAIClient(session, TargetSpec.parse(url), "m")
            spec = RequestSpec(stream=False, max_tokens=1)
            outcome = await client.generate(builtin_prompts()[0], spec, "run-1")
        return outcome.error_class, outcome.error_detail, outcome.text

    assert serve(server, body) == ("truncated_stream", "response without a finish_reason", "hi")


def test_an_echoed_request_id_is_checked_and_its_spaces_do_not_count() -> None:
    completion = b'{"choices":[{"text":"hi","finish_reason":"length"}]}'

    def reply(echo: bytes) -> Answer:
        head = b"HTTP/1.1 200 OK\r\nX-Request-Id: %s\r\nContent-Length: %d\r\n\r\n"
        return answer(head % (echo, len(completion)) + completion)

    server = ScriptedServer(reply(b"run-0 \t"), reply(b"run-0"), reply(b"run-2"))

    async def body(url: str) -> list[tuple[str | None, str]]:
        async with make_session() as session:
            client = OpenAIClient(session, TargetSpec.parse(url), "m")
            spec = RequestSpec(stream=False, max_tokens=1)
            outcomes = [
                await client.generate(builtin_prompts()[0], spec, f"run-{i}") for i in range(3)
            ]
        return [(o.error_class, o.text) for o in outcomes]

    assert serve(server, body) == [(None, "hi"), ("response_mismatch", ""), (None, "hi")]
