"""Request seeds through the real mock process: a seeded sampled request is answered the same
whenever its body is the same (completions and chat, streamed and not), an unseeded one by its
request id as before, --ignore-seeds answers seeded ones so too, and --seed-drift-rate makes a
seeded answer differ from its undrifted twin exactly where the ground truth says."""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
import pytest

from soakgate.errors import UsageError
from soakgate.mockserver import MockConfig, MockProcess
from soakgate.mockserver.inject import Injector, drift
from soakgate.mockserver.text import VOCAB, clean_tokens, continuation_offset
from tests.mockserver.helpers import chat, completion, parse_stream, post

COMPLETIONS, CHAT = "/v1/completions", "/v1/chat/completions"
Request = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class Choice:
    """One choice as it came: its text, token ids and finish reason."""

    text: str
    ids: tuple[int, ...]
    finish: str | None


def _choice_text(path: str, part: dict[str, Any]) -> str:
    if path == CHAT:
        message = part.get("message") or part.get("delta") or {}
        return str(message.get("content") or "")
    return str(part.get("text") or "")


def parse_answer(path: str, body: dict[str, Any], raw: bytes) -> list[Choice]:
    """The choices of an answer, streamed or not, in index order."""
    if not body.get("stream"):
        parts = json.loads(raw)["choices"]
        return [Choice(_choice_text(path, p), tuple(p.get("token_ids") or ()),
                       p.get("finish_reason")) for p in parts]  # fmt: skip
    chunks, done = parse_stream(raw)
    assert done
    texts: dict[int, str] = {}
    ids: dict[int, list[int]] = {}
    finish: dict[int, str | None] = {}
    for chunk in chunks:
        for part in chunk["choices"]:
            index = part["index"]
            texts[index] = texts.get(index, "") + _choice_text(path, part)
            ids.setdefault(index, []).extend(part.get("token_ids") or ())
            finish[index] = part.get("finish_reason") or finish.get(index)
    return [Choice(texts[i], tuple(ids[i]), finish[i]) for i in sorted(texts)]


async def _send(url: str, requests: list[Request], concurrency: int) -> list[bytes]:
    semaphore = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession(url, timeout=aiohttp.ClientTimeout(total=30)) as session:

        async def one(index: int, path: str, body: dict[str, Any]) -> bytes:
            async with semaphore:
                status, raw = await post(session, path, body, f"req-{index}")
                assert status == 200, raw
                return raw

        return await asyncio.gather(*(one(i, p, b) for i, (p, b) in enumerate(requests)))


def answers(mock: MockProcess, requests: list[Request], concurrency: int = 8) -> list[list[Choice]]:
    """The choices of each request, in order (request i is sent as `req-i`)."""
    raws = asyncio.run(_send(mock.url, requests, concurrency))
    return [parse_answer(path, body, raw)
            for (path, body), raw in zip(requests, raws, strict=True)]  # fmt: skip


def truths(mock: MockProcess) -> dict[str, dict[str, Any]]:
    return {record["request_id"]: record for record in mock.ground_truth()}


def body_of(path: str, prompt: str, **fields: Any) -> dict[str, Any]:
    make = chat if path == CHAT else completion
    return make(prompt, return_token_ids=True, **fields)


def seeded_requests(seed: int = 7, temperature: float = 0.8) -> list[Request]:
    """Every shape (endpoint, streamed or not), a few with top_p or two choices."""
    requests = []
    for i in range(12):
        for path in (COMPLETIONS, CHAT):
            for stream in (False, True):
                fields: dict[str, Any] = {"seed": seed + i % 3, "temperature": temperature,
                                          "stream": stream, "max_tokens": 8 + i * 3}  # fmt: skip
                if i % 4 == 1:
                    fields["top_p"] = 0.9
                if i % 5 == 2:
                    fields["n"] = 2
                requests.append((path, body_of(path, f"prompt {i} about caches", **fields)))
    return requests


