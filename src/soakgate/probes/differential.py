"""Differential check: greedy requests sent to the target and to a reference configuration.

Fluent-but-wrong tokens are invisible to degeneration detectors; where the stack is
deterministic, a reference (e.g. the eager configuration) is an oracle for them. `Differential`
is the soak's request check (`load.spec.RequestCheck`): the driver asks it which requests to
send greedy and what to keep of each comparison, and knows nothing else of it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from soakgate.prompts import Prompt
from soakgate.records import first_divergence
from soakgate.targets import OpenAIClient, Outcome, RequestSpec, TargetSpec
from soakgate.targets.client import Session, connect, make_session


def outcome_divergence(target: Outcome, reference: Outcome) -> int:
    """First divergence by token ids when both have them, else by characters of the text."""
    if target.token_ids is not None and reference.token_ids is not None:
        return first_divergence(target.token_ids, reference.token_ids)
    return first_divergence(target.text, reference.text)


def divergence_unit(target: Outcome, reference: Outcome) -> str:
    """What `outcome_divergence` counted: `tokens` when both had ids, else `characters`."""
    both = target.token_ids is not None and reference.token_ids is not None
    return "tokens" if both else "characters"


async def compare_with_reference(
    reference: OpenAIClient, prompt: Prompt, spec: RequestSpec, request_id: str, outcome: Outcome,
    repeat: bool = True,
) -> tuple[int | None, dict[str, object], Outcome]:  # fmt: skip
    """Ask the reference the target's (greedy) request: the first divergence of the target's
    answer from it (None when the reference failed), and what the row keeps of it. With
    `repeat`, the reference is asked once more right after, and where that second answer first
    diverges from its first (`reference_repeat`, -1: identical) is kept too: the reference's own
    nondeterminism, measured beside every comparison, which the verdict judges divergence
    against. The reference's answer comes last."""
    answer = await reference.generate(prompt, spec, f"{request_id}-ref")
    if answer.error_class is not None:
        return None, {"reference_error": answer.error_class}, answer
    marks: dict[str, object] = {"unit": divergence_unit(outcome, answer)}
    if repeat:
        again = await reference.generate(prompt, spec, f"{request_id}-ref2")
        if again.error_class is None:
            marks["reference_repeat"] = outcome_divergence(again, answer)
        else:
            marks["reference_repeat_error"] = again.error_class
    return outcome_divergence(outcome, answer), marks, answer


CROSS_MATCH = 16
"""Leading tokens (characters where there are no ids: four times as many, or the whole answer
when it is identical and its usage counts this many tokens) a divergent answer must share with
the reference's answer to another prompt, and more than with its own, to be taken for that
prompt's answer (`Compared.cross_check`)."""
KEPT_ANSWERS = 512
"""Reference answers kept for the cross-check (the latest, one per prompt text)."""
RECENT = 32
"""Requests of each target remembered (sent last) as the sources a divergent answer may have
come from."""
LOOKUPS = 8
"""At most this many of them a divergent answer asks the reference about (their prompts'
answers not kept yet), latest first."""


def _units(outcome: Outcome, unit: str) -> str:
    """An answer as one string of its units (a token id a character) for substring search."""
    if unit != "tokens":
        return outcome.text
    try:
        return "".join(map(chr, outcome.token_ids or ()))
    except (ValueError, OverflowError):  # an id no code point holds: no run is looked for
        return ""


def run_from(
    outcome: Outcome, other: Outcome, start: int, needed: int, unit: str, mine: Outcome | None
) -> int:
    """How long a run of `outcome` from `start` on is found in `other` (0 when shorter than
    `needed`, or held by `mine` too: its own prompt's answer explains it)."""
    if start < 0:
        return 0
    seq, theirs = _units(outcome, unit), _units(other, unit)
    needle = seq[start : start + needed]
    where = theirs.find(needle) if len(needle) == needed else -1
    if where < 0 or (mine is not None and needle in _units(mine, unit)):
        return 0
    length = needed
    while start + length < len(seq) and where + length < len(theirs):
        if seq[start + length] != theirs[where + length]:
            break
        length += 1
    return length


def is_sampled(seq: int, fraction: float, seed: int = 0) -> bool:
    """Whether request `seq` joins the differential sample (reproducible from seq and seed)."""
    return fraction > 0 and random.Random(f"{seed}:{seq}").random() < fraction


def greedy(spec: RequestSpec, seed: int = 0) -> RequestSpec:
    """The same request made greedy and seeded, so a deterministic stack must repeat itself."""
    return dataclasses.replace(spec, temperature=0.0, top_p=None, seed=spec.seed or seed)


@dataclass(frozen=True, slots=True)
class Baseline:
    """The reference's own nondeterminism, measured before the differential check is trusted."""

    pairs: int
    """Comparisons made (same prompt twice to one reference, and across references)."""
    divergent: int
    """How many of them differed."""
    errors: int
    """Comparisons lost to request errors."""
    positions: tuple[int, ...] = ()
    """First divergence of each comparison made (-1: identical)."""

    @property
    def informative(self) -> bool:
        """True when the reference always repeated itself: differential verdicts mean something."""
        return self.pairs > 0 and self.divergent == 0


