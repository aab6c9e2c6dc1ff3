"""Log-probabilities through the real mock process: every number of a healthy answer is possible
(completions and chat, streamed and not, sampled and greedy, with and without alternatives), and
with --inconsistent-rate each answer breaks exactly the rule its ground truth names, where it
says, the text untouched."""

from __future__ import annotations

import asyncio
import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import aiohttp
import pytest

from soakgate.errors import UsageError
from soakgate.mockserver import MockConfig, MockProcess
from soakgate.mockserver.inject import Injector
from soakgate.mockserver.logprobs import KINDS, answer_logprobs, applicable
from tests.mockserver.helpers import chat, completion, parse_stream, post

PER_SHAPE = 60
COMPLETIONS, CHAT = "/v1/completions", "/v1/chat/completions"
NEEDS_TWO = {"unsorted", "sum_above_one", "greedy_not_top"}
RULE_OF = {"nan": "not_finite", "infinite": "not_finite", "positive": "positive",
           "unsorted": "unsorted", "sum_above_one": "sum_above_one",
           "greedy_not_top": "greedy_not_top"}  # fmt: skip

Alternatives = list[tuple[str, float]]


@dataclass
class Choice:
    """One choice as it came: each position's (token, logprob, alternatives), the token ids and
    the text."""

    positions: list[tuple[str, float, Alternatives]] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    text: str = ""
    logprobs_seen: bool = False


def shapes() -> Iterator[tuple[str, bool, float, int]]:
    for path in (COMPLETIONS, CHAT):
        for stream in (False, True):
            for temperature in (0.8, 0.0):
                for top in (0, 5):
                    yield path, stream, temperature, top


def request(path: str, stream: bool, temperature: float, top: int, i: int) -> dict[str, Any]:
    """A request of one shape: logprobs asked for (chat's way or completions'), token ids,
    usage; a few ask for two choices."""
    fields: dict[str, Any] = {"temperature": temperature, "max_tokens": 4 + i % 29,
                              "stream": stream, "return_token_ids": True}  # fmt: skip
    if stream:
        fields["stream_options"] = {"include_usage": True}
    if i % 12 == 5:
        fields["n"] = 2
    if path == CHAT:
        return chat(f"shape {i} of {top} at {temperature}", logprobs=True, top_logprobs=top,
                    **fields)  # fmt: skip
    return completion(f"shape {i} of {top} at {temperature}", logprobs=top, **fields)


def shaped_requests() -> list[tuple[str, dict[str, Any]]]:
    return [(path, request(path, stream, temperature, top, i))
            for path, stream, temperature, top in shapes() for i in range(PER_SHAPE)]  # fmt: skip


def _fold(choice: Choice, chat_answer: bool, part: dict[str, Any]) -> None:
    """Add one choice object's (or chunk's) log-probabilities, ids and text."""
    if chat_answer:
        message = part.get("message") or part.get("delta") or {}
        choice.text += message.get("content") or ""
    else:
        choice.text += part.get("text") or ""
    choice.ids += part.get("token_ids") or []
    logprobs = part.get("logprobs")
    if logprobs is None:
        return
    choice.logprobs_seen = True
    if chat_answer:
        for entry in logprobs["content"]:
            alternatives = [(a["token"], a["logprob"]) for a in entry["top_logprobs"]]
            choice.positions.append((entry["token"], entry["logprob"], alternatives))
        return
    assert len(logprobs["tokens"]) == len(logprobs["token_logprobs"]) == len(
        logprobs["top_logprobs"]) == len(logprobs["text_offset"])  # fmt: skip
    for token, value, top in zip(logprobs["tokens"], logprobs["token_logprobs"],
                                 logprobs["top_logprobs"], strict=True):  # fmt: skip
        choice.positions.append((token, value, list(top.items())))


