"""The search's walk over probes, apart from how a block is soaked: one definition for the soak
(`search.runner`: campaign blocks on real servers) and for the simulations that print its cost
and error rates (`search.plan`), so the figures printed are those of the search that runs.

Order of blocks: the clean and the failing configuration alternate until each is decided (the
search needs a clean baseline and a failure to explain); then each probe the adaptive group
test (`search.algorithm`) asks for runs block by block until its sequential test decides, with a
block of the clean configuration after every `baseline_every` probe blocks (should the baseline
ever reach the failing bound, drift or a wrong baseline makes every decision suspect, and the
walk stops); then the named set is confirmed on fresh blocks. The path is a function of the
counts alone, so a resumed search walks it again, reading finished blocks back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from soakgate.search.algorithm import minimal_knobs
from soakgate.stats.sprt import (
    CLEAN,
    FAILS,
    Dispersion,
    ProbeDecision,
    ProbeDesign,
    block_dispersion,
    decide,
)


@dataclass(slots=True)
class Probe:
    """One configuration the search soaks until its test decides."""

    index: int
    """Order of the probe in the search, from 0."""
    role: str
    """`baseline`, `failing`, `probe` or `confirm`."""
    knobs: tuple[int, ...]
    """Indexes of the knobs set to their failing values."""
    label: str
    depth: int = 0
    """Depth in the group test's tree (its recursion), for showing it as a tree."""
    failures: int = 0
    answered: int = 0
    blocks: list[str] = field(default_factory=list)
    """Block ids, in order (the soaker keeps them)."""
    counts: list[tuple[int, int]] = field(default_factory=list)
    """(failures, answered) of each block, in order."""
    decision: ProbeDecision | None = None

    @property
    def outcome(self) -> str | None:
        """`fails`, `clean`, or None while undecided."""
        return None if self.decision is None else self.decision.outcome


@dataclass(slots=True)
class Walked:
    """What a walk found (or why it stopped)."""

    probes: list[Probe] = field(default_factory=list)
    named: tuple[int, ...] | None = None
    """The knobs the failure needs, once named and confirmed."""
    stopped: str | None = None
    """Why the walk ended without a confirmed answer (None when it has one)."""
    interrupted: bool = False
    dispersion: Dispersion | None = None
    """Pearson's test of the block counts against the design effect the walk assumed."""

    @property
    def baseline(self) -> Probe:
        """The clean configuration's probe (anchor and interleaved blocks)."""
        return next(p for p in self.probes if p.role == "baseline")

    @property
    def requests(self) -> int:
        """Answered requests over every block of the walk."""
        return sum(p.answered for p in self.probes)


class Soaker(Protocol):
    """Soaks (or reads back, or simulates) one block of a probe."""

    async def block(self, probe: Probe, index: int, repetition: int) -> tuple[int, int]:
        """(failures, answered) of the probe's next block: the walk's `index`-th block and the
        probe label's `repetition`-th. Raises `Stopped` to end the walk."""
        ...

    def decided(self, probe: Probe) -> None:
        """Told once a probe is decided."""
        ...


class Stopped(Exception):
    """Ends a walk: why, and whether it was interrupted (resumable) rather than inconclusive."""

    def __init__(self, reason: str, interrupted: bool = False) -> None:
        super().__init__(reason)
        self.interrupted = interrupted


