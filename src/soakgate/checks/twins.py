"""Twin requests (`twin_mismatch`): a share of requests sent twice, the same body with the same
`seed`, to the same target; a pair whose answers differ is a mismatch.

A server that honours seeds answers a seeded sampled request the same way every time, unless its
kernels' results depend on the batch the request lands in (many stacks' do), or something under
load corrupts it (a race, a kernel given the wrong slot, state that builds up). A greedy
comparison with a reference sees only greedy traffic; twins see the sampled traffic production
serves. Because batch noise alone makes pairs differ on some stacks, the check measures the
stack's own rate first: `at_rest` sends pairs one at a time to each target, nothing else in
flight (a `twin_baseline` event per target), and the report puts the rate under load beside it.

How a soak uses it (`load.spec.TwinCheck`): request `seq` is chosen as a pair's *first*
(reproducibly, by run and sequence number: `fraction` of the requests), sent with the pair's seed
(the run's `--seed` where given, else one drawn for the pair); its *twin* takes the target's
next request slot once `gap` more of the target's requests have been sent after it (0: the very
next, usually while the first is still in flight: the same time, another batch). The twin waits
for its first's row, then is compared with it by token ids where both have them, else by text:
its row carries `twin_mismatch` (evidence: the first's request id and where they part) or
`+twin_mismatch` (judged, identical; `records.SPARSE_CHECKS`). A pair whose first failed, or
whose twin failed, is not judged. Memory: the pending twins and their firsts' answers, at most
a few per request in flight.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from soakgate.load.spec import Twin
from soakgate.prompts import Prompt, PromptPicker
from soakgate.records import JUDGED, Event, Generation, Run, first_divergence
from soakgate.store import BatchWriter
from soakgate.targets import OpenAIClient, RequestSpec

TWIN_MISMATCH = "twin_mismatch"
EXCERPT = 60
"""Characters of both answers kept around where they part (the first's text may not be stored:
`--store-text flagged`)."""
_SEEDS = 2**31 - 1
_SPACE = 2**64


def _draw(key: str) -> int:
    """A reproducible draw in [0, 2**64) from `key` (BLAKE2b: a tenth of seeding `random`)."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")


@dataclass(frozen=True, slots=True)
class TwinSettings:
    """How the twin check runs (stored in the run's detectors)."""

    fraction: float = 0.0
    """Share of requests made a pair's first (0: off)."""
    gap: int = 0
    """The target's requests sent between a first and its twin (0: the very next slot)."""
    at_rest: int = 32
    """Pairs sent one at a time to each target before the soak (0 differing of 32 lets the
    report call a rate under load above ~9% more than at rest; of 16, only above ~17%)."""

    def describe(self) -> dict[str, Any]:
        """As stored in the run record."""
        return dataclasses.asdict(self)


@dataclass(slots=True)
class _Pending:
    """A first sent, its twin not yet."""

    twin: Twin
    due: int
    """The target's request count at which the twin may be sent."""


@dataclass(slots=True)
class _First:
    """A first's answer, kept until its twin is judged."""

    request_id: str
    seed: int
    done: asyncio.Event = field(default_factory=asyncio.Event)
    text: str | None = None
    token_ids: list[int] | None = None
    error: str | None = None


def compare(
    first_text: str, first_ids: list[int] | None, text: str, ids: list[int] | None
) -> tuple[int, str]:
    """Where two answers part (-1: identical), by token ids when both have them, else by
    characters; and which of the two it counted."""
    if first_ids is not None and ids is not None:
        return first_divergence(first_ids, ids), "tokens"
    return first_divergence(first_text, text), "characters"


