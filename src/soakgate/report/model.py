"""The analysis model: per-(label, target) units and per-label aggregates, tallied from columns.

The unit of analysis is one target (one GPU's server) under one label; several runs of the
same label on the same target are replicates of that unit. A label's aggregate over several
targets is shown too, but marked as such: comparing it with one target is a unit mismatch.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from soakgate.records import Event, Run
from soakgate.report.load import Columns, GatewayTally, SliceColumns
from soakgate.stats.clustering import ClusteringResult
from soakgate.stats.rates import RateSummary, summarize_rate
from soakgate.store.base import LedgerEntry

if TYPE_CHECKING:
    from soakgate.report.outcomes import UnitOutcomes
    from soakgate.report.probes import Probes

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
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
    """Answered generations some detector flagged."""
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
    """Collapses / answered generations with its exact CI (None without answered generations)."""
    errors_by_class: dict[str, int]
    """Failed requests by error class."""
    duration_s: float
    """Wall-clock seconds under load: union of each run's first-start-to-last-end span."""
    tokens: int
    """Completion tokens of answered generations."""
    clean_tokens: int
    """Completion tokens of answered generations no detector flagged."""
    slices: list[RunSlice] = field(default_factory=list)
    """Per-run replicates (per run and target for an aggregate)."""
    sequence: BoolArray | None = None
    """Time-ordered collapse indicator over answered generations (targets concatenated)."""
    stored_order: IntArray | None = None
    """Positions into `sequence` in the order its rows were stored (answers' arrival, in which a
    soak's sequential monitor judged them); None when that is `sequence`'s own order."""
    times: FloatArray | None = None
    """When each of `sequence`'s generations ended (one run of one target only): a unit soaked
    side by side with another can be compared window by window (stats/paired.py)."""
    clustering: ClusteringResult | None = None
    """Clustering verdict (units only; None for aggregates or without answered generations)."""
    gateway: GatewayTally | None = None
    """Rows a gateway between soakgate and the server retried upstream (None: none did)."""

    @property
    def n(self) -> int:
        """Clean (scored) generations: the rate's denominator."""
        return self.rate.n if self.rate else 0

    @property
    def stored_sequence(self) -> BoolArray | None:
        """`sequence` in stored order: what a sequential plan's looks judged during the soak."""
        if self.sequence is None or self.stored_order is None:
            return self.sequence
        ordered: BoolArray = self.sequence[self.stored_order]
        return ordered

    @property
    def collapses(self) -> int:
        """Answered generations some detector flagged."""
        return self.rate.events if self.rate else 0

    @property
    def errors(self) -> int:
        """Failed requests of any class."""
        return sum(self.errors_by_class.values())

    @property
    def tok_s(self) -> float:
        """Completion tokens per second of load (answered generations)."""
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
    """Every figure the report shows except the comparisons, computed once from columns."""

    units: list[Unit]
    """Per-(label, target) units, then their labels' aggregates, ordered by label."""
    columns: Columns
    """What was read: runs, events, ledger, per-unit columns and the exemplar rows."""
    warnings: list[str] = field(default_factory=list)
    """Methodology warnings, one line each."""
    probes: Probes | None = None
    """Differential check, sweeps, speculative-decoding watch and sequential looks."""
    outcomes_cache: list[UnitOutcomes] | None = None
    """Every unit's failure outcomes, once computed (`report.outcomes.analysis_outcomes`)."""

    @property
    def runs(self) -> list[Run]:
        """Every run, oldest first."""
        return self.columns.runs

    @property
    def events(self) -> list[Event]:
        """Every event, in time order."""
        return self.columns.events

    @property
    def ledger(self) -> list[LedgerEntry]:
        """The plan ledger."""
        return self.columns.ledger

    def slices(self, label: str, target: str) -> list[SliceColumns]:
        """The slices of (label, target), runs oldest first."""
        return self.columns.slices.get((label, target), [])

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


def _slice(run_id: str, part: SliceColumns) -> RunSlice:
    return RunSlice(
        run_id=run_id, started_at=float(part.started.min()), ended_at=float(part.ended.max()),
        n=int(part.ok.sum()), collapses=int(part.collapsed.sum()), requests=part.requests,
    )  # fmt: skip