def test_the_same_seeded_body_gets_the_same_answer() -> None:
    requests = seeded_requests()
    unseeded = [(p, body_of(p, f"filler {i}", temperature=0.8)) for i, p in enumerate([CHAT] * 9)]
    with MockProcess(["--seed", "1", "--stop-rate", "0.5"]) as first:
        once = answers(first, requests)
        answers(first, unseeded)  # other requests in between
        again = answers(first, requests[::-1])[::-1]  # other request ids, another order
    with MockProcess(["--seed", "2", "--stop-rate", "0.5"]) as other:
        elsewhere = answers(other, requests)
    assert once == again == elsewhere
    finishes = {c.finish for choices in once for c in choices}
    assert finishes == {"stop", "length"}  # early stops are decided by the body too
    for (_, body), choices in zip(requests, once, strict=True):
        assert len(choices) == body.get("n", 1)
        assert all(c.ids and "".join(VOCAB[t] for t in c.ids) == c.text for c in choices)
        if len(choices) == 2:  # each choice is its own sample
            assert choices[0] != choices[1]
    # streamed or not, the same body but `stream` gets the same answer
    for streamed, plain in zip(once[1::2], once[::2], strict=True):
        assert streamed == plain


def test_other_seeds_and_sampling_get_other_answers() -> None:
    prompts = [f"question {i}: what does the cache hold?" for i in range(20)]

    def shaped(**fields: Any) -> list[Request]:
        return [(COMPLETIONS, body_of(COMPLETIONS, p, max_tokens=12, **fields)) for p in prompts]

    with MockProcess([]) as mock:
        base = answers(mock, shaped(seed=1, temperature=0.8))
        others = [answers(mock, shaped(**fields)) for fields in (
            {"seed": 2, "temperature": 0.8}, {"seed": 1, "temperature": 0.7},
            {"seed": 1, "temperature": 0.8, "top_p": 0.95})]  # fmt: skip
        unseeded = [answers(mock, shaped(temperature=0.8)) for _ in range(2)]
        status, _ = asyncio.run(_status(mock.url, body_of(COMPLETIONS, "x", top_p="high")))
    for other in others:
        assert sum(a != b for a, b in zip(base, other, strict=True)) >= 18
    # without a seed: keyed by (server seed, request id) as before; both sends used ids req-i
    assert unseeded[0] == unseeded[1]
    assert status == 400  # a top_p that is not a number