class Twins:
    """The twin check of one soak (`load.spec.TwinCheck`)."""

    def __init__(
        self, settings: TwinSettings, run: Run, writer: BatchWriter, spec: RequestSpec
    ) -> None:
        self.settings = settings
        self._run = run
        self._spec = spec
        self._writer = writer
        self._pending: dict[str, deque[_Pending]] = {}
        self._sent: dict[str, int] = {}  # target -> its requests this soak has sent
        self._firsts: dict[int, _First] = {}
        self._twins: dict[int, int] = {}  # a twin's seq -> its first's

    def is_first(self, seq: int) -> bool:
        """Whether request `seq` is a pair's first (reproducible from the run and `seq`)."""
        fraction = self.settings.fraction
        return fraction > 0 and _draw(f"twin:{self._run.run_id}:{seq}") < fraction * _SPACE

    def seed_of(self, seq: int, spec: RequestSpec) -> int:
        """The pair's seed: the run's, else one drawn for the pair."""
        if spec.seed is not None:
            return spec.seed
        return _draw(f"twin-seed:{self._run.run_id}:{seq}") % _SEEDS

    async def at_rest(self, clients: Sequence[OpenAIClient], picker: PromptPicker) -> None:
        """`settings.at_rest` pairs per target, one request at a time, stored as one
        `twin_baseline` event per target."""
        count = self.settings.at_rest
        if count <= 0:
            return
        for client in clients:
            name = client.target.name
            pairs = mismatched = errors = 0
            positions: list[int] = []
            for index in range(count):
                prompt = picker.pick(index)
                spec = dataclasses.replace(self._spec, seed=self.seed_of(-1 - index, self._spec))
                prefix = f"{self._run.run_id}-twin-rest-{name}-{index}"
                first = await client.generate(prompt, spec, f"{prefix}-a")
                second = await client.generate(prompt, spec, f"{prefix}-b")
                if first.error_class is not None or second.error_class is not None:
                    errors += 1
                    continue
                position, _ = compare(first.text, first.token_ids, second.text, second.token_ids)
                pairs += 1
                mismatched += position >= 0
                positions.append(position)
            self._writer.add_event(Event(
                self._run.run_id, time.time(), "twin_baseline", name,
                {"pairs": pairs, "mismatched": mismatched, "errors": errors,
                 "positions": positions},
            ))  # fmt: skip

    def due(self, target: str, seq: int) -> Twin | None:
        """The oldest pending twin of `target` whose gap has passed, sent as request `seq`
        (every request of the target is counted here)."""
        sent = self._sent[target] = self._sent.get(target, 0) + 1
        queue = self._pending.get(target)
        if not queue or queue[0].due > sent:
            return None
        twin = queue.popleft().twin
        self._twins[seq] = twin.first
        return twin

    def first(self, target: str, seq: int, prompt: Prompt, spec: RequestSpec) -> RequestSpec | None:
        """Request `seq` made a pair's first when chosen: its seeded request (its twin queued)."""
        if not self.is_first(seq):
            return None
        seed = self.seed_of(seq, spec)
        seeded = dataclasses.replace(spec, seed=seed)
        twin = Twin(seq, prompt, seeded)
        due = self._sent.get(target, 0) + 1 + self.settings.gap  # the first is counted
        self._pending.setdefault(target, deque()).append(_Pending(twin, due))
        self._firsts[seq] = _First(f"{self._run.run_id}-{seq}", seed)
        return seeded

    async def settled(self, twin: Twin) -> None:
        """Wait for the twin's first's row."""
        first = self._firsts.get(twin.first)
        if first is not None:
            await first.done.wait()

    def mark(self, generation: Generation) -> None:
        """Keep a first's answer; compare a twin's with it and mark the twin's row."""
        seq = generation.seq
        first = self._firsts.get(seq)
        if first is not None and not first.done.is_set():
            first.text, first.token_ids = generation.text, generation.token_ids
            first.error = generation.error_class
            first.done.set()
            generation.details["twin"] = {"role": "first", "seed": first.seed}
            return
        of = self._twins.pop(seq, None)
        if of is None:
            return
        first = self._firsts.pop(of, None)
        if first is None:
            return
        marks: dict[str, Any] = {"role": "twin", "seed": first.seed, "first": first.request_id}
        generation.details["twin"] = marks
        if first.error is not None or first.text is None:
            marks["first_error"] = first.error or "unanswered"
            return
        if generation.error_class is not None or generation.text is None:
            return
        position, unit = compare(first.text, first.token_ids, generation.text,
                                 generation.token_ids)  # fmt: skip
        marks.update(position=position, unit=unit)
        if position < 0:
            generation.checks.append(JUDGED + TWIN_MISMATCH)
            return
        generation.checks.append(TWIN_MISMATCH)
        where = max(first_divergence(first.text, generation.text), 0)  # where the texts part
        start = max(where - EXCERPT // 2, 0)
        generation.details[TWIN_MISMATCH] = {
            "first": first.request_id, "position": position, "unit": unit, "character": where,
            "first_text": first.text[start : where + EXCERPT],
            "twin_text": generation.text[start : where + EXCERPT],
        }  # fmt: skip


def open_twins(
    settings: TwinSettings, spec: RequestSpec, run: Run, writer: BatchWriter, resumed: bool
) -> Twins | None:
    """The run's twin check (a `load.spec.OpenTwinCheck` once `settings` and `spec` are bound):
    the settings the run stored (a resumed run; one stored without them sends no twins), else
    `settings`, stored in `run.detectors`; None when the run sends no twins."""
    stored = run.detectors.get(TWIN_MISMATCH)
    if isinstance(stored, dict):
        settings = TwinSettings(**stored)
    elif resumed:
        return None
    if settings.fraction <= 0:
        return None
    run.detectors[TWIN_MISMATCH] = settings.describe()
    return Twins(settings, run, writer, spec)
