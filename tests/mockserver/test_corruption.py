"""The gate's control in the mock (issue 25): state corrupted under concurrent load answers garbage
with HTTP 200 until the process dies of SIGSEGV; late perturbation; a server without
/v1/models."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import aiohttp
import pytest

from soakgate.mockserver import MockConfig
from soakgate.mockserver.process import MockProcess
from tests.mockserver.helpers import completion, post, run_against


def _answers(config: MockConfig, concurrent: int) -> list[dict[str, object]]:
    """`concurrent` greedy answers requested at once, then one more alone."""

    async def body(session: aiohttp.ClientSession) -> list[dict[str, object]]:
        ask = completion(max_tokens=24, temperature=0, return_token_ids=True)
        together = await asyncio.gather(*(post(session, "/v1/completions", ask)
                                          for _ in range(concurrent)))  # fmt: skip
        alone = await post(session, "/v1/completions", ask)
        return [json.loads(raw)["choices"][0] for _, raw in [*together, alone]]

    return run_against(config, body)


def test_without_load_the_flag_changes_nothing() -> None:
    plain = _answers(MockConfig(), 1)
    flagged = _answers(MockConfig(corrupt_at_in_flight=3, corrupt_rate=1.0), 1)
    assert [a["text"] for a in flagged] == [a["text"] for a in plain]
    assert plain[0]["text"] == plain[1]["text"]  # greedy: the same answer every time


def test_a_request_arriving_under_load_corrupts_the_state_for_good(tmp_path: Path) -> None:
    truth = tmp_path / "truth.jsonl"
    config = MockConfig(corrupt_at_in_flight=3, corrupt_rate=1.0, ground_truth=truth,
                        tokens_per_s=200.0)  # fmt: skip
    answers = _answers(config, 4)
    clean = _answers(MockConfig(), 1)[0]
    rows = [json.loads(line) for line in truth.read_text().splitlines()]
    corrupt = [row["corrupt"] for row in rows]
    assert corrupt[:2] == [False, False] and all(corrupt[2:])  # the third arrival saw 3 in flight
    assert answers[-1]["text"] != clean["text"]  # alone, after: still garbage (200 OK)
    assert answers[0]["text"] == clean["text"]
    ids = answers[-1]["token_ids"]
    assert isinstance(ids, list) and ids[0] != clean["token_ids"][0]  # wrong from token 0


def test_a_corrupt_server_dies_of_sigsegv() -> None:
    mock = MockProcess(["--corrupt-at-in-flight", "1", "--corrupt-crash-rate", "1"]).start()
    try:
        with pytest.raises(aiohttp.ClientError):  # the connection dies with the server
            asyncio.run(_one(mock.url))
        assert mock.wait(30) == -signal.SIGSEGV
        (row,) = mock.ground_truth()
        assert row["corrupt"] and row["crash"]
    finally:
        mock.close()


async def _one(url: str) -> None:
    async with aiohttp.ClientSession(url) as session:
        await post(session, "/v1/completions", completion(max_tokens=8))


def test_perturbation_from_a_position_leaves_the_start_alone() -> None:
    (expected, _) = _answers(MockConfig(), 1)
    for _ in range(5):
        (answer, _) = _answers(MockConfig(perturb_rate=1.0, perturb_from=10), 1)
        ids, clean = answer["token_ids"], expected["token_ids"]
        assert isinstance(ids, list) and isinstance(clean, list)
        assert ids[:10] == clean[:10] and ids != clean


def test_the_no_models_quirk_answers_404() -> None:
    async def body(session: aiohttp.ClientSession) -> int:
        async with session.get("/v1/models") as response:
            return response.status

    assert run_against(MockConfig(quirks=frozenset({"no-models"})), body) == 404
    assert run_against(MockConfig(), body) == 200


def test_the_flags_are_checked() -> None:
    from soakgate.errors import UsageError

    with pytest.raises(UsageError, match="--corrupt-rate"):
        MockConfig(corrupt_rate=1.5)
    with pytest.raises(UsageError, match="--corrupt-at-in-flight"):
        MockConfig(corrupt_at_in_flight=-1)
    with pytest.raises(UsageError, match="--perturb-from"):
        MockConfig(perturb_from=-2)