def _wall_clock(parts: Sequence[SliceColumns]) -> float:
    """Seconds covered by the runs' spans (first start to last end), overlaps counted once."""
    spans: dict[tuple[str, str], tuple[float, float]] = {}
    for part in parts:
        key = (part.run_id, part.target)
        low, high = float(part.started.min()), float(part.ended.max())
        if key in spans:
            low, high = min(spans[key][0], low), max(spans[key][1], high)
        spans[key] = (low, high)
    total, reach = 0.0, -math.inf
    for low, high in sorted(spans.values()):
        total += max(0.0, high - max(low, reach))
        reach = max(reach, high)
    return total


def build_unit(
    label: str, target: str, parts: Sequence[tuple[str, SliceColumns]], aggregate: bool = False
) -> Unit:
    """Tally one unit (or aggregate) from its slices, each named (the run id, or `run/target`
    in an aggregate) and in order."""
    slices = [_slice(name, part) for name, part in parts if part.requests]
    columns = [part for _, part in parts]
    clean = sum(int(p.ok.sum()) for p in columns)
    collapses = sum(int(p.collapsed.sum()) for p in columns)
    errors: Counter[str] = Counter()
    for part in columns:
        errors.update(part.errors_by_class)
    tokens = sum(int(p.tokens[p.ok].sum()) for p in columns)
    clean_tokens = sum(int(p.tokens[p.ok & ~p.collapsed].sum()) for p in columns)
    return Unit(
        label=label,
        target=target,
        aggregate=aggregate,
        targets=tuple(sorted({p.target for p in columns})),
        run_ids=tuple(dict.fromkeys(p.run_id for p in columns)),
        requests=sum(p.requests for p in columns),
        rate=summarize_rate(collapses, clean) if clean else None,
        errors_by_class=dict(errors),
        duration_s=_wall_clock(columns),
        tokens=tokens,
        clean_tokens=clean_tokens,
        slices=slices,
        sequence=np.concatenate([p.clean_sequence for p in columns]) if clean else None,
        stored_order=_stored_order(columns) if clean else None,
        times=columns[0].ended[columns[0].ok] if clean and len(columns) == 1 else None,
    )


def _stored_order(columns: Sequence[SliceColumns]) -> IntArray | None:
    """`Unit.stored_order` from its slices' (each slice's rows after the slices before it)."""
    if all(p.stored_order is None for p in columns):
        return None
    parts, offset = [], 0
    for part in columns:
        count = int(part.ok.sum())
        order = np.arange(count) if part.stored_order is None else part.stored_order
        parts.append(order.astype(np.int64) + offset)
        offset += count
    return np.concatenate(parts)


def cluster(unit: Unit, options: ClusteringOptions) -> ClusteringResult | None:
    """The unit's descriptive clustering verdict (None without two answered generations)."""
    from soakgate.stats.clustering import clustering_verdict

    if unit.sequence is None or len(unit.sequence) < 2:
        return None
    return clustering_verdict(
        unit.sequence, options.alpha, options.window, options.gap_permutations,
        options.hmm_replicates, options.seed,
    )  # fmt: skip


def build_units(
    columns: Columns, options: ClusteringOptions, clustering: bool = True
) -> list[Unit]:
    """Per label: its units (targets in order), then its aggregate when it has several."""
    units: list[Unit] = []
    for label in dict.fromkeys(label for label, _ in columns.slices):
        mine = sorted((key, group) for key, group in columns.slices.items() if key[0] == label)
        for (_, target), group in mine:
            unit = build_unit(label, target, [(s.run_id, s) for s in group])
            if clustering:
                unit.clustering = cluster(unit, options)
            unit.gateway = columns.gateway.get((label, target))
            units.append(unit)
        if len(mine) > 1:
            parts = [(f"{s.run_id}/{t}", s) for (_, t), group in mine for s in group]
            aggregate = build_unit(label, AGGREGATE, parts, aggregate=True)
            tallies = [g for (_, t), _ in mine if (g := columns.gateway.get((label, t)))]
            if tallies:
                aggregate.gateway = GatewayTally(*(sum(x) for x in zip(
                    *((g.rows, g.clean, g.retries) for g in tallies), strict=True)))  # fmt: skip
            units.append(aggregate)
    return units