class Walk:
    """One search: a design, the number of knobs, the block source."""

    def __init__(self, design: ProbeDesign, knobs: int, baseline_every: int, soaker: Soaker,
                 labels: tuple[str, str] = ("clean", "failing")) -> None:  # fmt: skip
        self.design, self.knobs, self.baseline_every = design, knobs, baseline_every
        self.soaker, self.labels = soaker, labels
        self.walked = Walked()
        self._repetitions: dict[str, int] = {}
        self._since_baseline = 0

    async def run(self) -> Walked:
        """Walk to a confirmed answer or a stop; never raises `Stopped`."""
        try:
            self.walked.named = await self._walk()
        except Stopped as stopped:
            self.walked.stopped = str(stopped)
            self.walked.interrupted = stopped.interrupted
        self.walked.dispersion = block_dispersion(self._by_outcome(), self.design.design_effect)
        return self.walked

    def _by_outcome(self) -> list[list[tuple[int, int]]]:
        """Every block of the probes decided `fails`, and of those decided `clean`: under the
        search's model each group fails at one rate, so their dispersion tests that model."""
        groups: dict[str, list[tuple[int, int]]] = {FAILS: [], CLEAN: []}
        for probe in self.walked.probes:
            if probe.outcome is not None:
                groups[probe.outcome] += probe.counts
        return list(groups.values())

    async def _walk(self) -> tuple[int, ...]:
        baseline = self._probe("baseline", ())
        failing = self._probe("failing", tuple(range(self.knobs)))
        while baseline.outcome is None or failing.outcome is None:  # alternate until decided
            for probe in (baseline, failing):
                if probe.outcome is None:
                    await self._block(probe)
        if baseline.outcome == FAILS:
            raise Stopped(f"the clean configuration {self.labels[0]!r} fails: no baseline")
        if failing.outcome == CLEAN:
            raise Stopped(f"the failing configuration {self.labels[1]!r} did not fail at the "
                          "rate given: nothing to explain")  # fmt: skip
        named = await self._group_test()
        confirm = self._probe("confirm", named)
        await self._decide(confirm)
        if confirm.outcome != FAILS:
            raise Stopped("the named knobs did not reproduce the failure on fresh blocks: a "
                          "probe was decided wrongly, or the rate drifted")  # fmt: skip
        return named

    async def _group_test(self) -> tuple[int, ...]:
        decided: dict[frozenset[int], bool] = {}
        steps = minimal_knobs(self.knobs)
        try:
            subset, depth = next(steps)
            while True:
                if subset not in decided:
                    probe = self._probe("probe", tuple(sorted(subset)), depth)
                    await self._decide(probe)
                    decided[subset] = probe.outcome == FAILS
                subset, depth = steps.send(decided[subset])
        except StopIteration as done:
            return tuple(done.value)

    def _probe(self, role: str, knobs: tuple[int, ...], depth: int = 0) -> Probe:
        label = {"baseline": self.labels[0], "failing": self.labels[1]}.get(role)
        if label is None:
            names = "+".join(f"k{i}" for i in knobs) or "none"
            label = f"{'confirm' if role == 'confirm' else 'knobs'}-{names}"
        probe = Probe(len(self.walked.probes), role, knobs, label, depth)
        self.walked.probes.append(probe)
        return probe

    async def _decide(self, probe: Probe) -> None:
        """Soak `probe` block by block until it is decided, the baseline checked between."""
        while probe.outcome is None:
            await self._block(probe)
            self._since_baseline += 1
            if self._since_baseline >= self.baseline_every:
                self._since_baseline = 0
                baseline = self.walked.baseline
                await self._block(baseline, judge=False)
                if self.design.evidence(baseline.failures, baseline.answered) >= self.design.upper:
                    raise Stopped("the clean configuration now fails (drift?): the search's "
                                  "decisions cannot be trusted")  # fmt: skip

    async def _block(self, probe: Probe, judge: bool = True) -> None:
        """The probe's next block: its counts added, and its test applied."""
        repetition = self._repetitions.get(probe.label, 0)
        self._repetitions[probe.label] = repetition + 1
        index = sum(self._repetitions.values()) - 1
        failures, answered = await self.soaker.block(probe, index, repetition)
        probe.failures += failures
        probe.answered += answered
        probe.counts.append((failures, answered))
        if judge:
            probe.decision = decide(self.design, probe.failures, probe.answered)
            if probe.outcome is not None:
                self.soaker.decided(probe)
