"""Reference scoring in the report: per unit, suspect / scored with its exact CI, the unscored
rows by reason, the score distribution against the calibration, and the worst rows.

`load_reference` is load-stage (one query per run that was scored, never for other runs);
`reference_units` and `suspect_units` are pure over what it read.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from soakgate.records import Generation, Run
from soakgate.report.model import RunSlice, Unit
from soakgate.stats.rates import RateSummary, summarize_rate
from soakgate.store.base import Store

WORST_PER_UNIT = 3
"""Suspect rows shown per unit, highest scores first."""
QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))


@dataclass(slots=True)
class ReferenceSlice:
    """One run's reference-scored rows on one (label, target), in seq order."""

    run_id: str
    label: str
    target: str
    started: npt.NDArray[np.float64]
    """`started_at` of each scored row."""
    suspect: npt.NDArray[np.bool_]
    """Whether each scored row was flagged."""
    score: npt.NDArray[np.float64]
    """Each scored row's score."""
    row_ids: npt.NDArray[np.int64]
    """Each scored row's id."""
    unscored: Counter[str] = field(default_factory=Counter)
    """Rows chosen for scoring that were not scored, by reason."""


@dataclass(slots=True)
class ReferenceUnit:
    """Reference scoring of one (label, target) unit."""

    label: str
    target: str
    rate: RateSummary | None
    """Suspect / scored rows with its exact CI (None when no row was scored)."""
    unscored: dict[str, int]
    """Rows chosen but not scored, by reason."""
    quantiles: dict[str, float]
    """The scored rows' score quantiles."""
    calibration: dict[str, Any]
    """The calibration of the unit's (first) run: threshold, n, rate, quantiles."""
    worst: list[Generation]
    """The highest-scoring suspect rows, whole."""
    scores: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    """Every scored row's score (for the distribution figure)."""

    @property
    def name(self) -> str:
        """`label@target`."""
        return f"{self.label}@{self.target}"


def scored_runs(runs: Sequence[Run]) -> list[Run]:
    """Runs that were soaked with reference scoring."""
    return [r for r in runs if isinstance(r.detectors.get("reference"), dict)]


ReferenceSlices = dict[tuple[str, str], list[ReferenceSlice]]


def load_reference(
    store: Store, runs: Sequence[Run]
) -> tuple[ReferenceSlices, dict[int, Generation]]:
    """The reference-scored rows of every scored run, by (label, target), and the worst rows
    of each (label, target) whole, by row id."""
    from soakgate.store.sqlite import SqliteStore

    slices: ReferenceSlices = {}
    whole: dict[int, Generation] = {}
    for run in scored_runs(runs):
        if isinstance(store, SqliteStore):
            rows: list[tuple[Any, ...]] = store.reference_rows(run.run_id)
        else:
            rows = _rows_of(store.generations(run.run_id), whole, len(whole))
        for piece in _split(run.run_id, rows):
            slices.setdefault((piece.label, piece.target), []).append(piece)
    if isinstance(store, SqliteStore):
        wanted = [i for group in slices.values() for i in worst_ids(group)]
        whole = store.column_reader().rows(wanted) if wanted else {}
    return slices, whole


def _rows_of(
    generations: Iterable[Generation], whole: dict[int, Generation], offset: int
) -> list[tuple[Any, ...]]:
    """`reference_rows`' tuples from rows (a store without SQL), each kept in `whole` under a
    made-up row id."""
    rows = []
    for index, g in enumerate(generations, offset + 1):
        reference = g.details.get("reference")
        if g.suspect is None and not isinstance(reference, dict):
            continue
        whole[index] = g
        reason = reference.get("reason") if g.suspect is None and reference else None
        rows.append((index, g.label, g.target, g.started_at, g.suspect, g.reference_score, reason))
    return rows


def _split(run_id: str, rows: list[tuple[Any, ...]]) -> list[ReferenceSlice]:
    groups: dict[tuple[str, str], list[tuple[Any, ...]]] = {}
    for row in rows:
        groups.setdefault((row[1], row[2]), []).append(row)
    pieces = []
    for (label, target), mine in groups.items():
        scored = [r for r in mine if r[4] is not None]
        unscored = Counter(str(r[6] or "unknown") for r in mine if r[4] is None)
        pieces.append(ReferenceSlice(
            run_id, label, target, np.array([r[3] for r in scored], np.float64),
            np.array([bool(r[4]) for r in scored], bool),
            np.array([r[5] or 0.0 for r in scored], np.float64),
            np.array([r[0] for r in scored], np.int64), unscored,
        ))  # fmt: skip
    return pieces


def worst_ids(slices: Sequence[ReferenceSlice], count: int = WORST_PER_UNIT) -> list[int]:
    """Row ids of a unit's highest-scoring suspect rows."""
    scores = np.concatenate([s.score[s.suspect] for s in slices]) if slices else np.array([])
    ids = np.concatenate([s.row_ids[s.suspect] for s in slices]) if slices else np.array([])
    order = np.argsort(-scores, kind="stable")[:count]
    return [int(ids[i]) for i in order]


def reference_units(
    slices: ReferenceSlices, runs: Sequence[Run],
    rows: dict[int, Generation],
) -> list[ReferenceUnit]:  # fmt: skip
    """One ReferenceUnit per (label, target) that was scored."""
    calibrations = {r.run_id: r.detectors["reference"] for r in scored_runs(runs)}
    units = []
    for (label, target), group in slices.items():
        suspect = np.concatenate([s.suspect for s in group])
        score = np.concatenate([s.score for s in group])
        unscored: Counter[str] = Counter()
        for piece in group:
            unscored.update(piece.unscored)
        quantiles = {}
        if len(score):
            quantiles = {name: float(np.quantile(score, q)) for name, q in QUANTILES}
        units.append(ReferenceUnit(
            label, target, summarize_rate(int(suspect.sum()), len(suspect)) if len(suspect)
            else None, dict(unscored), quantiles, calibrations.get(group[0].run_id, {}),
            [rows[i] for i in worst_ids(group) if i in rows], score,
        ))  # fmt: skip
    return units


def suspect_units(units: Sequence[Unit], slices: ReferenceSlices) -> list[Unit]:
    """The units as `compare` sees them for outcome `suspect`: suspect / scored rows, per run
    and in time order, in place of collapses / clean rows (aggregates over their targets)."""
    out = []
    for unit in units:
        group = [s for t in unit.targets for s in slices.get((unit.label, t), [])
                 if s.run_id in unit.run_ids]  # fmt: skip
        scored = sum(len(s.suspect) for s in group)
        if not scored:
            out.append(dataclasses.replace(unit, rate=None, slices=[], sequence=None,
                                           clustering=None))  # fmt: skip
            continue
        ordered = sorted(group, key=lambda s: float(s.started.min()) if len(s.started) else 0.0)
        replicates = [
            RunSlice(s.run_id if not unit.aggregate else f"{s.run_id}/{s.target}",
                     float(s.started.min()), float(s.started.max()), len(s.suspect),
                     int(s.suspect.sum()), len(s.suspect))
            for s in ordered if len(s.suspect)
        ]  # fmt: skip
        suspects = sum(r.collapses for r in replicates)
        out.append(dataclasses.replace(
            unit, rate=summarize_rate(suspects, scored), slices=replicates,
            sequence=np.concatenate([s.suspect for s in ordered]), clustering=None,
        ))  # fmt: skip
    return out
