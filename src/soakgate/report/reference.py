"""Reference scoring in the report: per unit, suspect / scored with its exact CI, the unscored
rows by reason, the score distribution against the calibration, and the worst rows.

Pure over what reference_load.py read (the analysis stage).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from soakgate.records import Generation, Run
from soakgate.report.model import RunSlice, Unit
from soakgate.report.reference_load import ReferenceSlices, scored_runs, worst_ids
from soakgate.stats.rates import RateSummary, summarize_rate
from soakgate.stats.shift import ShiftResult, score_shift

QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))


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
    shift: ShiftResult | None = None
    """The unit's scores as a whole against the calibration's (None when its runs were not
    calibrated alike, or the calibration holds no 90th percentile)."""

    @property
    def name(self) -> str:
        """`label@target`."""
        return f"{self.label}@{self.target}"


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
        calibration = calibrations.get(group[0].run_id, {})
        units.append(ReferenceUnit(
            label, target, summarize_rate(int(suspect.sum()), len(suspect)) if len(suspect)
            else None, dict(unscored), quantiles, calibration,
            [rows[i] for i in worst_ids(group) if i in rows], score,
            _shift(np.concatenate([s.mean for s in group]),
                   [calibrations.get(s.run_id, {}) for s in group]),
        ))  # fmt: skip
    return units


def _shift(
    means: npt.NDArray[np.float64], calibrations: list[dict[str, Any]]
) -> ShiftResult | None:
    """The unit-level verdict on the rows' mean surprisal, when every run of the unit was
    calibrated alike and recorded it."""
    first = calibrations[0] if calibrations else {}
    cutoff = first.get("mean_quantiles", {}).get("p90")
    n = first.get("n")
    same = all(c.get("mean_quantiles", {}).get("p90") == cutoff and c.get("n") == n
               for c in calibrations)  # fmt: skip
    if not same or not isinstance(cutoff, int | float) or not isinstance(n, int):
        return None
    if np.isnan(means).any():
        return None
    return score_shift(means, float(cutoff), n)


def suspect_units(units: Sequence[Unit], slices: ReferenceSlices) -> list[Unit]:
    """The units as `compare` sees them for outcome `suspect`: suspect / scored rows, per run
    and in time order, in place of collapses / clean rows (aggregates over their targets)."""
    return _flagged_units(units, slices)


def shifted_units(
    units: Sequence[Unit], slices: ReferenceSlices, runs: Sequence[Run]
) -> list[Unit]:
    """The units as `compare` sees them for outcome `shifted`: scored rows whose mean surprisal
    is above their run's calibration's 90th percentile (one in ten of a reference-like unit's),
    per run and in time order; runs that recorded no mean surprisal are left out."""
    cutoffs = {}
    for run in scored_runs(runs):
        cutoff = run.detectors["reference"].get("mean_quantiles", {}).get("p90")
        if isinstance(cutoff, int | float):
            cutoffs[run.run_id] = float(cutoff)
    shifted: ReferenceSlices = {}
    for key, group in slices.items():
        for piece in group:
            if piece.run_id in cutoffs and not np.isnan(piece.mean).any():
                flags = piece.mean > cutoffs[piece.run_id]
                shifted.setdefault(key, []).append(dataclasses.replace(piece, suspect=flags))
    return _flagged_units(units, shifted)


def _flagged_units(units: Sequence[Unit], slices: ReferenceSlices) -> list[Unit]:
    """Each unit with its slices' flags (`suspect`) in place of collapses / clean rows."""
    out = []
    for unit in units:
        group = [s for t in unit.targets for s in slices.get((unit.label, t), [])
                 if s.run_id in unit.run_ids]  # fmt: skip
        scored = sum(len(s.suspect) for s in group)
        if not scored:
            out.append(dataclasses.replace(unit, rate=None, slices=[], sequence=None,
                                           times=None, clustering=None))  # fmt: skip
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
            sequence=np.concatenate([s.suspect for s in ordered]), times=None, clustering=None,
        ))  # fmt: skip
    return out