async def measure_baseline(
    references: Sequence[OpenAIClient], prompts: Sequence[Prompt], spec: RequestSpec
) -> Baseline:
    """Send each prompt twice to the first reference (and once to each other reference)."""
    greedy_spec = greedy(spec)
    pairs = divergent = errors = 0
    positions: list[int] = []
    for index, prompt in enumerate(prompts):
        first, *others = references
        runs = [first.generate(prompt, greedy_spec, f"baseline-{index}-{n}") for n in range(2)]
        runs += [ref.generate(prompt, greedy_spec, f"baseline-{index}-x{n}")
                 for n, ref in enumerate(others)]  # fmt: skip
        outcomes = await asyncio.gather(*runs)
        anchor = outcomes[0]
        for other in outcomes[1:]:
            if anchor.error_class or other.error_class:
                errors += 1
                continue
            pairs += 1
            positions.append(outcome_divergence(anchor, other))
            divergent += positions[-1] >= 0
    return Baseline(pairs, divergent, errors, tuple(positions))


@dataclass(frozen=True, slots=True)
class Differential:
    """Send a sampled fraction of requests, greedy, to a reference too and store the divergence."""

    reference: TargetSpec | None
    """The reference configuration's server (e.g. the eager build), for targets not in
    `per_target`."""
    fraction: float = 0.03
    """Share of requests sampled (reproducibly, by sequence number)."""
    per_target: Mapping[str, TargetSpec] = field(default_factory=dict)
    """Target name -> its own reference (a campaign pairs each device with a reference instance
    on the same device)."""
    repeat: bool = True
    """Ask the reference each compared request twice: its own nondeterminism, measured beside
    every comparison (`details.differential.reference_repeat`)."""

    def reference_for(self, target: str) -> TargetSpec | None:
        """The reference a target is compared against (None: that target is not compared)."""
        return self.per_target.get(target, self.reference)

    async def open(self, targets: Sequence[TargetSpec], concurrency: int) -> Compared:
        """Discover each compared target's reference (one client per reference) on a session of
        its own (its pools open a connection per request in flight)."""
        session = make_session()
        compared = Compared(self, session)
        try:
            made: dict[TargetSpec, OpenAIClient] = {}
            for target in targets:
                spec = self.reference_for(target.name)
                if spec is not None:
                    if spec not in made:
                        made[spec] = await connect(session, spec)
                    compared.clients[target.name] = made[spec]
        except BaseException:
            await session.close()
            raise
        return compared