def parse_answer(path: str, body: dict[str, Any], raw: bytes) -> tuple[list[Choice], int | None]:
    """The choices of an answer, streamed or not, and its usage.completion_tokens."""
    chat_answer = path == CHAT
    if not body.get("stream"):
        data = json.loads(raw)
        choices = []
        for part in data["choices"]:
            choices.append(Choice())
            _fold(choices[-1], chat_answer, part)
        return choices, data["usage"]["completion_tokens"]
    chunks, done = parse_stream(raw)
    assert done
    folded: dict[int, Choice] = {}
    usage = None
    for chunk in chunks:
        if chunk.get("usage"):
            usage = chunk["usage"]["completion_tokens"]
        for part in chunk["choices"]:
            _fold(folded.setdefault(part["index"], Choice()), chat_answer, part)
    return [folded[i] for i in sorted(folded)], usage


def broken_rule(position: tuple[str, float, Alternatives], top: int, greedy: bool) -> str | None:
    """The first rule of a possible answer that one position breaks (None: none)."""
    token, sampled, alternatives = position
    values = [value for _, value in alternatives]
    if not all(math.isfinite(v) for v in [sampled, *values]):
        return "not_finite"
    if any(v > 0 for v in [sampled, *values]):
        return "positive"
    assert len(alternatives) == top and len({t for t, _ in alternatives}) == top
    if any(b > a for a, b in pairwise(values)):
        return "unsorted"
    if math.fsum(math.exp(v) for v in values) > 1 + 1e-6:
        return "sum_above_one"
    listed = dict(alternatives)
    if token in listed and listed[token] != sampled:
        return "sampled_mismatch"
    if token not in listed and values and sampled > min(values):
        return "sampled_above_listed"
    if greedy and top >= 1 and (alternatives[0][0] != token or sampled < max(values)):
        return "greedy_not_top"
    return None


async def _send(url: str, requests: list[tuple[str, dict[str, Any]]]) -> list[bytes]:
    semaphore = asyncio.Semaphore(8)
    async with aiohttp.ClientSession(url, timeout=aiohttp.ClientTimeout(total=60)) as session:

        async def one(index: int, path: str, body: dict[str, Any]) -> bytes:
            async with semaphore:
                status, raw = await post(session, path, body, f"req-{index}")
                assert status == 200, raw
                return raw

        return await asyncio.gather(*(one(i, p, b) for i, (p, b) in enumerate(requests)))


Result = tuple[str, dict[str, Any], list[Choice], int | None, dict[str, Any]]


def soak(mock: MockProcess, requests: list[tuple[str, dict[str, Any]]]) -> list[Result]:
    """(path, body, choices, usage, ground truth) of each request, in order."""
    raws = asyncio.run(_send(mock.url, requests))
    truth = {r["request_id"]: r for r in mock.ground_truth()}
    return [(path, body, *parse_answer(path, body, raw), truth[f"req-{i}"])
            for i, ((path, body), raw) in enumerate(zip(requests, raws, strict=True))]  # fmt: skip


def top_of(body: dict[str, Any]) -> int:
    return int(body["top_logprobs"] if "messages" in body else body["logprobs"])


@pytest.fixture(scope="module")
def healthy() -> list[Result]:
    with MockProcess(["--seed", "4"]) as mock:
        return soak(mock, shaped_requests())


def test_every_healthy_number_is_possible(healthy: list[Result]) -> None:
    ranks: set[str] = set()
    for _, body, choices, usage, truth in healthy:
        assert truth["inconsistent"] is None and truth["inconsistent_at"] is None
        top, greedy = top_of(body), body["temperature"] == 0
        assert len(choices) == body.get("n", 1)
        for choice in choices:
            assert choice.positions and len(choice.ids) == len(choice.positions)
            assert "".join(token for token, _, _ in choice.positions) == choice.text
            for position in choice.positions:
                assert broken_rule(position, top, greedy) is None, (body, position)
                token, _, alternatives = position
                listed = [t for t, _ in alternatives]
                ranks.add("none" if not top else str(listed.index(token)) if token in listed
                          else "unlisted")  # fmt: skip
        assert usage == sum(len(c.positions) for c in choices) == sum(len(c.ids) for c in choices)
    # sampled answers' tokens stand at every rank, and outside the alternatives
    assert {"none", "0", "1", "4", "unlisted"} <= ranks


