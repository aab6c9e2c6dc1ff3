"""targets/pool.py: which connection carries a request, and when a request may go again.

The servers here are blocking sockets in a thread, so that the test can stop its own event
loop (`time.sleep`) while a close or a reset lands in the kernel: the pool must see what the
loop has not read yet.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop
from tests.targets.test_http1 import CAP, GET, OK, ScriptedServer, answer, exchange, serve

from soakgate.targets import pool as pool_module
from soakgate.targets.http1 import Oversized
from soakgate.targets.pool import PROBATION_S, Pool

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop,
}  # fmt: skip


def run(loop: str, main: Coroutine[Any, Any, Any]) -> Any:
    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        return runner.run(main)


class ThreadServer:
    """Accepts connections in a thread; each reads one request, answers OK, then waits for
    `hang_up` and closes: with a FIN (and keeps reading, counting requests written into the
    closed connection) or, with `reset`, an RST."""

    def __init__(self, reset: bool = False) -> None:
        self.reset = reset
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.hang_up = threading.Event()
        self.accepted = 0
        self.written_into_close = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.listener.settimeout(5)
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            conn.sendall(OK)
            if not self.hang_up.wait(5):
                return
            if self.reset:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return
            conn.shutdown(socket.SHUT_WR)
            conn.settimeout(0.5)
            try:
                if conn.recv(65536):
                    self.written_into_close += 1
            except (TimeoutError, OSError):
                pass

    def close(self) -> None:
        self.listener.close()


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_close_the_event_loop_has_not_read_yet_retires_the_connection_unused(loop: str) -> None:
    server = ThreadServer()

    async def body() -> tuple[bytes, int]:
        pool = Pool(server.url, probation_s=0)
        try:
            await exchange(pool)
            server.hang_up.set()
            time.sleep(0.1)  # the FIN lands in the kernel; this loop reads nothing meanwhile
            connection = await pool.send(GET, CAP)
            got, attempts = await connection.read(), connection.attempts
            pool.release(connection)
            return got, attempts
        finally:
            await pool.close()

    try:
        assert run(loop, body()) == (b"hello", 1)
        time.sleep(0.6)
        assert server.accepted == 2 and server.written_into_close == 0
    finally:
        server.close()


class _Blind:
    """A poll that sees nothing: as if the reset landed just after the pool looked."""

    def register(self, fd: int, events: int) -> None:
        pass

    def unregister(self, fd: int) -> None:
        pass

    def poll(self, timeout: int) -> list[tuple[int, int]]:
        return []


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_write_that_failed_at_once_goes_again_and_is_counted(loop: str) -> None:
    # a reset socket refuses the write itself: not one byte left, so the request may go again
    server = ThreadServer(reset=True)

    async def body() -> tuple[bytes, int]:
        pool = Pool(server.url, probation_s=0)
        try:
            await exchange(pool)
            server.hang_up.set()
            time.sleep(0.1)  # the RST lands in the kernel; this loop reads nothing meanwhile
            pool._poll = _Blind()  # type: ignore[assignment]
            connection = await pool.send(GET, CAP)
            got, attempts = await connection.read(), connection.attempts
            pool.release(connection)
            return got, attempts
        finally:
            await pool.close()

    try:
        assert run(loop, body()) == (b"hello", 2)
        assert server.accepted == 2
    finally:
        server.close()


def test_a_new_origin_is_on_probation_until_its_connections_outlive_their_rest() -> None:
    server = ScriptedServer(*(answer(OK) for _ in range(5)))

    async def body(url: str) -> bool | None:
        pool = Pool(url)
        try:
            await exchange(pool)  # connection 0, then resting
            await exchange(pool)  # so a new one, 1
            await asyncio.sleep(PROBATION_S * 1.5)
            await exchange(pool)  # the oldest rested one, 0: kept once
            await asyncio.sleep(PROBATION_S * 1.5)
            await exchange(pool)  # 1: kept twice, the origin is trusted
            await exchange(pool)  # at once: the most recently used, 1
            return pool.keeps_alive
        finally:
            await pool.close()

    assert serve(server, body) is True
    assert [index for index, _, _ in server.requests] == [0, 1, 0, 1, 1]


def test_an_origin_that_closes_after_its_answers_is_never_reused() -> None:
    server = ScriptedServer(*(answer(OK, close=True) for _ in range(4)))

    async def body(url: str) -> bool | None:
        pool = Pool(url)
        try:
            for _ in range(4):
                await exchange(pool)
                await asyncio.sleep(PROBATION_S * 1.5)
            return pool.keeps_alive
        finally:
            await pool.close()

    assert serve(server, body) is False
    assert [index for index, _, _ in server.requests] == [0, 1, 2, 3]


def test_an_idle_connection_past_its_expiry_is_not_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool_module, "_IDLE_EXPIRY_S", 0.05)
    server = ScriptedServer(answer(OK), answer(OK))

    async def body(url: str) -> None:
        pool = Pool(url, probation_s=0)
        try:
            await exchange(pool)
            await asyncio.sleep(0.1)
            await exchange(pool)
        finally:
            await pool.close()

    serve(server, body)
    assert [index for index, _, _ in server.requests] == [0, 1]


@pytest.mark.parametrize(
    ("reply", "cap", "what"),
    [
        (OK, 4, "a body over 4 bytes"),  # Content-Length: 5
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
         + (b"1;pad=" + b"p" * 100 + b"\r\nx\r\n") * 2000 + b"0\r\n\r\n",
         10000, "bytes on the wire"),  # 1-byte chunks with 100-byte chunk extensions
        (b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * 70000 + b"\r\nContent-Length: 0\r\n\r\n",
         CAP, "a head over 65536 bytes"),
        (b"HTTP/1.1 100 Continue\r\n\r\n" * 3000 + OK, CAP, "a head over"),  # endless 1xx
    ],
)  # fmt: skip
def test_answers_past_their_caps_are_oversized_and_their_connection_dropped(
    reply: bytes, cap: int, what: str
) -> None:
    pieces = tuple(reply[i : i + 8192] for i in range(0, len(reply), 8192))
    server = ScriptedServer(answer(*pieces), answer(OK))

    async def body(url: str) -> tuple[str, bytes]:
        pool = Pool(url, probation_s=0)
        try:
            with pytest.raises(Oversized) as info:
                connection = await pool.send(GET, cap)
                try:
                    await connection.read()
                finally:
                    pool.release(connection)
            return str(info.value), await exchange(pool)
        finally:
            await pool.close()

    why, after = serve(server, body)
    assert what in why and after == b"hello"
    assert [index for index, _, _ in server.requests] == [0, 1]  # the oversized one is dropped