@dataclass(slots=True)
class Compared:
    """A `Differential` open for one soak: its references' clients and their session."""

    differential: Differential
    session: Session
    clients: dict[str, OpenAIClient] = field(default_factory=dict)
    """Target name -> the client its chosen requests are compared against."""
    answers: dict[tuple[str, str], tuple[str, Outcome]] = field(default_factory=dict)
    """(target, prompt id) -> (request id, the reference's answer) of the last compared
    requests (KEPT_ANSWERS at most), for the cross-check of divergent answers. By prompt id,
    not text: requests of one prompt with different canaries are the same prompt."""
    recent: dict[str, deque[tuple[str, Prompt]]] = field(default_factory=dict)
    """Target -> (request id, prompt as sent) of its RECENT requests sent last: a divergent
    answer's possible sources, asked of the reference when their answers are not kept."""
    asking: dict[tuple[str, str], asyncio.Future[Outcome]] = field(default_factory=dict)
    """(target, prompt id) -> the reference's answer being asked for: divergent answers that
    come together (a leak hits several requests in flight) share one lookup per prompt."""

    def choose(
        self, target: str, seq: int, spec: RequestSpec, prompt: Prompt | None = None,
        request_id: str = "",
    ) -> RequestSpec | None:  # fmt: skip
        """The greedy request, for a sampled request of a compared target (every request of
        one is remembered with its prompt)."""
        if target not in self.clients:
            return None
        if prompt is not None:
            self.recent.setdefault(target, deque(maxlen=RECENT)).append((request_id, prompt))
        if is_sampled(seq, self.differential.fraction):
            return greedy(spec)
        return None

    async def check(
        self, target: str, prompt: Prompt, spec: RequestSpec, request_id: str, outcome: Outcome
    ) -> tuple[int | None, dict[str, object]]:
        """The target's answer compared with its reference's (`compare_with_reference`); a
        divergent one is cross-checked against the reference's answers to other prompts, those
        of the requests sent by the time it came asked of the reference where not kept."""
        sent = [(rid, p) for rid, p in self.recent.get(target, ()) if rid != request_id]
        divergence, marks, answer = await compare_with_reference(
            self.clients[target], prompt, spec, request_id, outcome, self.differential.repeat
        )
        if answer.error_class is None:
            self._keep(target, prompt.prompt_id, request_id, answer)
        if divergence is not None and divergence >= 0:
            match = self.cross_check(target, prompt.prompt_id, outcome, divergence, answer)
            if match is None:
                kept, failed = await self._ask_sources(target, prompt, spec, request_id, sent)
                if failed:  # a leak from those prompts could not be seen
                    marks["source_lookups_failed"] = failed
                if kept:
                    match = self.cross_check(target, prompt.prompt_id, outcome, divergence, answer)
            if match is not None:
                # the source: the latest request of that prompt sent by the time this answer
                # came (one in flight with it), rather than the one whose answer was kept
                mine = [rid for rid, p in sent if p.prompt_id == match["source_prompt"]]
                if mine:
                    match["source"] = mine[-1]
                marks["matches_other_prompt"] = match
        return divergence, marks

    def _keep(self, target: str, prompt_id: str, request_id: str, answer: Outcome) -> None:
        """Keep a reference answer for the cross-check (the latest KEPT_ANSWERS)."""
        self.answers.pop((target, prompt_id), None)
        self.answers[(target, prompt_id)] = (request_id, answer)
        if len(self.answers) > KEPT_ANSWERS:
            del self.answers[next(iter(self.answers))]

    async def _ask_sources(
        self, target: str, prompt: Prompt, spec: RequestSpec, request_id: str,
        sent: Sequence[tuple[str, Prompt]],
    ) -> tuple[bool, int]:  # fmt: skip
        """Ask the reference, greedy and together, the prompts of the target's requests sent
        last whose answers are not kept (`sent`: those sent by the time its answer came;
        LOOKUPS at most, latest first): a leak that made the model continue another request's
        prompt (a cache slot or KV block handed to the wrong request) is that request's greedy
        answer, and its source is often still in flight, its own comparison not yet made. A
        prompt another divergent answer is already asking about is not asked again.
        (Whether some answer was kept, how many lookups failed.)"""
        seen: set[str] = {prompt.prompt_id}
        asks: list[tuple[str, Prompt]] = []
        for source, other in reversed(sent):
            if len(asks) >= LOOKUPS:
                break
            if other.prompt_id not in seen and (target, other.prompt_id) not in self.answers:
                asks.append((source, other))
            seen.add(other.prompt_id)
        answers = await asyncio.gather(*(
            self._ask(target, other, spec, f"{request_id}-src{n}")
            for n, (_, other) in enumerate(asks, 1)
        ))  # fmt: skip
        kept, failed = False, 0
        for (source, other), answer in zip(asks, answers, strict=True):
            if answer.error_class is None:
                if (target, other.prompt_id) not in self.answers:
                    self._keep(target, other.prompt_id, source, answer)
                kept = True
            else:
                failed += 1
        return kept, failed

    async def _ask(
        self, target: str, prompt: Prompt, spec: RequestSpec, request_id: str
    ) -> Outcome:
        """The reference's greedy answer to `prompt`, shared with any lookup of it in flight."""
        key = (target, prompt.prompt_id)
        pending = self.asking.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self.clients[target].generate(prompt, spec, request_id))
            self.asking[key] = pending
            pending.add_done_callback(lambda _: self.asking.pop(key, None))
        return await asyncio.shield(pending)

    def cross_check(
        self, target: str, prompt_id: str, outcome: Outcome, own: int, mine: Outcome | None = None
    ) -> dict[str, object] | None:
        """The kept reference answer to another prompt that this divergent answer follows
        furthest, one of two ways, each for at least CROSS_MATCH tokens: from its first token
        and further than it follows its own (a greedy answer to another user's prompt: a
        request served from another's context), or from where it left its own answer (`own`),
        as a run found anywhere in the other answer that its own reference answer (`mine`)
        does not hold (another request's tokens delivered into this one: an output buffer or
        a stream crossed; `at` names where it starts)."""
        best: tuple[int, str, str, str, int] | None = None
        for (kept_target, kept_prompt), (source, answer) in list(self.answers.items()):
            if kept_target != target or kept_prompt == prompt_id:
                continue
            shared = outcome_divergence(outcome, answer)
            unit = divergence_unit(outcome, answer)
            needed = CROSS_MATCH if unit == "tokens" else 4 * CROSS_MATCH
            if shared < 0:  # identical: as long as the whole answer, in tokens by its usage
                shared = len(answer.token_ids or []) if unit == "tokens" else len(answer.text)
                if unit != "tokens" and (answer.completion_tokens or 0) >= CROSS_MATCH:
                    needed = min(needed, shared)
            at = 0
            if shared < needed or shared <= own:
                shared, at = run_from(outcome, answer, own, needed, unit, mine), own
            if shared >= needed and (best is None or shared > best[0]):
                best = (shared, source, unit, kept_prompt, at)
        if best is None:
            return None
        match: dict[str, object] = {"source": best[1], "shared": best[0], "unit": best[2],
                                    "source_prompt": best[3]}  # fmt: skip
        if best[4]:
            match["at"] = best[4]
        return match

    async def close(self) -> None:
        for pending in list(self.asking.values()):
            pending.cancel()
        await self.session.close()


async def reference_baseline(
    references: Sequence[TargetSpec], prompts: Sequence[Prompt], spec: RequestSpec
) -> Baseline:
    """The references' own nondeterminism on a few prompts, before any differential verdict."""
    async with make_session() as session:
        clients = [await connect(session, ref) for ref in references]
        return await measure_baseline(clients, prompts, spec)
