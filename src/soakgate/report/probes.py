"""What the probes stored, read for the report: differential check, sweeps, spec-decode, looks.

Everything here is computed from the columns and events the analysis already holds; nothing
re-reads the database. A differential verdict is only a finding when the reference repeated
itself in the baseline measured before the soak; otherwise it is shown as uninformative.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from soakgate.probes.sweep import (
    SweepLevel,
    acceptance_collapses,
    saturation_point,
    summarise_level_columns,
)
from soakgate.records import Event
from soakgate.report.formatting import percent
from soakgate.report.load import SliceColumns
from soakgate.report.model import Analysis, BoolArray, Unit
from soakgate.report.outcomes import Divergence, divergence_of
from soakgate.report.reference import ReferenceUnit, reference_units
from soakgate.report.replays import ReplayVerdict, replay_verdicts
from soakgate.report.searches import SearchWalk, search_walks
from soakgate.stats.outcomes import divergence_direction, divergence_verdict, divergence_words
from soakgate.stats.rates import RateSummary, summarize_rate
from soakgate.stats.verdict import Verdict

SATURATION_GAIN = 0.10  # the sweep command's default --min-gain; the threshold is not stored


@dataclass(frozen=True, slots=True)
class ReferenceBaseline:
    """The references' own nondeterminism, summed over the runs a unit draws on."""

    pairs: int
    """Greedy comparisons of the reference with itself (or a second reference)."""
    divergent: int
    """How many of them differed."""
    errors: int
    """Comparisons lost to request errors."""
    informative: bool
    """Every run's baseline was informative (pairs > 0 and no divergence)."""
    runs_without: int = 0
    """Runs with compared rows but no recorded baseline (they make the verdict uninformative)."""

    def describe(self) -> str:
        """`reference baseline: k/n pairs diverged`, with lost pairs and unmeasured runs."""
        text = f"reference baseline: {self.divergent}/{self.pairs} pairs diverged"
        text += f", {self.errors} lost to errors" if self.errors else ""
        return text + (f", {self.runs_without} run(s) unmeasured" if self.runs_without else "")


@dataclass(slots=True)
class DifferentialUnit:
    """Differential-check figures of one unit (or aggregate): greedy rows against the reference,
    judged against the reference's own nondeterminism."""

    name: str
    """`label@target`, or the label for an aggregate."""
    aggregate: bool
    """True for a label's aggregate over targets."""
    compared: int
    """Greedy rows compared with the reference."""
    divergent: int
    """Compared rows whose tokens (or text) differed."""
    rate: RateSummary | None
    """divergent / compared with its exact CI (None when nothing was compared)."""
    median_position: float | None
    """Median first diverging position over divergent rows."""
    baseline: ReferenceBaseline | None
    """The reference baseline of the runs involved (None when none was recorded)."""
    sequence: BoolArray | None = field(default=None, repr=False)
    """Time-ordered divergence flags of the compared rows (for cluster-robust comparisons)."""
    divergence: Divergence | None = field(default=None, repr=False)
    """The compared rows' positions and the reference's own (report/outcomes.py)."""

    @property
    def informative(self) -> bool:
        """Whether the reference's own nondeterminism was measured, so that the divergence can
        be judged against it."""
        return self.divergence is not None and len(self.divergence.own) > 0

    @property
    def judged(self) -> Verdict | None:
        """The compared rows' first divergences against the reference's own (rank test)."""
        if not self.informative or self.divergence is None:
            return None
        d = self.divergence
        return divergence_verdict(d.own, d.positions, what=d.unit_word)

    @property
    def verdict(self) -> str:
        """One line: the finding, or why there is none."""
        if self.compared == 0 or self.rate is None or self.divergence is None:
            return "no greedy rows compared"
        judged, d = self.judged, self.divergence
        if judged is None:
            return "uninformative: the reference's own nondeterminism was not measured"
        own = f"the reference against itself ({divergence_words(d.own, d.unit_word)})"
        mine = divergence_words(d.positions, d.unit_word)
        test = f"Mann-Whitney p={judged.p_value:.3g}"
        if judged.differ and divergence_direction(d.own, d.positions) > 0:
            return f"DIVERGES from the reference: {mine}, more or earlier than {own}; {test}"
        if not self.divergent:
            bound = percent(self.rate.upper_bound_one_sided)
            return f"no divergence in {self.compared} compared (rate ≤ {bound} one-sided 95%)"
        return f"no more divergence than {own}: {mine}; {test}"


