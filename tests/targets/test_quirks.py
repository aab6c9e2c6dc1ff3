"""Real-world server quirks (issue 6), reproduced by the mock's --quirk modes, through real soaks.

The same quirks on real llama.cpp (streams end with [DONE], chat-style logprobs on
/v1/completions, keep-alive connections closed after each stream) are in
tests/realservers/test_llamacpp.py.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from tests.soaking import soak_rows

from soakgate.mockserver.process import MockProcess
from soakgate.prompts import builtin_prompts
from soakgate.records import Generation
from soakgate.targets import OpenAIClient, Outcome, RequestSpec, TargetSpec, discover_model
from soakgate.targets.client import make_session

StartMock = Callable[..., MockProcess]


def soak(
    mock: MockProcess, db: Path, request: RequestSpec, requests: int, concurrency: int = 8
) -> list[Generation]:
    """A bounded soak of the mock; the rows as stored."""
    return soak_rows(mock.url, db, request, requests, concurrency, label="quirk", grace_s=10)


def test_streams_without_done_are_clean_when_finish_reason_arrives(
    start_mock: StartMock, tmp_path: Path
) -> None:
    # transformers serve: no `data: [DONE]`, and the model is named by the path it was served from
    mock = start_mock("--quirk", "no-done", "--model-name", "/models/tiny-llama-8k")
    for endpoint in ("completions", "chat"):
        request = RequestSpec(endpoint=endpoint, max_tokens=16, return_token_ids=True)
        rows = soak(mock, tmp_path / f"{endpoint}.sqlite", request, requests=24)
        assert len(rows) == 24
        for g in rows:
            assert g.ok, (g.error_class, g.error_detail)
            assert g.finish_reason == "length" and g.completion_tokens == 16
            assert not g.flags


def test_stream_without_done_and_without_finish_is_truncated(
    start_mock: StartMock, tmp_path: Path
) -> None:
    # the no-done quirk must not make a cut stream look finished
    mock = start_mock("--quirk", "no-done", "--fault-rate", "truncated_stream=1.0")
    rows = soak(mock, tmp_path / "runs.sqlite", RequestSpec(max_tokens=16), requests=8)
    assert {g.error_class for g in rows} == {"truncated_stream"}
    assert all("without [DONE]" in (g.error_detail or "") for g in rows)
    assert not any(g.collapsed for g in rows)


def test_interrupted_streams_are_truncated_never_clean(
    start_mock: StartMock, tmp_path: Path
) -> None:
    # llama-cpp-python cuts running streams when a new request arrives (47/48 at concurrency 8)
    mock = start_mock("--quirk", "interrupt-streams", "--tokens-per-s", "400", "--seed", "3")
    request = RequestSpec(max_tokens=32, return_token_ids=True)
    rows = soak(mock, tmp_path / "runs.sqlite", request, requests=48, concurrency=8)
    classes = Counter(g.error_class for g in rows)
    assert len(rows) == 48 and set(classes) <= {None, "truncated_stream"}, classes
    assert classes["truncated_stream"] >= 24, classes  # most were cut, as on the real server
    for g in rows:
        if g.ok:  # a clean row really got to its end
            assert g.finish_reason == "length" and g.completion_tokens == 32
        else:
            assert g.finish_reason is None and not g.collapsed
            assert (g.completion_tokens or 0) < 32


async def _generate(url: str, spec: RequestSpec, count: int) -> list[Outcome]:
    """`count` requests through OpenAIClient itself (the Outcome keeps the logprob count)."""
    async with make_session() as session:
        target = TargetSpec.parse(url)
        client = OpenAIClient(session, target, await discover_model(session, target))
        prompts = builtin_prompts()
        return [await client.generate(prompts[i], spec, f"q-{i}") for i in range(count)]


def test_chat_style_logprobs_on_completions_are_parsed(start_mock: StartMock) -> None:
    # llama-server answers /v1/completions logprobs in the chat shape: content[{token, ...}]
    quirky = start_mock("--quirk", "chat-logprobs", "--seed", "5")
    plain = start_mock("--seed", "5")
    for stream in (True, False):
        spec = RequestSpec(endpoint="completions", stream=stream, max_tokens=16, logprobs=True)
        quirky_outcomes = asyncio.run(_generate(quirky.url, spec, 6))
        plain_outcomes = asyncio.run(_generate(plain.url, spec, 6))
        with_ids = asyncio.run(_generate(plain.url, replace(spec, return_token_ids=True), 6))
        for quirk, ordinary, ids in zip(quirky_outcomes, plain_outcomes, with_ids, strict=True):
            for outcome in (quirk, ordinary):
                assert outcome.error_class is None, outcome.error_detail
                assert outcome.logprobs_count == outcome.completion_tokens == 16
            # llama-server's chat-style entries carry each token's `id`: the client reads the
            # token ids from them, and they are the ids the server returns when asked outright
            assert quirk.token_ids == ids.token_ids and quirk.text == ordinary.text
            # OpenAI's completions shape has no ids, so none are invented
            assert ordinary.token_ids is None
