"""The analysis model: a database read into per-(label, target) units and per-label aggregates.

The unit of analysis is one target (one GPU's server) under one label; several runs of the
same label on the same target are replicates of that unit. A label's aggregate over several
targets is shown too, but marked as such: comparing it with one target is a unit mismatch.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from soakgate.records import Event, Generation, Run
from soakgate.stats.clustering import ClusteringResult
from soakgate.stats.rates import RateSummary, summarize_rate
from soakgate.store.base import LedgerEntry, Store

if TYPE_CHECKING:
    from soakgate.report.probes import Probes

BoolArray = npt.NDArray[np.bool_]
AGGREGATE = "(all targets)"  # target name shown for a label's aggregate row


@dataclass(frozen=True, slots=True)
class ClusteringOptions:
    """How hard the per-target (descriptive) clustering tests work; the HMM is off by default
    (its bootstrap would dominate the cost)."""

    alpha: float = 0.05
    """Family-wise level of the clustering verdict."""
    window: int = 500
    """Requests per window of the dispersion test and the design effect."""
    gap_permutations: int = 199
    """Permutations of the gap test's null (0 skips it)."""
    hmm_replicates: int = 0
    """Parametric-bootstrap replicates of the HMM test (0 skips it; at least 60 to count)."""
    seed: int = 0
    """Seed of the permutation and bootstrap draws (clustering tests and the verdict's check)."""


@dataclass(slots=True)
class RunSlice:
    """One run's generations on one target: the replicate of a unit."""

    run_id: str
    """The run."""
    started_at: float
    """Start of the first request of this slice."""
    ended_at: float
    """End of the last request of this slice."""
    n: int
    """Clean (scored) generations."""
    collapses: int
    """Clean generations some detector flagged."""
    requests: int
    """All generations, errors included."""


@dataclass(slots=True)
class Unit:
    """Figures of one (label, target) unit, or of a label's aggregate when `aggregate`."""

    label: str
    """Configuration label."""
    target: str
    """Target name, or AGGREGATE for a label's aggregate."""
    aggregate: bool
    """True for a per-label aggregate over several targets (not a unit of analysis)."""
    targets: tuple[str, ...]
    """Targets covered (one for a unit)."""
    run_ids: tuple[str, ...]
    """Runs contributing."""
    requests: int
    """All generations, errors included."""
    rate: RateSummary | None
    """Collapses / clean generations with its exact CI (None without clean generations)."""
    errors_by_class: dict[str, int]
    """Failed requests by error class."""
    duration_s: float
    """Wall-clock seconds under load: union of each run's first-start-to-last-end span."""
    tokens: int
    """Completion tokens of clean generations."""
    clean_tokens: int
    """Completion tokens of clean generations no detector flagged."""
    slices: list[RunSlice] = field(default_factory=list)
    """Per-run replicates (per run and target for an aggregate)."""
    sequence: BoolArray | None = None
    """Time-ordered collapse indicator over clean generations (targets concatenated)."""
    clustering: ClusteringResult | None = None
    """Clustering verdict (units only; None for aggregates or without clean generations)."""

    @property
    def n(self) -> int:
        """Clean (scored) generations: the rate's denominator."""
        return self.rate.n if self.rate else 0

    @property
    def collapses(self) -> int:
        """Clean generations some detector flagged."""
        return self.rate.events if self.rate else 0

    @property
    def errors(self) -> int:
        """Failed requests of any class."""
        return sum(self.errors_by_class.values())

    @property
    def tok_s(self) -> float:
        """Completion tokens per second of load (clean generations)."""
        return self.tokens / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def clean_tok_s(self) -> float:
        """Tokens per second of generations that were neither errors nor collapses."""
        return self.clean_tokens / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def name(self) -> str:
        """`label@target`, or `label` for an aggregate."""
        return self.label if self.aggregate else f"{self.label}@{self.target}"


@dataclass(slots=True)
class Analysis:
    """Everything the report shows, computed once from a store."""

    units: list[Unit]
    """Per-(label, target) units, then their labels' aggregates, ordered by label."""
    runs: list[Run]
    """Every run, oldest first."""
    events: list[Event]
    """Every event, in time order."""
    ledger: list[LedgerEntry]
    """The plan ledger."""
    generations: dict[tuple[str, str], list[Generation]]
    """Generations per (label, target) in time order, for figures and exemplars."""
    warnings: list[str] = field(default_factory=list)
    """Methodology warnings, one line each."""
    probes: Probes | None = None
    """Differential check, sweeps, speculative-decoding watch and sequential looks."""

    def unit(self, label: str, target: str | None = None) -> Unit | None:
        """The unit `label@target`, or the label's aggregate (or its only unit) without target."""
        for unit in self.units:
            if unit.label == label and target is not None and unit.target == target:
                return unit
        if target is not None:
            return None
        mine = [u for u in self.units if u.label == label and not u.aggregate]
        if len(mine) == 1:
            return mine[0]
        return next((u for u in self.units if u.label == label and u.aggregate), None)

    @property
    def labels(self) -> list[str]:
        """Labels in order of first appearance."""
        return list(dict.fromkeys(u.label for u in self.units))


