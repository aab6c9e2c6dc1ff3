"""Every failure outcome of a unit, from the analysis' columns and events: server errors, crashes,
collapses, suspect generations, divergence from a reference, and any failure at all.

What `compare`'s gate judges between two arms and what every report shows first. Pure over what
the load stage read; nothing here touches the database.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from soakgate.records import CHECKS, JUDGED, NOT_ANY_FAILURE, SPARSE_CHECKS, UNJUDGED
from soakgate.report.load import SliceColumns
from soakgate.report.model import Analysis, Unit
from soakgate.stats.outcomes import CrashRate, crash_rate
from soakgate.stats.rates import RateSummary, summarize_rate
from soakgate.stats.verdict import Outcomes

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
CRASH_EVENT = "engine_fault"
"""The guard's record of a crash: the process exited, hung, logged a fatal line, or its node was
lost (each is followed by a restart or the instance's retirement)."""
NOT_THE_SERVERS_FAULT = frozenset({"node_lost"})
"""Causes of a guard's fault that say nothing about the server: the machine under it went away
(a Ray node removed or dead). Its window is still time the server was not up, but it is not one of
the configuration's crashes."""


def is_crash(kind: str, cause: object) -> bool:
    """Is this event one of the server's own crashes (not the loss of the node under it)?"""
    return kind == CRASH_EVENT and str(cause) not in NOT_THE_SERVERS_FAULT


@dataclass(slots=True)
class PerRequest:
    """One per-request outcome of a unit: failures among the requests it is judged on, in time
    order, and per run (the replicate blocks a verdict can use)."""

    events: int
    n: int
    sequence: BoolArray
    blocks: tuple[tuple[int, int], ...] = ()
    times: FloatArray | None = None
    """When each of `sequence`'s requests ended, for one run of one target (the pairing of
    arms soaked side by side: stats/paired.py)."""

    @property
    def rate(self) -> RateSummary | None:
        """events / n with its exact interval (None when nothing was judged)."""
        return summarize_rate(self.events, self.n) if self.n else None

    def outcomes(self) -> Outcomes:
        """As `stats.verdict.decide` takes it."""
        blocks = self.blocks if len(self.blocks) > 1 else ()
        return Outcomes(self.events, self.n, self.sequence, blocks, self.times)


def per_request(
    parts: Sequence[tuple[BoolArray, BoolArray]], ended: Sequence[FloatArray] = ()
) -> PerRequest:
    """From each run's (failed, judged) row masks, in time order; `ended` holds each run's row
    end times (kept when there is one run)."""
    pieces = [failed[judged] for failed, judged in parts]
    blocks = tuple((int(p.sum()), len(p)) for p in pieces if len(p))
    sequence = np.concatenate(pieces) if pieces else np.zeros(0, dtype=bool)
    times = ended[0][parts[0][1]] if len(parts) == 1 and len(ended) == 1 else None
    return PerRequest(int(sequence.sum()), len(sequence), sequence, blocks, times)


@dataclass(slots=True)
class Divergence:
    """A unit's greedy comparisons with its reference."""

    positions: IntArray
    """First divergence of each compared answer (-1: identical), in time order."""
    own: IntArray
    """The reference against itself: first divergence of its repeat of a compared request
    (-1: identical), in time order; the null the positions are judged against."""
    characters: bool
    """Positions count characters (no token ids on both sides), else tokens."""
    own_source: str = "repeats"
    """`repeats` (measured during the soak) or `baseline` (only the pairs measured before it)."""
    reference: str | None = None
    """Which reference the answers were compared with (a campaign's reference configuration,
    or `run --reference`'s servers; None when not recorded): two arms' divergences are only
    compared with each other when it is the same."""

    @property
    def unit_word(self) -> str:
        """`characters` or `tokens`."""
        return "characters" if self.characters else "tokens"


class RowFlags(NamedTuple):
    """One run's per-row failure flags (all rows, in order), from which any failure is made."""

    server_error: BoolArray
    collapsed: BoolArray
    suspect: BoolArray
    judged: BoolArray
    ended: FloatArray
    checked: BoolArray | None = None
    """Answered rows that failed an integrity check (None: none did)."""


@dataclass(slots=True)
class TwinsAtRest:
    """Twin pairs sent one at a time before a soak (the stack's own rate, apart from load)."""

    pairs: int
    """Pairs whose two answers came back."""
    mismatched: int
    """Of them, pairs whose answers differ."""
    errors: int
    """Pairs lost to a request error."""


def twins_at_rest(analysis: Analysis, unit: Unit) -> TwinsAtRest | None:
    """The unit's `twin_baseline` events, summed (None: none recorded)."""
    found = [e.data for e in analysis.events
             if e.kind == "twin_baseline" and e.target in unit.targets
             and e.run_id in unit.run_ids]  # fmt: skip
    if not found:
        return None
    return TwinsAtRest(*(sum(int(d.get(key, 0)) for d in found)
                         for key in ("pairs", "mismatched", "errors")))  # fmt: skip


@dataclass(slots=True)
class UnitOutcomes:
    """Every failure outcome of one unit (or a label's aggregate)."""

    unit: Unit
    judged: int
    """Requests that say something about the server (all but records.NOT_THE_SERVERS)."""
    error: PerRequest
    """Server-attributable errors among judged requests."""
    collapse: PerRequest | None
    """Collapses among answered generations (None without any)."""
    suspect: PerRequest | None
    """Reference scoring's suspect rows among scored rows (None when nothing was scored)."""
    shifted: PerRequest | None
    """Scored rows whose soak z (else typicality, else mean surprisal) is above their
    calibration's 90th percentile (None when no scored run recorded it): one in ten of a
    reference-like unit's."""
    crash: CrashRate | None
    """Server crashes the guard recorded (None when no guard watched: not a campaign)."""
    crash_lost: int
    """Judged requests lost to a crash (an error of an incarnation after its window opened)."""
    crash_causes: dict[str, int]
    """Crashes by cause (`process_exit`, `health`, `log_pattern`; a lost node is not one)."""
    divergence: Divergence | None
    """Greedy comparisons with a reference (None when none were made)."""
    checks: dict[str, PerRequest] = field(default_factory=dict)
    """Integrity check (`records.CHECKS`) -> its failures among the answered rows of the runs
    that ran it (only checks some run of the unit ran)."""
    rows: list[RowFlags] = field(default_factory=list, repr=False)
    """Each run's row flags, in time order (for `any_failure`)."""
    twins_at_rest: TwinsAtRest | None = None
    """Twin pairs sent at rest before the unit's soaks (`twin_baseline` events; None: none)."""

    @property
    def name(self) -> str:
        """`label@target`, or the label for an aggregate."""
        return self.unit.name

    def any_failure(self, with_suspect: bool) -> PerRequest:
        """Judged requests that failed in any way the server shows by itself: a server error, a
        collapse, or (`with_suspect`) a suspect generation. Divergence is judged apart: it is
        sampled, and measured against a reference's own nondeterminism."""
        parts = []
        for part in self.rows:
            failed = part.server_error | part.collapsed
            if part.checked is not None:
                failed = failed | part.checked
            if with_suspect:
                failed = failed | part.suspect
            parts.append((failed, part.judged))
        return per_request(parts, [part.ended for part in self.rows])


def _parts(analysis: Analysis, unit: Unit) -> list[SliceColumns]:
    """The unit's slices in time order (runs oldest first; an aggregate's targets in turn)."""
    return [
        part
        for target in unit.targets
        for part in analysis.slices(unit.label, target)
        if part.run_id in unit.run_ids
    ]


def _crashes(analysis: Analysis, unit: Unit, parts: Sequence[SliceColumns]) -> CrashRate | None:
    """Crashes of the unit's servers over its hours under load; None when no run of it was
    guarded (only a campaign's guard restarts, and so records, a crashed server)."""
    guarded = {r.run_id for r in analysis.runs if r.campaign is not None}
    if not parts or not all(p.run_id in guarded for p in parts):
        return None
    faults = Counter(
        (e.run_id, e.target)
        for e in analysis.events
        if is_crash(e.kind, e.data.get("cause")) and e.target in unit.targets
    )
    down: dict[tuple[str, str | None], float] = {}
    for e in analysis.events:  # a server being restarted is not up: no exposure
        start, end = e.data.get("start"), e.data.get("end")
        if e.kind == "fault_window" and isinstance(start, float | int):
            until = float(end) if isinstance(end, float | int) else float("inf")
            key = (e.run_id, e.target)
            down[key] = down.get(key, 0.0) + until - float(start)
    blocks = [
        (faults[(p.run_id, p.target)], _up_hours(p, down.get((p.run_id, p.target), 0.0)))
        for p in parts
        if len(p.started)
    ]
    crashes = sum(k for k, _ in blocks)
    seconds = 3600.0 * sum(h for _, h in blocks)
    requests = sum(int(p.judged.sum()) for p in parts)
    return crash_rate(crashes, seconds, requests, blocks if len(blocks) > 1 else ())


def _up_hours(part: SliceColumns, down_s: float) -> float:
    """Hours the slice's server was up under load: its first request to its last answer, less
    the time it spent in fault windows (a window still open at the end runs to the end)."""
    span = float(part.ended.max() - part.started.min())
    return max(span - min(down_s, span), 0.0) / 3600.0


def _causes(analysis: Analysis, unit: Unit) -> dict[str, int]:
    causes: Counter[str] = Counter(
        str(e.data.get("cause", "unknown"))
        for e in analysis.events
        if is_crash(e.kind, e.data.get("cause"))
        and e.target in unit.targets
        and e.run_id in unit.run_ids
    )
    return dict(causes)


def divergence_of(analysis: Analysis, parts: Sequence[SliceColumns]) -> Divergence | None:
    """Compared rows' positions in time order, and the reference's own: its repeats during the
    soak, else the pairs measured before it (`reference_baseline` positions)."""
    compared = [p for p in parts if len(p.compared)]
    if not compared:
        return None
    started = np.concatenate([p.started[p.compared] for p in compared])
    order = np.argsort(started, kind="stable")
    positions = np.concatenate([p.divergence for p in compared])[order]
    own = np.concatenate([p.repeat for p in compared]).astype(np.int64)
    runs = {p.run_id for p in compared}
    baselines = [e.data for e in analysis.events
                 if e.kind == "reference_baseline" and e.run_id in runs]  # fmt: skip
    source = "repeats"
    if not len(own):
        measured = [position for data in baselines for position in _baseline_positions(data)]
        own, source = np.array(measured, dtype=np.int64), "baseline"
    identities = {_reference_identity(data) for data in baselines}
    reference = identities.pop() if len(identities) == 1 else None
    return Divergence(positions, own, any(p.characters for p in compared), source, reference)


def _reference_identity(data: dict[str, object]) -> str | None:
    """A campaign's reference configuration, or the server `run --reference` compared with."""
    if isinstance(data.get("reference"), str):
        return f"configuration {data['reference']}"
    if isinstance(data.get("compared_with"), str):
        return f"server {data['compared_with']}"
    return None


def _baseline_positions(data: dict[str, object]) -> list[int]:
    """The positions a `reference_baseline` event recorded; an older event has only counts:
    its divergent pairs then count as diverging at the first token (the earliest, so that the
    reference looks no better than it may have been)."""
    positions = data.get("positions")
    if isinstance(positions, list):
        return [int(x) for x in positions if isinstance(x, int) and not isinstance(x, bool)]
    pairs, divergent = data.get("pairs", 0), data.get("divergent", 0)
    if not isinstance(pairs, int) or not isinstance(divergent, int):
        return []
    return [0] * min(divergent, pairs) + [-1] * max(pairs - divergent, 0)


def unit_outcomes(
    analysis: Analysis, unit: Unit, suspect: Unit | None = None, shifted: Unit | None = None
) -> UnitOutcomes:
    """Every outcome of `unit`; `suspect` and `shifted` are the unit as reference scoring
    counts it (`report.reference.suspect_units`, `shifted_units`), when it was scored."""
    parts = _parts(analysis, unit)
    judged = sum(int(p.judged.sum()) for p in parts)
    error = per_request([(p.server_error, p.judged) for p in parts], [p.ended for p in parts])
    collapse = None
    if unit.sequence is not None:
        blocks = tuple((s.collapses, s.n) for s in unit.slices if s.n > 0)
        collapse = PerRequest(unit.collapses, unit.n, unit.sequence, blocks, unit.times)
    return UnitOutcomes(
        unit=unit, judged=judged, error=error, collapse=collapse, suspect=_scored(suspect),
        shifted=_scored(shifted),
        crash=_crashes(analysis, unit, parts),
        crash_lost=sum(int(p.crash_lost.sum()) for p in parts),
        crash_causes=_causes(analysis, unit), divergence=divergence_of(analysis, parts),
        checks=_checks(analysis, parts),
        rows=[RowFlags(p.server_error, p.collapsed, p.suspect, p.judged, p.ended, _any_check(p))
              for p in parts],
        twins_at_rest=twins_at_rest(analysis, unit),
    )  # fmt: skip


def _any_check(part: SliceColumns) -> BoolArray | None:
    """The slice's rows that failed any integrity check of a single answer (None: none did;
    `records.NOT_ANY_FAILURE` left out)."""
    if not part.checks:
        return None
    failed = np.zeros(len(part.ok), bool)
    for name in CHECKS:
        if name in part.checks and name not in NOT_ANY_FAILURE:
            failed |= part.checks[name]
    return failed


def _checks(analysis: Analysis, parts: Sequence[SliceColumns]) -> dict[str, PerRequest]:
    """Each integrity check's failures among the answered rows it judged, in the runs that ran
    it (a run records each in its detectors; a row it did not judge is marked `-<name>`)."""
    ran = {r.run_id: r.detectors for r in analysis.runs}
    found: dict[str, PerRequest] = {}
    for name in CHECKS:
        mine = [p for p in parts if name in ran.get(p.run_id, {})]
        if mine:
            found[name] = per_request(
                [(p.checks.get(name, np.zeros(len(p.ok), bool)), _judged_by(p, name))
                 for p in mine],
                [p.ended for p in mine],
            )  # fmt: skip
    return found


def _judged_by(part: SliceColumns, name: str) -> BoolArray:
    """The slice's answered rows that check `name` judged (a sparse check's: those it marked)."""
    if name in SPARSE_CHECKS:
        none = np.zeros(len(part.ok), bool)
        return part.ok & (part.checks.get(name, none) | part.checks.get(JUDGED + name, none))
    unjudged = part.checks.get(UNJUDGED + name)
    return part.ok if unjudged is None else part.ok & ~unjudged


def _scored(unit: Unit | None) -> PerRequest | None:
    """A reference-scoring view of a unit as a per-request outcome (None when nothing counted)."""
    if unit is None or unit.sequence is None or not unit.n:
        return None
    blocks = tuple((s.collapses, s.n) for s in unit.slices if s.n > 0)
    return PerRequest(unit.collapses, unit.n, unit.sequence, blocks)


def all_unit_outcomes(analysis: Analysis) -> list[UnitOutcomes]:
    """Every unit's (and aggregate's) outcomes, in the analysis' order."""
    from soakgate.report.reference import shifted_units, suspect_units

    scored: list[Unit | None] = [None] * len(analysis.units)
    shifted: list[Unit | None] = [None] * len(analysis.units)
    if analysis.columns.reference:
        scored = list(suspect_units(analysis.units, analysis.columns.reference))
        shifted = list(shifted_units(analysis.units, analysis.columns.reference, analysis.runs))
    return [unit_outcomes(analysis, u, s, h)
            for u, s, h in zip(analysis.units, scored, shifted, strict=True)]  # fmt: skip


def analysis_outcomes(analysis: Analysis) -> list[UnitOutcomes]:
    """`all_unit_outcomes`, computed once per analysis (every report format shows them)."""
    if analysis.outcomes_cache is None:
        analysis.outcomes_cache = all_unit_outcomes(analysis)
    return analysis.outcomes_cache
