"""`soakgate run` imports only what a soak needs (issue 31 item 2), and model discovery and the
`/metrics` watch, now on the soak's own HTTP/1.1 pool, keep what they did on aiohttp.

The imports are read from the real command's `sys.modules` as its process exits, over a whole soak
(discovery, the `/metrics` watch, scoring, storing, the summary), not from an import of a module
(`helpers.soakgate_listing_modules`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli.helpers import loaded_modules, one_error_line, soakgate, soakgate_listing_modules

from soakgate.mockserver import MockProcess

NOT_FOR_A_SOAK = (
    "aiohttp", "yarl", "multidict", "scipy", "statsmodels", "pyarrow",
    "jinja2", "matplotlib", "ray", "torch", "soakgate.stats", "soakgate.report",
    "soakgate.audit", "soakgate.bisect", "soakgate.campaign", "soakgate.guard",
    "soakgate.servers", "soakgate.reference", "soakgate.mockserver.serve",
    "soakgate.mockserver.process", "regex", "jsonschema", "jsonschema_rs",
)  # fmt: skip
"""Packages a plain `soakgate run` must not import: other commands', the report's, another
HTTP client, the structure check's validators (only a structured soak needs them). (prometheus_client's text parser is needed: the `/metrics` watch imports it at its
first scrape.)"""


def offending(modules: set[str]) -> list[str]:
    return sorted(m for m in modules for p in NOT_FOR_A_SOAK if m == p or m.startswith(p + "."))


def test_a_soak_imports_no_second_http_client_nor_other_commands_modules(tmp_path: Path) -> None:
    # the model discovered, /metrics watched (the server load the mock reports), every
    # answer scored and stored, the summary printed: still none of NOT_FOR_A_SOAK
    db = tmp_path / "s.sqlite"
    with MockProcess(["--tokens-per-s", "0"]) as mock:
        done = soakgate_listing_modules(
            "run", "--target", mock.url, "--requests", "40", "--concurrency", "2",
            "--max-tokens", "4", "--metrics-interval", "0.05", "--db", str(db),
            cwd=tmp_path,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    modules = loaded_modules(done)
    assert offending(modules) == []
    # its own command's module alone, seen although the CLI imports it with importlib
    assert {m for m in modules if m.startswith("soakgate.cli.cmd_")} == {"soakgate.cli.cmd_run"}
    assert {"soakgate.load.driver", "soakgate.targets.client", "numpy"} <= modules  # it read them
    with sqlite3.connect(db) as connection:
        (rows,) = connection.execute("SELECT COUNT(*) FROM generations").fetchone()
        kinds = {k for (k,) in connection.execute("SELECT kind FROM events")}
        (software,) = connection.execute("SELECT software FROM runs").fetchone()
    assert rows == 40
    assert "server_load" in kinds  # the /metrics page was scraped and read
    assert list(json.loads(software)["models"].values()) == ["soakgate-mock"]  # discovered


def test_the_check_sees_an_import_it_forbids(tmp_path: Path) -> None:
    # the same reading of the same report names a forbidden import when there is one: `--plan`
    # designs a soak with the statistics (soakgate.stats), which a plain soak never loads
    with MockProcess(["--tokens-per-s", "0"]) as mock:
        done = soakgate_listing_modules(
            "run", "--target", mock.url, "--requests", "4", "--max-tokens", "4",
            "--no-watch-metrics", "--db", str(tmp_path / "p.sqlite"), "--plan", "2", "--quiet",
            cwd=tmp_path,
        )  # fmt: skip
    assert any(m.startswith("soakgate.stats") for m in offending(loaded_modules(done)))


# --- model discovery on the pool ------------------------------------------------------------------


COMPLETION = {
    "id": "c", "object": "text_completion", "model": "listed",
    "choices": [{"index": 0, "text": " fine words", "finish_reason": "length"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2},
}  # fmt: skip


def _answer(body: bytes, extra: bytes = b"", status: bytes = b"200 OK") -> bytes:
    return b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s" % (
        status, len(body), extra, body
    )  # fmt: skip


MODELS: dict[str, bytes | None] = {
    "gzip": _answer(gzip.compress(b'{"data": [{"id": "listed"}]}'), b"Content-Encoding: gzip\r\n"),
    "chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    b'9\r\n{"data": \r\n13\r\n[{"id": "listed"}]}\r\n0\r\n\r\n',
    "not-found": _answer(b'{"error": "no"}', status=b"404 Not Found"),
    "redirect": b"HTTP/1.1 307 Temporary Redirect\r\nLocation: /elsewhere\r\nContent-Length: 0\r\n\r\n",
    "not-json": _answer(b"<html>models</html>"),
    "no-model": _answer(b'{"data": []}'),
    "closed": None,  # the connection closed without a byte
}
"""What the server answers to `GET /v1/models`, by case."""


@contextlib.contextmanager
def models_server(case: str) -> Iterator[tuple[str, list[tuple[bytes, bytes]]]]:
    """A raw HTTP/1.1 server on loopback (in a thread) answering `/v1/models` as `case` says and
    completions with a fixed answer; yields its URL and the requests (head, body) it read."""
    seen: list[tuple[bytes, bytes]] = []
    handlers: set[asyncio.Task[None]] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handlers.add(asyncio.current_task())  # type: ignore[arg-type]
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)  # fmt: skip
                seen.append((head, await reader.readexactly(length)))
                if head.startswith(b"GET /v1/models"):
                    answer = MODELS[case]
                    if answer is None:
                        return
                    writer.write(answer)
                else:
                    writer.write(_answer(json.dumps(COMPLETION).encode()))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def close() -> None:
        server.close()
        await server.wait_closed()
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    opened = asyncio.start_server(handle, "127.0.0.1", 0)
    server = asyncio.run_coroutine_threadsafe(opened, loop).result(60)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", seen
    finally:
        asyncio.run_coroutine_threadsafe(close(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(60)
        loop.close()


@pytest.mark.parametrize("case", ["gzip", "chunked"])
def test_the_model_is_discovered_from_a_compressed_or_chunked_list(
    case: str, tmp_path: Path
) -> None:
    db = tmp_path / "d.sqlite"
    with models_server(case) as (url, seen):
        done = soakgate("run", "--target", url, "--requests", "3", "--no-watch-metrics",
                        "--no-stream", "--db", str(db), "--quiet", "--api-key", "k-123",
                        cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    listing = [h for h, _ in seen if h.startswith(b"GET /v1/models ")]
    assert len(listing) == 1 and b"\r\nAuthorization: Bearer k-123" in listing[0]
    posts = [json.loads(body) for h, body in seen if h.startswith(b"POST ")]
    assert len(posts) == 3 and all(p["model"] == "listed" for p in posts)
    with sqlite3.connect(db) as connection:
        (software,) = connection.execute("SELECT software FROM runs").fetchone()
        (clean,) = connection.execute(
            "SELECT COUNT(*) FROM generations WHERE error_class IS NULL"
        ).fetchone()
    assert list(json.loads(software)["models"].values()) == ["listed"] and clean == 3


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("not-found", "/v1/models answered HTTP 404"),
        ("redirect", "/v1/models answered HTTP 307"),
        ("not-json", "/v1/models did not answer JSON"),
        ("no-model", "/v1/models lists no model; pass --model"),
        ("closed", "cannot reach http://127.0.0.1:"),
    ],
)
def test_a_model_list_that_cannot_be_read_is_one_line_and_exit_2(
    case: str, message: str, tmp_path: Path
) -> None:
    db = tmp_path / "d.sqlite"
    with models_server(case) as (url, seen):
        done = soakgate("run", "--target", url, "--requests", "3", "--no-watch-metrics",
                        "--db", str(db), "--quiet", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert message in one_error_line(done)
    assert not any(h.startswith(b"POST ") for h, _ in seen)  # nothing sent
