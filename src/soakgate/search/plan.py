"""What a search will cost and how often it errs, before it starts: the search's own walk
(`search.walk`) driven by simulated blocks, failures independent at the given rates; beside it,
the full factorial (every one of the 2^K configurations judged by the same sequential test, at
the same search-wide error bounds)."""

from __future__ import annotations

import asyncio
import itertools
import math
from dataclasses import dataclass

import numpy as np

from soakgate.search.walk import Probe, Walk, Walked
from soakgate.stats.sprt import FAILS, ProbeDesign, decide, probe_design


@dataclass(frozen=True, slots=True)
class Scenario:
    """A world to simulate: K knobs, the failure needing `needed` of them."""

    knobs: int
    needed: tuple[int, ...]
    failing_rate: float
    baseline_rate: float
    block_requests: int
    """Answered requests per block (every target together)."""
    baseline_every: int = 4
    burst: float = 1.0
    """Mean length of a burst of consecutive failures (1: independent failures); bursts start
    as a Poisson process, their lengths geometric, so a block's count is overdispersed by
    about 2 x burst - 1."""


@dataclass(frozen=True, slots=True)
class Outcomes:
    """Frequencies over simulated searches, each with its Monte Carlo standard error."""

    searches: int
    exact: float
    """Named exactly the needed knobs, confirmed."""
    extra: float
    """Named (and confirmed) a set holding a knob that does not matter."""
    missed: float
    """Named (and confirmed) a set lacking a needed knob."""
    stopped: float
    """Ended without a confirmed answer."""
    requests: float
    """Mean answered requests per search."""
    requests_se: float
    probes: float
    """Mean probes per search (anchors and confirmation included)."""
    warned: float = 0.0
    """Ended with the clustering warning (block counts overdispersed at 1%)."""
    extra_unwarned: float = 0.0
    """Named a knob that does not matter without the warning."""

    def se(self, rate: float) -> float:
        """Monte Carlo standard error of a frequency."""
        return math.sqrt(rate * (1 - rate) / self.searches)


class _Simulated:
    """Blocks drawn as independent Bernoulli failures at the rate the scenario gives a set."""

    def __init__(self, scenario: Scenario, rng: np.random.Generator) -> None:
        self.scenario, self.rng = scenario, rng

    async def block(self, probe: Probe, index: int, repetition: int) -> tuple[int, int]:
        s = self.scenario
        rate = s.failing_rate if set(s.needed) <= set(probe.knobs) else s.baseline_rate
        if s.burst <= 1.0:
            return int(self.rng.binomial(s.block_requests, rate)), s.block_requests
        bursts = int(self.rng.poisson(s.block_requests * rate / s.burst))
        failures = int(self.rng.geometric(1.0 / s.burst, size=bursts).sum())
        return min(failures, s.block_requests), s.block_requests

    def decided(self, probe: Probe) -> None:
        return None


def simulate_search(design: ProbeDesign, scenario: Scenario, searches: int,
                    seed: int = 0) -> Outcomes:  # fmt: skip
    """The search's outcomes over `searches` simulated runs of its own walk."""
    rng = np.random.default_rng(seed)

    async def many() -> list[tuple[tuple[int, ...] | None, int, int, bool]]:
        found = []
        for _ in range(searches):
            walk = Walk(design, scenario.knobs, scenario.baseline_every, _Simulated(scenario, rng))
            walked = await walk.run()
            warned = clustered(walked)
            found.append((walked.named, walked.requests, len(walked.probes), warned))
        return found

    results4 = asyncio.run(many())
    results = [(n, r, p) for n, r, p, _ in results4]
    needed = set(scenario.needed)
    named = [set(n) for n, _, _ in results if n is not None]
    requests = np.array([r for _, r, _ in results], dtype=float)
    return Outcomes(
        searches, sum(n == needed for n in named) / searches,
        sum(bool(n - needed) for n in named) / searches,
        sum(bool(needed - n) for n in named) / searches,
        sum(n is None for n, _, _ in results) / searches,
        float(requests.mean()), float(requests.std(ddof=1) / math.sqrt(searches)),
        float(np.mean([p for _, _, p in results])),
        sum(w for *_, w in results4) / searches,
        sum(n is not None and bool(set(n) - needed) and not w for n, _, _, w in results4)
        / searches,
    )  # fmt: skip


CLUSTER_LEVEL = 0.01
"""Level of the dispersion test that warns that failures cluster beyond the design effect."""


def clustered(walked: Walked) -> bool:
    """True when the walk's block counts vary more than its design effect allows (at 1%)."""
    return walked.dispersion is not None and walked.dispersion.p_value < CLUSTER_LEVEL


def simulate_factorial(
    scenario: Scenario, false_knob: float, missed_knob: float, reproduce: float,
    design_effect: float, searches: int, seed: int = 0,
) -> tuple[float, float, float]:  # fmt: skip
    """Mean requests of the full factorial (its standard error) and how often it names the
    needed set exactly: every configuration judged by the same test, the error bounds shared
    over the 2^K of them."""
    cells = 2**scenario.knobs
    design = probe_design(scenario.baseline_rate, scenario.failing_rate, missed_knob / cells,
                          false_knob / cells, reproduce, design_effect)  # fmt: skip
    rng = np.random.default_rng(seed)
    needed = set(scenario.needed)
    totals, exact = [], 0
    for _ in range(searches):
        total, failing = 0, []
        for size in range(scenario.knobs + 1):
            for cell in itertools.combinations(range(scenario.knobs), size):
                rate = scenario.failing_rate if needed <= set(cell) else scenario.baseline_rate
                fails, used = _probe(design, rate, scenario.block_requests, rng)
                total += used
                if fails:
                    failing.append(set(cell))
        minimal = [c for c in failing if not any(o < c for o in failing)]
        exact += minimal == [needed]
        totals.append(total)
    values = np.array(totals, dtype=float)
    return float(values.mean()), float(values.std(ddof=1) / math.sqrt(searches)), exact / searches


def _probe(design: ProbeDesign, rate: float, block: int,
           rng: np.random.Generator) -> tuple[bool, int]:  # fmt: skip
    failures = answered = 0
    while True:
        failures += int(rng.binomial(block, rate))
        answered += block
        decision = decide(design, failures, answered)
        if decision.outcome is not None:
            return decision.outcome == FAILS, answered