@dataclass(slots=True)
class Sweep:
    """One `soakgate sweep`: its levels in increasing concurrency and what they show."""

    sweep_id: str
    """The id shared by the sweep's runs."""
    label: str
    """Label of the sweep's runs."""
    targets: tuple[str, ...]
    """Targets swept."""
    levels: list[SweepLevel]
    """One summary per level (one run each), lowest concurrency first."""
    min_gain: float = SATURATION_GAIN
    """Throughput gain below which the sweep counts as saturated."""

    @property
    def saturation(self) -> int | None:
        """The level past which throughput rises by less than `min_gain` (None: not reached)."""
        return saturation_point(self.levels, self.min_gain)

    @property
    def acceptance_collapses(self) -> list[int]:
        """Levels where speculative acceptance fell below half the best lower level's."""
        return acceptance_collapses(self.levels)


@dataclass(frozen=True, slots=True)
class SpecCollapse:
    """A `spec_decode_collapse` event: acceptance or throughput fell and stayed down."""

    run_id: str
    label: str
    target: str
    at: float
    """Start of the window that confirmed the collapse."""
    reason: str
    """The watch's reason, e.g. `acceptance 10% < 50% of best 39%`."""

    def line(self) -> str:
        """One line naming the run and unit."""
        return (
            f"run {self.run_id} ({self.label}@{self.target}): speculative decoding collapsed: "
            f"{self.reason}"
        )


@dataclass(slots=True)
class SpecSeries:
    """The speculative-decoding watch of one target in one run."""

    run_id: str
    label: str
    target: str
    points: list[tuple[float, float | None, float]] = field(default_factory=list)
    """(window start, acceptance or None, tokens/s) per scrape window, in time order."""
    collapses: list[SpecCollapse] = field(default_factory=list)
    """Collapse episodes flagged by the watch."""

    @property
    def accepted(self) -> list[float]:
        """Acceptance of the windows where something was drafted."""
        return [a for _, a, _ in self.points if a is not None]


@dataclass(frozen=True, slots=True)
class Look:
    """One interim look of a sequential plan, as the soak recorded it."""

    run_id: str
    at: float
    look: int
    fraction: float
    n_per_arm: int
    events: tuple[int, ...]
    verdict: str
    test: str
    p_value: float | None
    reason: str


@dataclass(slots=True)
class Probes:
    """All probe findings of a database."""

    differential: list[DifferentialUnit] = field(default_factory=list)
    sweeps: list[Sweep] = field(default_factory=list)
    spec: list[SpecSeries] = field(default_factory=list)
    looks: list[Look] = field(default_factory=list)
    spec_absent: list[str] = field(default_factory=list)
    """`label@target` of targets whose /metrics had no speculative-decoding counters."""
    replays: list[ReplayVerdict] = field(default_factory=list)
    """`soakgate replay`'s verdicts (report/replays.py)."""
    reference: list[ReferenceUnit] = field(default_factory=list)
    """Reference scoring per unit (report/reference.py)."""
    searches: list[SearchWalk] = field(default_factory=list)
    """`soakgate search`'s walks (report/searches.py)."""

    @property
    def spec_collapses(self) -> list[SpecCollapse]:
        """Every collapse, in time order."""
        return sorted((c for s in self.spec for c in s.collapses), key=lambda c: c.at)


def _baseline(events: Sequence[Event], run_ids: set[str]) -> ReferenceBaseline | None:
    mine = [e.data for e in events if e.kind == "reference_baseline" and e.run_id in run_ids]
    if not mine:
        return None
    pairs = sum(int(d.get("pairs", 0)) for d in mine)
    divergent = sum(int(d.get("divergent", 0)) for d in mine)
    errors = sum(int(d.get("errors", 0)) for d in mine)
    each = [bool(d.get("informative", d.get("pairs", 0) and not d.get("divergent"))) for d in mine]
    measured = {e.run_id for e in events if e.kind == "reference_baseline"}
    missing = len(run_ids - measured)
    return ReferenceBaseline(pairs, divergent, errors, all(each) and not missing, missing)


def differential_unit(analysis: Analysis, unit: Unit) -> DifferentialUnit | None:
    """The unit's differential figures, or None when no row of it was sent greedy to a reference."""
    parts = [s for t in unit.targets for s in analysis.slices(unit.label, t)]
    if not any(len(s.compared) or s.greedy for s in parts):
        return None
    found = divergence_of(analysis, parts)
    divergence = found.positions if found is not None else np.zeros(0, np.int64)
    flags = divergence >= 0
    compared = len(divergence)
    runs = {s.run_id for s in parts if len(s.compared)} or {s.run_id for s in parts if s.greedy}
    return DifferentialUnit(
        name=unit.name, aggregate=unit.aggregate, compared=compared,
        divergent=int(flags.sum()),
        rate=summarize_rate(int(flags.sum()), compared) if compared else None,
        median_position=float(np.median(divergence[flags])) if flags.any() else None,
        baseline=_baseline(analysis.events, runs), sequence=flags, divergence=found,
    )  # fmt: skip