def _slice(run_id: str, rows: list[Generation]) -> RunSlice:
    clean = [g for g in rows if g.ok]
    return RunSlice(
        run_id=run_id,
        started_at=min(g.started_at for g in rows),
        ended_at=max(g.ended_at for g in rows),
        n=len(clean),
        collapses=sum(g.collapsed for g in clean),
        requests=len(rows),
    )


def _wall_clock(rows: list[Generation]) -> float:
    """Seconds covered by the runs' spans (first start to last end), overlaps counted once."""
    spans: dict[tuple[str, str], tuple[float, float]] = {}
    for g in rows:
        key = (g.run_id, g.target)
        low, high = spans.get(key, (g.started_at, g.ended_at))
        spans[key] = (min(low, g.started_at), max(high, g.ended_at))
    total, reach = 0.0, -math.inf
    for low, high in sorted(spans.values()):
        total += max(0.0, high - max(low, reach))
        reach = max(reach, high)
    return total


def build_unit(
    label: str, target: str, rows_by_run: dict[str, list[Generation]], aggregate: bool = False
) -> Unit:
    """Tally one unit (or aggregate) from its generations grouped by run, each in seq order."""
    slices = [_slice(run_id, rows) for run_id, rows in rows_by_run.items() if rows]
    everything = [g for rows in rows_by_run.values() for g in rows]
    clean = [g for g in everything if g.ok]
    collapses = sum(g.collapsed for g in clean)
    return Unit(
        label=label,
        target=target,
        aggregate=aggregate,
        targets=tuple(sorted({g.target for g in everything})),
        run_ids=tuple(dict.fromkeys(g.run_id for g in everything)),
        requests=len(everything),
        rate=summarize_rate(collapses, len(clean)) if clean else None,
        errors_by_class=dict(Counter(g.error_class for g in everything if g.error_class)),
        duration_s=_wall_clock(everything),
        tokens=sum(g.completion_tokens or 0 for g in clean),
        clean_tokens=sum(g.completion_tokens or 0 for g in clean if not g.collapsed),
        slices=slices,
        sequence=np.array([g.collapsed for g in clean], dtype=bool) if clean else None,
    )


def _cluster(unit: Unit, options: ClusteringOptions) -> ClusteringResult | None:
    from soakgate.stats.clustering import clustering_verdict

    if unit.sequence is None or len(unit.sequence) < 2:
        return None
    return clustering_verdict(
        unit.sequence, options.alpha, options.window, options.gap_permutations,
        options.hmm_replicates, options.seed,
    )  # fmt: skip


def group_generations(
    runs: list[Run], generations: Iterable[Generation]
) -> dict[tuple[str, str], dict[str, list[Generation]]]:
    """(label, target) -> run id -> generations, runs oldest first, each in seq order."""
    order = {run.run_id: i for i, run in enumerate(runs)}
    grouped: dict[tuple[str, str], dict[str, list[Generation]]] = {}
    rows = sorted(generations, key=lambda g: (order.get(g.run_id, len(order)), g.run_id, g.seq))
    for g in rows:
        grouped.setdefault((g.label, g.target), {}).setdefault(g.run_id, []).append(g)
    return grouped


def analyze(
    store: Store, options: ClusteringOptions | None = None, clustering: bool = True
) -> Analysis:
    """Read a store into units, aggregates, clustering verdicts and methodology warnings."""
    from soakgate.report.checks import methodology_warnings
    from soakgate.report.probes import find_probes
    from soakgate.report.replays import probe_run_ids

    options = options or ClusteringOptions()
    runs = store.runs()
    probe_runs = probe_run_ids(runs)  # `soakgate replay`'s runs are a probe, not units
    rows = store.generations()
    grouped = group_generations(runs, (g for g in rows if g.run_id not in probe_runs))
    units: list[Unit] = []
    for label in dict.fromkeys(label for label, _ in grouped):
        mine = sorted((key, rows) for key, rows in grouped.items() if key[0] == label)
        for (_, target), rows_by_run in mine:
            unit = build_unit(label, target, rows_by_run)
            if clustering:
                unit.clustering = _cluster(unit, options)
            units.append(unit)
        if len(mine) > 1:
            per_slice = {
                f"{run_id}/{t}": rows for (_, t), by in mine for run_id, rows in by.items()
            }
            units.append(build_unit(label, AGGREGATE, per_slice, aggregate=True))
    flat = {key: [g for rows in by.values() for g in rows] for key, by in grouped.items()}
    analysis = Analysis(units, runs, store.events(), store.ledger(), flat)
    analysis.warnings = methodology_warnings(analysis)
    analysis.probes = find_probes(analysis)
    return analysis