async def _status(url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    async with aiohttp.ClientSession(url) as session:
        return await post(session, COMPLETIONS, body)


def test_unseeded_sends_differ_and_ignore_seeds_answers_by_request_id() -> None:
    body = body_of(COMPLETIONS, "the same prompt each time", max_tokens=16, temperature=0.8)
    seeded = {**body, "seed": 3}
    with MockProcess([]) as honours, MockProcess(["--ignore-seeds"]) as ignores:
        unseeded = asyncio.run(_distinct_sends(honours.url, body, 10))
        repeated = asyncio.run(_distinct_sends(honours.url, seeded, 10))
        ignored = asyncio.run(_distinct_sends(ignores.url, seeded, 10))
        greedy = asyncio.run(_distinct_sends(ignores.url, {**seeded, "temperature": 0}, 4))
    # Unseeded (or seeds ignored), each send draws its own stream; two of ten short answers of
    # the mock's bigram model can still be the same text by chance (9 of 10 distinct in one CI
    # run, 2026-12-05), so "differ" is most of them, against exactly one text when seeded.
    assert len(set(unseeded)) >= 8
    assert len(set(repeated)) == 1
    assert len(set(ignored)) >= 8
    assert len(set(greedy)) == 1  # greedy is keyed by (prompt, seed) either way


async def _distinct_sends(url: str, body: dict[str, Any], count: int) -> list[str]:
    """The text of `count` sends of `body`, each with no request id (the mock numbers them)."""
    async with aiohttp.ClientSession(url) as session:
        texts = []
        for _ in range(count):
            status, raw = await post(session, COMPLETIONS, body)
            assert status == 200, raw
            texts.append(json.loads(raw)["choices"][0]["text"])
        return texts


def drift_requests() -> list[Request]:
    """Seeded sampled and greedy requests of every shape, unseeded ones, and seeded structured
    ones (never drifted)."""
    requests = seeded_requests() + seeded_requests(seed=11, temperature=0.0)
    requests += [(path, body_of(path, f"unseeded {i}", temperature=0.8 * (i % 2), max_tokens=20,
                                stream=i % 3 == 0)) for i, path in enumerate([COMPLETIONS, CHAT] * 6)]  # fmt: skip
    requests += [(CHAT, body_of(CHAT, f"json {i}", seed=i, max_tokens=200, temperature=0.8,
                                guided_json={"type": "object"})) for i in range(4)]  # fmt: skip
    return requests


def char_offset(ids: tuple[int, ...], position: int) -> int:
    return sum(len(VOCAB[t]) for t in ids[:position])


def test_every_seeded_answer_drifts_where_its_ground_truth_says() -> None:
    requests = drift_requests()
    with MockProcess(["--seed-drift-rate", "1"]) as drifting, MockProcess([]) as reference:
        drifted, truth = answers(drifting, requests), truths(drifting)
        undrifted = answers(reference, requests)
        assert all(t["seed_drift"] is None for t in truths(reference).values())
    positions = []
    for index, ((_, body), got, want) in enumerate(zip(requests, drifted, undrifted, strict=True)):
        record = truth[f"req-{index}"]
        assert record["seed"] == body.get("seed")
        at = record["seed_drift"]
        if "seed" not in body or "guided_json" in body:
            assert at is None and got == want, record
            continue
        assert at is not None, record
        positions.append(at / len(want[0].ids))
        first, clean = got[0], want[0]
        assert 0 <= at < len(clean.ids) == len(first.ids)
        assert first.finish == clean.finish
        assert first.ids[:at] == clean.ids[:at] and first.ids[at] != clean.ids[at]
        assert VOCAB[first.ids[at]] != VOCAB[clean.ids[at]]
        offset = char_offset(clean.ids, at)
        assert first.text[:offset] == clean.text[:offset]
        within = min(len(VOCAB[first.ids[at]]), len(VOCAB[clean.ids[at]]))
        part = slice(offset, offset + within)
        assert first.text[part] != clean.text[part]  # the texts part within p's token
        assert got[1:] == want[1:]  # only the first choice drifts
    assert len(positions) == 96
    assert min(positions) < 0.2 and max(positions) > 0.8  # p is drawn over the whole answer


def test_seed_drift_only_under_concurrency() -> None:
    requests = [(COMPLETIONS, body_of(COMPLETIONS, f"load {i}", seed=i, temperature=0.8,
                                      max_tokens=16)) for i in range(8)]  # fmt: skip
    args = ["--seed-drift-rate", "1", "--seed-drift-after-in-flight", "4", "--latency-ms", "100"]
    with MockProcess(args) as mock:
        answers(mock, requests, concurrency=1)
        alone = mock.ground_truth()
        answers(mock, requests, concurrency=8)
        crowded = mock.ground_truth()[len(alone) :]
    assert len(alone) == len(crowded) == 8
    assert all(record["seed_drift"] is None for record in alone)
    drifted = [record["seq"] - 8 for record in crowded if record["seed_drift"] is not None]
    assert 1 <= len(drifted) <= 5 and min(drifted) >= 3  # from the 4th arrival on


def test_drift_flags_are_validated_and_drawn_only_when_set() -> None:
    with pytest.raises(UsageError, match="seed-drift-rate"):
        MockConfig(seed_drift_rate=1.5)
    with pytest.raises(UsageError, match="seed-drift-after-in-flight"):
        MockConfig(seed_drift_after_in_flight=-1)
    others = MockConfig(perturb_rate=0.3, fluent_rate=0.2, collapse_rate=0.1, seed=5)
    plain, seeded_plain = Injector(others), Injector(others)
    assert [plain.decide() for _ in range(500)] == [
        seeded_plain.decide(seeded=True) for _ in range(500)]  # fmt: skip
    unset, with_drift = Injector(others), Injector(replace(others, seed_drift_rate=0.5))
    assert [unset.decide() for _ in range(500)] == [with_drift.decide() for _ in range(500)]
    decisions = [with_drift.decide(seeded=True) for _ in range(4000)]
    drifting = [d for d in decisions if d.seed_drift]
    assert 1500 < len(drifting) < 2200
    assert not any(d.injected or d.fault for d in drifting)
    assert not any(with_drift.decide(structured=True, seeded=True).seed_drift for _ in range(300))


def test_drift_parts_at_its_position_in_id_and_text() -> None:
    rng = random.Random(3)
    for trial in range(2000):
        count, context = 1 + trial % 40, rng.randrange(len(VOCAB))
        seeded, _ = clean_tokens(continuation_offset(rng.getrandbits(128), context), count)
        ids, text, at = drift(seeded, context, rng)
        assert len(ids) == count and 0 <= at < count
        assert ids[:at] == seeded[:at] and ids[at] != seeded[at]
        mine, theirs = VOCAB[ids[at]], VOCAB[seeded[at]]
        assert not mine.startswith(theirs) and not theirs.startswith(mine)
        assert text == "".join(VOCAB[t] for t in ids)
