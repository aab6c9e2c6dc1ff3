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
from soakgate.report.reference_load import (
    ReferenceSlice,
    ReferenceSlices,
    scored_runs,
    worst_ids,
)
from soakgate.stats.rates import RateSummary, summarize_rate
from soakgate.stats.shift import ShiftResult, score_shift, score_shift_z

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
            _shift(group, [calibrations.get(s.run_id, {}) for s in group]),
        ))  # fmt: skip
    return units


SHIFT_SCORES = (("soak_z", "soak_z_quantiles", "soak z"),
                ("typical", "typical_quantiles", "typicality"),
                ("mean", "mean_quantiles", "mean surprisal"))  # fmt: skip
"""The scores the unit-level verdict can judge, best first: (slice attribute, calibration key,
name). The soak z (the per-generation flag's score: surprisal against what the soak's own
sampling expects) is judged where the reference gave alternatives and the soak sampled; the
typicality (surprisal less the reference's entropy) in a greedy soak, which has no sampling
distribution; the mean surprisal where the reference gave no alternatives."""


def _cutoff(calibration: dict[str, Any], key: str) -> float | None:
    """The calibration's 90th percentile of one score (None when it did not record it)."""
    quantiles = calibration.get(key)
    cutoff = quantiles.get("p90") if isinstance(quantiles, dict) else None
    return float(cutoff) if isinstance(cutoff, int | float) else None


def _shift(
    group: Sequence[ReferenceSlice], calibrations: list[dict[str, Any]]
) -> ShiftResult | None:
    """The unit-level verdict on its rows' soak z (share above the 90th percentile and mean,
    `stats.shift.score_shift_z`), else their typicality, else their mean surprisal (the share
    alone): the first score for which every run of the unit was calibrated alike, recorded
    what the test needs, and every scored row has the score."""
    first = calibrations[0] if calibrations else {}
    n = first.get("n")
    for attribute, key, name in SHIFT_SCORES:
        cutoff = _cutoff(first, key)
        same = all(_cutoff(c, key) == cutoff and c.get("n") == n for c in calibrations)
        values = np.concatenate([getattr(piece, attribute) for piece in group])
        if not (same and cutoff is not None and isinstance(n, int)) or np.isnan(values).any():
            continue
        moments = first.get("soak_z_moments") if attribute == "soak_z" else None
        if isinstance(moments, dict) and all(c.get("soak_z_moments") == moments
                                             for c in calibrations):  # fmt: skip
            mean, variance = float(moments["mean"]), float(moments["variance"])
            return score_shift_z(values, cutoff, n, mean, variance)
        return score_shift(values, cutoff, n, score=name)
    return None


def suspect_units(units: Sequence[Unit], slices: ReferenceSlices) -> list[Unit]:
    """The units as `compare` sees them for outcome `suspect`: suspect / scored rows, per run
    and in time order, in place of collapses / answered rows (aggregates over their targets)."""
    return _flagged_units(units, slices)


def shifted_units(
    units: Sequence[Unit], slices: ReferenceSlices, runs: Sequence[Run]
) -> list[Unit]:
    """The units as `compare` sees them for outcome `shifted`: scored rows whose soak z (else
    typicality, else mean surprisal: `SHIFT_SCORES`) is above their run's calibration's 90th
    percentile (one in ten of a reference-like unit's), per run and in time order; runs that
    recorded none are left out."""
    calibrations = {run.run_id: run.detectors["reference"] for run in scored_runs(runs)}
    shifted: ReferenceSlices = {}
    for key, group in slices.items():
        for piece in group:
            calibration = calibrations.get(piece.run_id, {})
            for attribute, quantiles, _ in SHIFT_SCORES:
                cutoff, values = _cutoff(calibration, quantiles), getattr(piece, attribute)
                if cutoff is not None and not np.isnan(values).any():
                    flags = values > cutoff
                    shifted.setdefault(key, []).append(dataclasses.replace(piece, suspect=flags))
                    break
    return _flagged_units(units, shifted)


def _flagged_units(units: Sequence[Unit], slices: ReferenceSlices) -> list[Unit]:
    """Each unit with its slices' flags (`suspect`) in place of collapses / answered rows."""
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
