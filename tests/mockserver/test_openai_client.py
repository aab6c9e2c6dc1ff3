"""The mock as the official `openai` client sees it (issue 30 item 6): models, completions and
chat, streamed and not, usage, and vLLM's 404 for a model it does not serve. The mock is what
most of the suite soaks; a client built by the API's owners must read it as it reads vLLM."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from soakgate.mockserver.process import MockProcess

openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def client() -> Iterator[object]:
    with MockProcess(["--seed", "7"]) as mock:
        yield openai.OpenAI(base_url=f"{mock.url}/v1", api_key="unused", max_retries=0)


def test_models_and_a_completion(client: object) -> None:
    assert [m.id for m in client.models.list()] == ["soakgate-mock"]  # type: ignore[attr-defined]
    done = client.completions.create(  # type: ignore[attr-defined]
        model="soakgate-mock", prompt="Tell me about rivers.", max_tokens=8, temperature=0.8
    )
    (choice,) = done.choices
    assert choice.index == 0 and choice.text and choice.finish_reason in ("length", "stop")
    assert done.usage.completion_tokens <= 8 and done.usage.prompt_tokens > 0
    assert done.system_fingerprint is None and done.model == "soakgate-mock"


def test_a_streamed_chat_with_usage(client: object) -> None:
    stream = client.chat.completions.create(  # type: ignore[attr-defined]
        model="soakgate-mock", messages=[{"role": "user", "content": "Name a colour."}],
        max_tokens=8, stream=True, stream_options={"include_usage": True},
    )  # fmt: skip
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert text and reasons[-1] in ("length", "stop") and not any(reasons[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens <= 8


def test_an_unknown_model_is_not_found(client: object) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        client.completions.create(model="gpt-unknown", prompt="hi", max_tokens=4)  # type: ignore[attr-defined]
    assert raised.value.status_code == 404 and "gpt-unknown" in str(raised.value)


def test_n_choices_are_answered_side_by_side(client: object) -> None:
    """`n` as vLLM answers it: n choices indexed 0..n-1, sampled ones drawn apart, greedy ones
    the same, usage counting every choice's tokens. The request id is fixed: the mock keys a
    sampled choice by (request id, index), and short answers under a random id could coincide
    (a fresh-clone CI drew two equal choices of three)."""
    done = client.completions.create(  # type: ignore[attr-defined]
        model="soakgate-mock", prompt="Tell me about rivers.", max_tokens=8, temperature=0.8,
        n=3, extra_body={"return_token_ids": True}, extra_headers={"X-Request-Id": "rivers-1"},
    )  # fmt: skip
    assert [c.index for c in done.choices] == [0, 1, 2]
    ids = [c.model_extra["token_ids"] for c in done.choices]
    assert len({tuple(i) for i in ids}) == 3 and all(1 <= len(i) <= 8 for i in ids)
    assert done.usage.completion_tokens == sum(len(i) for i in ids)
    greedy = client.completions.create(  # type: ignore[attr-defined]
        model="soakgate-mock", prompt="Tell me about rivers.", max_tokens=8, temperature=0, n=2
    )
    assert len(greedy.choices) == 2 and greedy.choices[0].text == greedy.choices[1].text


def test_n_streamed_choices_each_end_with_their_reason(client: object) -> None:
    stream = client.chat.completions.create(  # type: ignore[attr-defined]
        model="soakgate-mock", messages=[{"role": "user", "content": "Name a colour."}],
        max_tokens=6, n=2, stream=True, stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )  # fmt: skip
    chunks = list(stream)
    texts: dict[int, str] = {0: "", 1: ""}
    reasons: dict[int, list[str | None]] = {0: [], 1: []}
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            reasons[choice.index].append(choice.finish_reason)
    assert set(texts) == {0, 1} and all(texts.values()) and texts[0] != texts[1]
    for index in (0, 1):
        assert reasons[index][-1] == "length" and not any(reasons[index][:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 2 * 6


@pytest.mark.parametrize("n", [0, 17])
def test_an_impossible_n_is_a_bad_request(client: object, n: int) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.completions.create(model="soakgate-mock", prompt="hi", max_tokens=4, n=n)  # type: ignore[attr-defined]
    assert raised.value.status_code == 400 and "n must be between 1 and 16" in str(raised.value)
