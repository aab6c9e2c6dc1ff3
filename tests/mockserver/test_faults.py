"""Every fault kind is observable at the HTTP level exactly as specified."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from soakgate.mockserver import MockConfig
from tests.mockserver.helpers import chat, completion, parse_stream, post, run_against, sse_events


def faulty(kind: str, **extra: Any) -> MockConfig:
    return MockConfig(fault_rates={kind: 1.0}, **extra)


@pytest.mark.parametrize("stream", [False, True])
def test_http_500_has_openai_error_body(stream: bool) -> None:
    async def body(session: aiohttp.ClientSession) -> tuple[int, bytes]:
        return await post(session, "/v1/completions", completion(stream=stream))

    status, raw = run_against(faulty("http_500"), body)
    assert status == 500 and json.loads(raw)["error"]["code"] == 500


@pytest.mark.parametrize(
    ("path", "make"), [("/v1/completions", completion), ("/v1/chat/completions", chat)]
)
@pytest.mark.parametrize("stream", [False, True])
def test_reset_is_not_a_clean_end(path: str, make: Any, stream: bool) -> None:
    async def body(session: aiohttp.ClientSession) -> str:
        try:
            await post(session, path, make(stream=stream, max_tokens=64))
        except (
            aiohttp.ClientPayloadError,
            aiohttp.ServerDisconnectedError,
            aiohttp.ClientOSError,
        ) as exc:
            return type(exc).__name__
        return "clean"

    assert run_against(faulty("reset"), body) != "clean"


def test_reset_stream_delivers_a_few_chunks_first() -> None:
    async def body(session: aiohttp.ClientSession) -> tuple[list[bytes], str]:
        received: list[bytes] = []
        async with session.post(
            "/v1/completions", json=completion(stream=True, max_tokens=64)
        ) as r:
            try:
                async for line in r.content:
                    received.append(line)
            except (aiohttp.ClientPayloadError, aiohttp.ClientOSError) as exc:
                return received, type(exc).__name__
        return received, "clean"

    received, outcome = run_against(faulty("reset", tokens_per_s=500), body)
    events = [line for line in received if line.startswith(b"data: {")]
    assert outcome != "clean" and 2 <= len(events) <= 5


@pytest.mark.parametrize("stream", [False, True])
def test_stall_outlasts_the_client_timeout(stream: bool) -> None:
    async def body(session: aiohttp.ClientSession) -> str:
        timeout = aiohttp.ClientTimeout(total=0.3)
        try:
            async with session.post(
                "/v1/completions", json=completion(stream=stream), timeout=timeout
            ) as r:
                await r.read()
        except TimeoutError:
            return "timeout"
        return "answered"

    assert run_against(faulty("stall", stall_s=2.0), body) == "timeout"


def test_malformed_json_non_streamed() -> None:
    async def body(session: aiohttp.ClientSession) -> tuple[int, bytes]:
        return await post(session, "/v1/completions", completion())

    status, raw = run_against(faulty("malformed_json"), body)
    assert status == 200
    with pytest.raises(ValueError):
        json.loads(raw)


def test_malformed_json_streamed_has_one_bad_event() -> None:
    async def body(session: aiohttp.ClientSession) -> tuple[int, bytes]:
        return await post(session, "/v1/chat/completions", chat(stream=True))

    status, raw = run_against(faulty("malformed_json"), body)
    bad = []
    for event in sse_events(raw):
        if event != "[DONE]":
            try:
                json.loads(event)
            except ValueError:
                bad.append(event)
    assert status == 200 and len(bad) == 1


@pytest.mark.parametrize("tokens_per_s", [0.0, 1000.0])
def test_truncated_stream_closes_cleanly_without_done_or_finish(tokens_per_s: float) -> None:
    async def body(session: aiohttp.ClientSession) -> tuple[int, bytes]:
        return await post(session, "/v1/completions", completion(stream=True, max_tokens=64))

    status, raw = run_against(faulty("truncated_stream", tokens_per_s=tokens_per_s), body)
    chunks, done = parse_stream(raw)
    assert status == 200 and not done and 2 <= len(chunks) <= 5
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks)


def test_truncated_non_streamed_has_no_finish_reason() -> None:
    async def body(session: aiohttp.ClientSession) -> tuple[int, bytes]:
        return await post(session, "/v1/completions", completion())

    _, raw = run_against(faulty("truncated_stream"), body)
    assert json.loads(raw)["choices"][0]["finish_reason"] is None


def test_server_error_in_200_body_and_in_stream() -> None:
    async def body(session: aiohttp.ClientSession) -> tuple[Any, Any]:
        plain = await post(session, "/v1/completions", completion())
        streamed = await post(session, "/v1/completions", completion(stream=True))
        return plain, streamed

    (status, raw), (stream_status, stream_raw) = run_against(faulty("server_error"), body)
    assert status == 200 and "error" in json.loads(raw)
    chunks, _ = parse_stream(stream_raw)
    assert stream_status == 200 and "error" in chunks[-1]
    assert not any(c.get("choices") and c["choices"][0]["finish_reason"] for c in chunks)


def test_ground_truth_records_faults_and_collapses(tmp_path: Any) -> None:
    truth = tmp_path / "truth.jsonl"
    config = MockConfig(
        ground_truth=truth, fault_rates={"http_500": 0.3}, collapse_rate=0.5, seed=6
    )

    async def body(session: aiohttp.ClientSession) -> list[tuple[int, bytes]]:
        return await asyncio.gather(
            *(
                post(session, "/v1/completions", completion(max_tokens=128), f"id-{i}")
                for i in range(100)
            )
        )

    results = run_against(config, body)
    records = {r["request_id"]: r for r in map(json.loads, truth.read_text().splitlines())}
    assert len(records) == 100 and sorted(r["seq"] for r in records.values()) == list(range(100))
    for i, (status, raw) in enumerate(results):
        record = records[f"id-{i}"]
        assert (status == 500) == (record["fault"] == "http_500")
        if record["injected"] == "bang_run":
            assert "!" * 100 in json.loads(raw)["choices"][0]["text"]
        if record["injected"] == "empty":
            data = json.loads(raw)
            assert data["choices"][0]["text"] == "" and data["usage"]["completion_tokens"] == 128
    assert {r["injected"] for r in records.values()} >= {"bang_run", "word_loop", "empty"}
