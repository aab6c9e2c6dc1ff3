"""Real-server quirks, Prometheus metrics with spec-decode counters, and saturation."""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

import aiohttp

from soakgate.mockserver import MockConfig
from tests.mockserver.helpers import chat, completion, parse_stream, post, run_against


def test_quirk_no_done() -> None:
    async def body(session: aiohttp.ClientSession) -> tuple[int, bytes]:
        return await post(session, "/v1/chat/completions", chat(stream=True))

    _, raw = run_against(MockConfig(quirks=frozenset({"no-done"})), body)
    chunks, done = parse_stream(raw)
    assert not done and chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_quirk_interrupt_streams_cuts_running_streams() -> None:
    config = MockConfig(quirks=frozenset({"interrupt-streams"}), tokens_per_s=200)

    async def body(session: aiohttp.ClientSession) -> list[tuple[int, bytes]]:
        async def staggered(delay: float) -> tuple[int, bytes]:
            await asyncio.sleep(delay)
            return await post(session, "/v1/completions", completion(stream=True, max_tokens=40))

        return list(await asyncio.gather(staggered(0), staggered(0.05), staggered(0.1)))

    results = [parse_stream(raw) for _, raw in run_against(config, body)]
    finished = [any(c["choices"][0]["finish_reason"] for c in chunks) for chunks, _ in results]
    assert finished == [False, False, True]
    assert [done for _, done in results] == [False, False, True]
    assert 0 < len(results[0][0]) < 40


def test_quirk_chat_logprobs_on_completions() -> None:
    async def body(session: aiohttp.ClientSession) -> tuple[int, bytes]:
        return await post(session, "/v1/completions", completion(logprobs=1, max_tokens=5))

    _, raw = run_against(MockConfig(quirks=frozenset({"chat-logprobs"})), body)
    logprobs = json.loads(raw)["choices"][0]["logprobs"]
    assert set(logprobs) == {"content"} and len(logprobs["content"]) == 5


def scrape(text: str) -> dict[str, float]:
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name_labels, value = line.rsplit(" ", 1)
            name = re.sub(r"\{.*\}", "", name_labels)
            values[name] = values.get(name, 0.0) + float(value)
    return values


def test_metrics_counters_advance_and_spec_acceptance_falls_when_saturated() -> None:
    config = MockConfig(spec_decode=True, spec_collapse_at=4, tokens_per_s=400)

    async def metrics(session: aiohttp.ClientSession) -> dict[str, float]:
        async with session.get("/metrics") as response:
            assert response.headers["Content-Type"].startswith("text/plain")
            return scrape(await response.text())

    async def body(session: aiohttp.ClientSession) -> list[dict[str, float]]:
        before = await metrics(session)
        await post(session, "/v1/completions", completion(stream=True, max_tokens=40))
        single = await metrics(session)
        request = completion(stream=True, max_tokens=40)
        await asyncio.gather(*(post(session, "/v1/completions", request) for _ in range(6)))
        return [before, single, await metrics(session)]

    before, single, loaded = run_against(config, body)
    gen = "vllm:generation_tokens_total"
    assert before[gen] == 0 and single[gen] == 40 and loaded[gen] == 280
    assert loaded["vllm:request_success_total"] == 7
    accepted, drafts = (
        "vllm:spec_decode_num_accepted_tokens_total",
        "vllm:spec_decode_num_draft_tokens_total",
    )
    assert abs(single[accepted] / single[drafts] - 0.39) < 0.01
    delta = (loaded[accepted] - single[accepted]) / (loaded[drafts] - single[drafts])
    assert delta < 0.15


def test_metrics_without_spec_decode_have_no_spec_counters() -> None:
    async def body(session: aiohttp.ClientSession) -> str:
        async with session.get("/metrics") as response:
            return await response.text()

    text = run_against(MockConfig(), body)
    assert "vllm:num_requests_running" in text and "spec_decode" not in text


def test_saturation_caps_total_throughput() -> None:
    config = MockConfig(tokens_per_s=200, saturation=2)

    async def throughput(session: aiohttp.ClientSession, concurrency: int) -> float:
        request: dict[str, Any] = completion(max_tokens=20)
        start = time.perf_counter()
        await asyncio.gather(
            *(post(session, "/v1/completions", request) for _ in range(concurrency))
        )
        return 20 * concurrency / (time.perf_counter() - start)

    async def body(session: aiohttp.ClientSession) -> list[float]:
        return [await throughput(session, c) for c in (1, 2, 6)]

    one, two, six = run_against(config, body)
    assert two / one > 1.6
    assert 0.7 < six / two < 1.3


def test_latency_delays_the_first_token() -> None:
    async def first_chunk_after(session: aiohttp.ClientSession) -> float:
        start = time.perf_counter()
        async with session.post("/v1/completions", json=completion(stream=True)) as response:
            await response.content.readline()
            elapsed = time.perf_counter() - start
            await response.read()
        return elapsed

    assert run_against(MockConfig(latency_ms=300), first_chunk_after) >= 0.29
