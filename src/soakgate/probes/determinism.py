"""Determinism probe: greedy generations repeated within and across instances.

This measures the stack's nondeterminism baseline. Cross-instance disagreement is expected on
many stacks (batch-dependent kernels, atomics) and is not by itself a corruption signal.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from soakgate.probes.differential import greedy, outcome_divergence
from soakgate.prompts import Prompt
from soakgate.targets import OpenAIClient, Outcome, RequestSpec, TargetSpec
from soakgate.targets.client import connect, make_session

CAVEAT = (
    "Cross-instance disagreement is expected on many serving stacks (batch-size-dependent "
    "kernels, non-deterministic reductions) and is not by itself a corruption signal; use it "
    "as the baseline against which a differential check is judged."
)


@dataclass(frozen=True, slots=True)
class Agreement:
    """Agreement over pairs of greedy generations of the same prompt."""

    scope: str
    """`within NAME` or `NAME vs OTHER`."""
    pairs: int
    """Pairs compared (pairs with an errored side are not counted)."""
    identical: int
    """Pairs that matched exactly."""
    divergence_positions: tuple[int, ...]
    """First divergence position of each differing pair (tokens if ids, else characters)."""
    errors: int
    """Pairs lost to request errors."""

    @property
    def exact_match_rate(self) -> float:
        """Share of compared pairs that matched exactly (nan when none compared)."""
        return self.identical / self.pairs if self.pairs else float("nan")

    @property
    def median_divergence(self) -> float | None:
        """Median first-divergence position of the differing pairs."""
        positions = self.divergence_positions
        return float(statistics.median(positions)) if positions else None


def agreement(scope: str, pairs: Sequence[tuple[Outcome, Outcome]]) -> Agreement:
    """Summarise pairs of outcomes of the same prompt."""
    compared = [(a, b) for a, b in pairs if a.error_class is None and b.error_class is None]
    positions = [outcome_divergence(a, b) for a, b in compared]
    differing = tuple(p for p in positions if p >= 0)
    return Agreement(
        scope, len(compared), len(compared) - len(differing), differing, len(pairs) - len(compared)
    )


async def probe(
    targets: Sequence[TargetSpec], prompts: Sequence[Prompt], spec: RequestSpec, repeats: int = 2
) -> list[Agreement]:
    """Greedy generations, `repeats` per prompt per target; agreement within and across targets."""
    greedy_spec = greedy(spec)
    async with make_session() as session:
        clients = [await connect(session, t) for t in targets]
        results = {c.target.name: await _collect(c, prompts, greedy_spec, repeats) for c in clients}
    report = [
        agreement(f"within {name}", [(runs[0], other) for runs in by_prompt for other in runs[1:]])
        for name, by_prompt in results.items()
    ]
    for first, second in itertools.combinations(results, 2):
        pairs = list(
            zip((r[0] for r in results[first]), (r[0] for r in results[second]), strict=True)
        )
        report.append(agreement(f"{first} vs {second}", pairs))
    return report


async def _collect(
    client: OpenAIClient, prompts: Sequence[Prompt], spec: RequestSpec, repeats: int
) -> list[list[Outcome]]:
    """Each prompt `repeats` times (the repeats of a prompt concurrently, as under load)."""
    collected = []
    for index, prompt in enumerate(prompts):
        runs = [
            client.generate(prompt, spec, f"determinism-{client.target.name}-{index}-{n}")
            for n in range(repeats)
        ]
        collected.append(list(await asyncio.gather(*runs)))
    return collected
