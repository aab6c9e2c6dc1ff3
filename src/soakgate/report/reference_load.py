"""Load reference scoring's rows: one query per run that was soaked with it (never for other
runs), into compact columns per (label, target, run), and the worst rows whole."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from soakgate.records import Generation, Run
from soakgate.store.base import Store

WORST_PER_UNIT = 3
"""Suspect rows shown per unit, highest scores first."""


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
    mean: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    """Each scored row's mean surprisal (NaN where it was not recorded)."""
    typical: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    """Each scored row's typicality (NaN where it was not recorded or not computed)."""
    soak_z: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    """Each scored row's soak z (NaN where it was not recorded or not computed)."""


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
        mean = reference.get("mean") if g.suspect is not None and reference else None
        typical = reference.get("typical") if g.suspect is not None and reference else None
        soak_z = reference.get("soak_z") if g.suspect is not None and reference else None
        rows.append((index, g.label, g.target, g.started_at, g.suspect, g.reference_score, reason,
                     mean, typical, soak_z))  # fmt: skip
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
            np.array([np.nan if r[7] is None else r[7] for r in scored], np.float64),
            np.array([np.nan if r[8] is None else r[8] for r in scored], np.float64),
            np.array([np.nan if r[9] is None else r[9] for r in scored], np.float64),
        ))  # fmt: skip
    return pieces


def worst_ids(slices: Sequence[ReferenceSlice], count: int = WORST_PER_UNIT) -> list[int]:
    """Row ids of a unit's highest-scoring suspect rows."""
    scores = np.concatenate([s.score[s.suspect] for s in slices]) if slices else np.array([])
    ids = np.concatenate([s.row_ids[s.suspect] for s in slices]) if slices else np.array([])
    order = np.argsort(-scores, kind="stable")[:count]
    return [int(ids[i]) for i in order]


def suspect_ids(slices: ReferenceSlices) -> list[int]:
    """Row ids of every row reference scoring flagged."""
    return [int(i) for group in slices.values() for piece in group
            for i in piece.row_ids[piece.suspect]]  # fmt: skip
