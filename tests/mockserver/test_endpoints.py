"""Each endpoint, streamed and not, in OpenAI's format (against an in-process mock)."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from soakgate.mockserver import MockConfig
from tests.mockserver.helpers import chat, completion, parse_stream, post, run_against


def test_health_and_models() -> None:
    async def body(session: aiohttp.ClientSession) -> tuple[str, Any]:
        async with session.get("/health") as health:
            assert health.status == 200
            text = await health.text()
        async with session.get("/v1/models") as models:
            return text, await models.json()

    text, models = run_against(MockConfig(model_name="m1"), body)
    assert text == "ok"
    assert models["object"] == "list"
    assert models["data"][0]["id"] == "m1" and models["data"][0]["object"] == "model"


def test_completion_non_streamed_shape() -> None:
    async def body(session: aiohttp.ClientSession) -> tuple[int, bytes]:
        return await post(session, "/v1/completions", completion(return_token_ids=True), "rq-1")

    status, raw = run_against(MockConfig(), body)
    data = json.loads(raw)
    assert status == 200
    assert data["id"] == "cmpl-rq-1" and data["object"] == "text_completion"
    choice = data["choices"][0]
    assert choice["finish_reason"] == "length" and choice["text"].strip()
    assert len(choice["token_ids"]) == 32 and choice["prompt_token_ids"]
    usage = data["usage"]
    assert usage["completion_tokens"] == 32
    assert usage["total_tokens"] == usage["prompt_tokens"] + 32
    assert usage["prompt_tokens"] == len(choice["prompt_token_ids"])


def test_chat_non_streamed_shape_and_logprobs() -> None:
    # greedy: the sampled token leads its alternatives (sampled, it may stand anywhere or not
    # among them: test_logprob_consistency)
    request = chat(logprobs=True, top_logprobs=3, max_completion_tokens=8, return_token_ids=True,
                   temperature=0)  # fmt: skip

    async def body(session: aiohttp.ClientSession) -> tuple[int, bytes]:
        return await post(session, "/v1/chat/completions", request)

    _, raw = run_against(MockConfig(), body)
    data = json.loads(raw)
    assert data["object"] == "chat.completion" and data["id"].startswith("chatcmpl-")
    message = data["choices"][0]["message"]
    assert message["role"] == "assistant"
    content = data["choices"][0]["logprobs"]["content"]
    assert len(content) == 8 == data["usage"]["completion_tokens"]
    assert "".join(entry["token"] for entry in content) == message["content"]
    for entry in content:
        assert set(entry) == {"token", "logprob", "bytes", "top_logprobs"}
        assert bytes(entry["bytes"]).decode() == entry["token"]
        assert (
            len(entry["top_logprobs"]) == 3 and entry["top_logprobs"][0]["token"] == entry["token"]
        )
    assert data["prompt_token_ids"] and len(data["choices"][0]["token_ids"]) == 8


def test_completion_logprobs_shape() -> None:
    async def body(session: aiohttp.ClientSession) -> tuple[int, bytes]:
        return await post(session, "/v1/completions", completion(logprobs=2, max_tokens=10))

    _, raw = run_against(MockConfig(), body)
    choice = json.loads(raw)["choices"][0]
    logprobs = choice["logprobs"]
    assert set(logprobs) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
    assert "".join(logprobs["tokens"]) == choice["text"]
    assert all(len(top) == 2 for top in logprobs["top_logprobs"])
    offsets = logprobs["text_offset"]
    assert offsets[0] == 0 and offsets[1] == len(logprobs["tokens"][0])


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_streams_end_with_finish_usage_and_done(endpoint: str) -> None:
    path = "/v1/completions" if endpoint == "completions" else "/v1/chat/completions"
    make = completion if endpoint == "completions" else chat
    request = make(stream=True, stream_options={"include_usage": True}, return_token_ids=True)

    async def body(session: aiohttp.ClientSession) -> tuple[int, bytes]:
        return await post(session, path, request)

    status, raw = run_against(MockConfig(), body)
    chunks, done = parse_stream(raw)
    assert status == 200 and done
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 32
    content = [c for c in chunks[:-1] if c["choices"][0].get("token_ids")]
    assert len(content) == 32
    assert all(len(c["choices"][0]["token_ids"]) == 1 for c in content)
    # as vLLM: the last token's own event carries the finish_reason, with no empty event after
    assert content[-1] is chunks[-2] and content[-1]["choices"][0]["finish_reason"] == "length"
    assert not any(c["choices"][0]["finish_reason"] for c in chunks[:-2])
    if endpoint == "chat":
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        assert chunks[0]["object"] == "chat.completion.chunk"


def test_stream_text_equals_non_stream_text_at_temperature_zero() -> None:
    async def body(session: aiohttp.ClientSession) -> tuple[str, str]:
        _, raw = await post(session, "/v1/chat/completions", chat(temperature=0, seed=5))
        _, streamed = await post(
            session, "/v1/chat/completions", chat(temperature=0, seed=5, stream=True)
        )
        chunks, _ = parse_stream(streamed)
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
        return json.loads(raw)["choices"][0]["message"]["content"], text

    plain, streamed = run_against(MockConfig(), body)
    assert plain == streamed and plain


def test_sampled_output_depends_on_request_id_and_greedy_on_prompt() -> None:
    async def text(session: aiohttp.ClientSession, request: dict[str, Any], rid: str) -> str:
        _, raw = await post(session, "/v1/completions", request, rid)
        return str(json.loads(raw)["choices"][0]["text"])

    async def body(session: aiohttp.ClientSession) -> list[str]:
        sampled = completion(temperature=0.8)
        greedy = completion(temperature=0)
        return [
            await text(session, sampled, "a"),
            await text(session, sampled, "b"),
            await text(session, sampled, "a"),
            await text(session, greedy, "x"),
            await text(session, greedy, "y"),
        ]

    a, b, a_again, greedy_x, greedy_y = run_against(MockConfig(), body)
    assert a == a_again and a != b and greedy_x == greedy_y


def test_output_tokens_stop_rate_and_ignore_eos() -> None:
    async def finishes(session: aiohttp.ClientSession, **extra: Any) -> list[tuple[str, int]]:
        out = []
        for i in range(40):
            _, raw = await post(
                session, "/v1/completions", completion(max_tokens=64, **extra), f"r{i}"
            )
            data = json.loads(raw)
            out.append((data["choices"][0]["finish_reason"], data["usage"]["completion_tokens"]))
        return out

    async def body(session: aiohttp.ClientSession) -> tuple[Any, Any]:
        return await finishes(session), await finishes(session, ignore_eos=True)

    normal, ignored = run_against(MockConfig(output_tokens=48, stop_rate=0.5), body)
    assert all(reason == "stop" and 1 <= n <= 48 for reason, n in normal)
    assert any(n < 48 for _, n in normal) and any(n == 48 for _, n in normal)
    assert all(pair == ("length", 64) for pair in ignored)


@pytest.mark.parametrize(
    "request_body",
    [{"prompt": 3}, {"prompt": "x", "max_tokens": 0}, {"prompt": "x", "temperature": "hot"}, []],
)
def test_bad_requests_get_400_with_openai_error(request_body: Any) -> None:
    async def body(session: aiohttp.ClientSession) -> tuple[int, Any]:
        async with session.post("/v1/completions", json=request_body) as response:
            return response.status, await response.json()

    status, data = run_against(MockConfig(), body)
    assert status == 400 and data["error"]["code"] == 400 and data["error"]["message"]
