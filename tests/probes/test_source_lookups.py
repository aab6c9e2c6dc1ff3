"""The greedy differential's lookups of a divergent answer's possible sources (issue 29 item 1):
a leak that made the model continue another request's prompt is found by asking the reference
the prompts of the requests sent by then. Divergent answers that come together (a leak hits
several requests in flight) share one lookup per prompt, and lookups that fail are counted on
the row, not silently dropped. A fake reference stands in for the model: its greedy answer is a
function of the prompt, it answers slowly (so lookups overlap) and fails on the prompts told."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

from soakgate.probes.differential import LOOKUPS, Compared, Differential
from soakgate.prompts import Prompt
from soakgate.targets import Outcome, RequestSpec

SPEC = RequestSpec(max_tokens=24, temperature=0.0, stream=False, return_token_ids=True)


def answer_to(text: str) -> list[int]:
    """The fake model's greedy answer to a prompt: 24 tokens that depend on all of it."""
    base = sum(ord(c) * (n + 1) for n, c in enumerate(text))
    return [(base * (k + 7)) % 5000 for k in range(24)]


class FakeReference:
    def __init__(self, failing: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.asked: Counter[str] = Counter()
        self.failing = failing

    async def generate(self, prompt: Prompt, spec: RequestSpec, request_id: str) -> Outcome:
        self.asked[prompt.prompt_id] += 1
        await asyncio.sleep(0.05)
        if prompt.prompt_id in self.failing:
            return Outcome(started_at=time.time(), error_class="timeout")
        ids = answer_to(prompt.text)
        return Outcome(started_at=time.time(), text=" ".join(map(str, ids)), token_ids=ids)


class FakeSession:
    async def close(self) -> None:
        pass


def compared(reference: FakeReference) -> Compared:
    open_ = Compared(Differential(reference=None, fraction=1.0), FakeSession())  # type: ignore[arg-type]
    open_.clients["t"] = reference  # type: ignore[assignment]
    return open_


PROMPTS = [Prompt(f"p{n}", f"prompt number {n} about a topic") for n in range(12)]


def send(open_: Compared, count: int) -> list[str]:
    ids = [f"run-{seq}" for seq in range(count)]
    for seq, rid in enumerate(ids):
        open_.choose("t", seq, SPEC, PROMPTS[seq], rid)
    return ids


def leaked(source: Prompt) -> Outcome:
    ids = answer_to(source.text)
    return Outcome(started_at=time.time(), text=" ".join(map(str, ids)), token_ids=ids)


async def check(open_: Compared, seq: int, source: int) -> dict[str, Any]:
    _, marks = await open_.check("t", PROMPTS[seq], SPEC, f"run-{seq}", leaked(PROMPTS[source]))
    return marks


def test_answers_leaked_from_one_waiting_request_are_found_with_one_lookup_of_its_prompt() -> None:
    reference = FakeReference()
    open_ = compared(reference)
    send(open_, 8)

    async def together() -> list[dict[str, Any]]:  # requests 1, 2 and 3 all continued 7's prompt
        return list(await asyncio.gather(*(check(open_, seq, 7) for seq in (1, 2, 3))))

    for marks in asyncio.run(together()):
        assert marks["matches_other_prompt"]["source"] == "run-7", marks
        assert marks["matches_other_prompt"]["source_prompt"] == "p7"
        assert "source_lookups_failed" not in marks
    assert reference.asked["p7"] == 1, reference.asked  # one lookup for the three answers


def test_failed_lookups_are_counted_on_the_row_and_the_leak_is_not_claimed() -> None:
    reference = FakeReference(failing={"p7"})
    open_ = compared(reference)
    send(open_, 8)
    marks = asyncio.run(check(open_, 1, 7))
    assert "matches_other_prompt" not in marks
    assert marks["source_lookups_failed"] == 1, marks


def test_lookups_stop_at_the_latest_sources_and_an_older_one_is_not_found() -> None:
    reference = FakeReference()
    open_ = compared(reference)
    send(open_, LOOKUPS + 3)  # requests 0 .. LOOKUPS + 2 sent; 1 answers, 0 is the oldest
    marks = asyncio.run(check(open_, 1, 0))
    assert "matches_other_prompt" not in marks
    asked = {p for p, n in reference.asked.items() if p != "p1"}
    assert len(asked) == LOOKUPS and "p0" not in asked, reference.asked
    marks = asyncio.run(check(open_, 2, LOOKUPS + 2))  # the latest: its answer is kept now
    assert marks["matches_other_prompt"]["source"] == f"run-{LOOKUPS + 2}"