def test_numbers_are_deterministic_per_request_key(healthy: list[Result]) -> None:
    # the same request ids, another process, and other decisions drawn in between
    with MockProcess(["--seed", "4", "--fluent-rate", "0.5"]) as again:
        repeated = soak(again, shaped_requests())
    same = [first[2] == second[2] for first, second in zip(healthy, repeated, strict=True)
            if not second[4]["fluent"]]  # fmt: skip
    assert all(same) and len(same) > 300


def test_prompt_logprobs_are_sorted_and_consistent_with_their_ranks() -> None:
    bodies = [completion(f"prompt {i}: the cache of the server. It was", max_tokens=2,
                         prompt_logprobs=top, return_token_ids=True) for i in range(8) for top in (0, 1, 5, 20)]  # fmt: skip
    with MockProcess([]) as mock:
        raws = asyncio.run(_send(mock.url, [(COMPLETIONS, b) for b in bodies]))
    for body, raw in zip(bodies, raws, strict=True):
        choice = json.loads(raw)["choices"][0]
        ids, top = choice["prompt_token_ids"], body["prompt_logprobs"]
        entries = choice["prompt_logprobs"]
        assert entries[0] is None and len(entries) == len(ids)
        for token, entry in zip(ids[1:], entries[1:], strict=True):
            keys, own = list(entry), entry[str(token)]
            values = [e["logprob"] for e in entry.values()]
            ranks = [e["rank"] for e in entry.values()]
            assert all(math.isfinite(v) and v <= 0 for v in values)
            assert values == sorted(values, reverse=True)
            assert math.fsum(math.exp(v) for v in values) <= 1 + 1e-6
            assert sum(v > own["logprob"] for v in values) < own["rank"]
            if own["rank"] <= top:  # listed at its rank
                assert ranks == list(range(1, len(keys) + 1)) and len(keys) <= top
                assert keys.index(str(token)) == own["rank"] - 1
            else:  # after the top, ranked below all of it
                assert keys[-1] == str(token) and ranks[:-1] == list(range(1, len(keys)))
                assert len(keys) - 1 <= top < own["rank"]


def numbers_requests() -> list[tuple[str, dict[str, Any]]]:
    """Every shape, top-k 1 and 2 too, and answers with usage only or no numbers at all; a few
    structured ones (never made inconsistent)."""
    requests = shaped_requests()
    for i in range(40):
        path = CHAT if i % 2 else COMPLETIONS
        make = chat if path == CHAT else completion
        requests.append((path, request(path, i % 4 < 2, 0.0 if i % 3 else 0.8, 1 + i % 2, i)))
        requests.append((path, make(f"no logprobs {i}", stream=i % 4 < 2, return_token_ids=True,
                                    max_tokens=6, temperature=0.8)))  # fmt: skip
    requests += [(CHAT, chat(f"json {i}", logprobs=True, top_logprobs=3, max_tokens=200,
                             guided_json={"type": "object"})) for i in range(6)]  # fmt: skip
    return requests