def _sweeps(analysis: Analysis, parts_by_run: dict[str, list[SliceColumns]]) -> list[Sweep]:
    grouped: dict[str, list[tuple[int, str]]] = {}
    labels: dict[str, str] = {}
    targets: dict[str, set[str]] = {}
    gains: dict[str, float] = {}
    for run in analysis.runs:
        sweep, level = run.load.get("sweep"), run.load.get("concurrency")
        if not isinstance(sweep, dict) or "id" not in sweep or not isinstance(level, int):
            continue
        grouped.setdefault(str(sweep["id"]), []).append((level, run.run_id))
        labels.setdefault(str(sweep["id"]), run.label)
        gains.setdefault(str(sweep["id"]), float(sweep.get("min_gain", SATURATION_GAIN)))
        targets.setdefault(str(sweep["id"]), set()).update(run.targets)
    events: dict[str, list[Event]] = {}
    for e in analysis.events:
        events.setdefault(e.run_id, []).append(e)
    found = []
    for sweep_id, members in grouped.items():
        levels = [
            _level(level, run_id, parts_by_run.get(run_id, []), events.get(run_id, []))
            for level, run_id in sorted(members)
        ]
        where = tuple(sorted(targets[sweep_id]))
        found.append(Sweep(sweep_id, labels[sweep_id], where, levels, min_gain=gains[sweep_id]))
    return found


def _level(level: int, run_id: str, parts: list[SliceColumns], events: list[Event]) -> SweepLevel:
    def joined(name: str) -> npt.NDArray[Any]:
        return np.concatenate([getattr(p, name) for p in parts]) if parts else np.zeros(0)

    return summarise_level_columns(
        level, run_id, joined("started"), joined("ended"), joined("ok").astype(bool),
        joined("collapsed").astype(bool), joined("tokens").astype(np.int64), events,
    )  # fmt: skip


def _spec(
    analysis: Analysis, label_of: dict[tuple[str, str], str]
) -> tuple[list[SpecSeries], list[str]]:
    series: dict[tuple[str, str], SpecSeries] = {}
    absent = []
    for e in analysis.events:
        if not e.kind.startswith("spec_decode") or e.target is None:
            continue
        label = label_of.get((e.run_id, e.target), "?")
        key = (e.run_id, e.target)
        if e.kind == "spec_decode_absent":
            absent.append(f"{label}@{e.target}")
            continue
        s = series.setdefault(key, SpecSeries(e.run_id, label, e.target))
        start = float(e.data.get("start", e.at))
        if e.kind == "spec_decode":
            acceptance = e.data.get("acceptance")
            accepted = float(acceptance) if isinstance(acceptance, int | float) else None
            s.points.append((start, accepted, float(e.data.get("tokens_per_s") or 0.0)))
        elif e.kind == "spec_decode_collapse":
            reason = str(e.data.get("reason", "no reason recorded"))
            s.collapses.append(SpecCollapse(e.run_id, label, e.target, start, reason))
    return list(series.values()), sorted(set(absent))


def _looks(events: Sequence[Event]) -> list[Look]:
    found = []
    for e in events:
        if e.kind != "look":
            continue
        d = e.data
        p = d.get("p_value")
        found.append(Look(
            e.run_id, e.at, int(d.get("look", 0)), float(d.get("fraction", 0.0)),
            int(d.get("n_per_arm", 0)), tuple(int(x) for x in d.get("events", [])),
            str(d.get("verdict", "")), str(d.get("test", "")),
            float(p) if isinstance(p, int | float) else None, str(d.get("reason", "")),
        ))  # fmt: skip
    return found


def find_probes(analysis: Analysis) -> Probes:
    """Every probe finding of an analysed database."""
    parts_by_run: dict[str, list[SliceColumns]] = {}
    label_of: dict[tuple[str, str], str] = {}
    for (label, target), group in analysis.columns.slices.items():
        for part in group:
            parts_by_run.setdefault(part.run_id, []).append(part)
            label_of[(part.run_id, target)] = label
    for run in analysis.runs:
        for target in run.targets:
            label_of.setdefault((run.run_id, target), run.label)
    differential = [d for u in analysis.units if (d := differential_unit(analysis, u))]
    spec, absent = _spec(analysis, label_of)
    return Probes(
        differential,
        _sweeps(analysis, parts_by_run),
        spec,
        _looks(analysis.events),
        absent,
        replay_verdicts(analysis.events),
        reference_units(analysis.columns.reference, analysis.runs, analysis.columns.reference_rows),
        search_walks(analysis.events),
    )