def test_every_answer_breaks_the_rule_its_ground_truth_names(healthy: list[Result]) -> None:
    requests = numbers_requests()
    with MockProcess(["--seed", "4", "--inconsistent-rate", "1"]) as mock:
        results = soak(mock, requests)
    clean = {json.dumps(body, sort_keys=True): choices for _, body, choices, _, _ in healthy}
    kinds: dict[str, int] = {}
    for path, body, choices, usage, truth in results:
        kind, at = truth["inconsistent"], truth["inconsistent_at"]
        asked = "top_logprobs" in body or ("logprobs" in body and path == COMPLETIONS)
        carries_usage = not body.get("stream") or "stream_options" in body
        if truth["structured"] or not (asked or carries_usage):
            assert kind is None and at is None, truth
            assert all(broken_rule(p, top_of(body) if asked else 0, False) is None
                       for c in choices for p in c.positions)  # fmt: skip
            continue
        assert kind in KINDS, truth
        kinds[kind] = kinds.get(kind, 0) + 1
        top = top_of(body) if asked else 0
        greedy = body.get("temperature") == 0
        if kind in NEEDS_TWO:
            assert top >= 2, truth
        if kind == "greedy_not_top":
            assert greedy, truth
        if not asked:
            assert kind == "usage_mismatch" and not any(c.logprobs_seen for c in choices)
        twin = clean.get(json.dumps(body, sort_keys=True))
        if twin is not None:  # the same request of the healthy mock: the same text and tokens
            assert [(c.text, c.ids) for c in choices] == [(c.text, c.ids) for c in twin]
        for index, choice in enumerate(choices):
            for position_at, position in enumerate(choice.positions):
                found = broken_rule(position, top, greedy)
                if index == 0 and position_at == at:
                    assert found == RULE_OF[kind], (truth, position)
                else:
                    assert found is None, (truth, position_at, position)
        tokens = sum(len(c.ids) for c in choices)
        assert usage == tokens + (3 if kind == "usage_mismatch" else 0), truth
        assert (at is None) == (kind == "usage_mismatch")
        if kind in ("nan", "infinite", "positive"):
            value = choices[0].positions[at][1]
            assert {"nan": math.isnan(value), "infinite": value == -math.inf,
                    "positive": value > 0}[kind]  # fmt: skip
    assert set(kinds) == set(KINDS) and min(kinds.values()) >= 10, kinds


def test_the_bare_json_tokens_of_impossible_numbers() -> None:
    body = completion("bare", logprobs=2, max_tokens=12, temperature=0.8)
    with MockProcess(["--seed", "1", "--inconsistent-rate", "1"]) as mock:
        raws = asyncio.run(_send(mock.url, [(COMPLETIONS, body)] * 40))
        truth = mock.ground_truth()
    for raw, record in zip(raws, truth, strict=True):
        if record["inconsistent"] == "nan":
            assert b"NaN" in raw and b"Infinity" not in raw
        elif record["inconsistent"] == "infinite":
            assert b"-Infinity" in raw and b"NaN" not in raw
        else:
            assert b"NaN" not in raw and b"Infinity" not in raw


def test_the_fault_is_exclusive_and_the_flag_is_validated() -> None:
    with pytest.raises(UsageError, match="inconsistent-rate"):
        MockConfig(inconsistent_rate=1.5)
    config = MockConfig(inconsistent_rate=0.5, collapse_rate=0.2, perturb_rate=0.3,
                        fluent_rate=0.2, crosstalk_rate=0.2, fault_rates={"http_500": 0.1})  # fmt: skip
    injector = Injector(config)
    decisions = [injector.decide(numbers=True) for _ in range(4000)]
    broken = [d for d in decisions if d.inconsistent]
    assert 1200 < len(broken) < 2000
    assert not any(d.injected or d.fault or d.perturb or d.fluent or d.crosstalk or d.shift
                   for d in broken)  # fmt: skip
    assert not any(injector.decide(numbers=False).inconsistent for _ in range(500))
    assert not any(injector.decide(structured=True, numbers=True).inconsistent for _ in range(500))


def test_kinds_apply_only_where_they_can() -> None:
    entries = answer_logprobs(5, [40, 41, 42, 43], 5, greedy=False)
    assert "greedy_not_top" not in applicable(entries, 5, False, True)
    assert applicable(entries, 1, False, False) == ["nan", "infinite", "positive"]
    assert applicable(None, 0, True, True) == ["usage_mismatch"]
    assert applicable(None, 0, False, False) == []
    greedy = answer_logprobs(5, [40, 41, 42], 2, greedy=True)  # the sampled token leads: no pair
    assert "unsorted" not in applicable(greedy, 2, True, True)
    assert "greedy_not_top" in applicable(greedy, 2, True, True)
    rng = random.Random(0)
    for count in range(1, 40):
        ids = [rng.randrange(265) for _ in range(count)]
        for entry in answer_logprobs(rng.randrange(265), ids, 20, greedy=bool(count % 2)):
            assert len(entry.top) == 20 and entry.top[0][1] <= 0
