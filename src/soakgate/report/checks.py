"""Methodology warnings and the pre-registration check: what makes a result less than it looks.

Idle gaps, resumed or short runs all shrink the stretch of sustained load a verdict rests
on; a plan registered after the data it judges is no pre-registration at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from soakgate.errors import PlanError
from soakgate.records import Run
from soakgate.report.load import SliceColumns
from soakgate.report.model import Analysis
from soakgate.store.base import LedgerEntry, missing_anchor, verify_chain

BURST_SCOPED = "burst-scoped runs can miss state-dependent failures"
IDLE_GAP_MIN_S = 10.0  # a pause shorter than this is ordinary scheduling jitter
IDLE_GAP_FACTOR = 20.0  # ... and so is one under this many median inter-start gaps


def gap_threshold(ordered_starts: npt.NDArray[np.float64]) -> float:
    """Seconds between consecutive request starts past which a pause is an idle gap."""
    gaps = np.diff(ordered_starts)
    return max(IDLE_GAP_MIN_S, IDLE_GAP_FACTOR * float(np.median(gaps)))


def idle_gaps(starts: npt.ArrayLike) -> list[tuple[float, float]]:
    """(start, length) of every pause between consecutive request starts that is far too long."""
    ordered = np.sort(np.asarray(starts, dtype=np.float64))
    if len(ordered) < 3:
        return []
    gaps = np.diff(ordered)
    threshold = gap_threshold(ordered)
    return [(float(ordered[i]), float(gaps[i])) for i in np.flatnonzero(gaps > threshold)]


def _plan_payloads(ledger: list[LedgerEntry]) -> dict[str, dict[str, Any]]:
    """Run id -> the plan dict registered for it (when the ledger entry carries the plan)."""
    found: dict[str, dict[str, Any]] = {}
    for entry in ledger:
        plan = entry.payload.get("plan")
        if entry.kind == "plan" and isinstance(plan, dict) and entry.payload.get("run_id"):
            found[str(entry.payload["run_id"])] = plan
    return found


def _planned_n(plan: dict[str, Any], run: Run) -> int | None:
    """Answered generations the plan asks of this run on one target."""
    if plan.get("requests_per_block") is not None:
        return int(plan["requests_per_block"])  # a block design: each run is one block
    if run.campaign:
        return None  # a campaign spreads the plan's n over its blocks (each checked as asked)
    sequential = plan.get("sequential")
    if isinstance(sequential, dict) and "n_max_per_arm" in sequential:
        return int(sequential["n_max_per_arm"])
    value = plan.get("n_per_arm")
    return int(value) if value is not None else None


def _run_warnings(
    run: Run, rows_by_target: dict[str, SliceColumns], plan: dict[str, Any] | None
) -> list[str]:
    found = []
    for target, rows in sorted(rows_by_target.items()):
        gaps = idle_gaps(rows.started)
        if gaps:
            longest = max(length for _, length in gaps)
            found.append(
                f"run {run.run_id} ({run.label}@{target}): {len(gaps)} idle gap(s) in the load, "
                f"longest {longest:.0f} s, {sum(g for _, g in gaps):.0f} s in all; {BURST_SCOPED}"
            )
        planned = run.load.get("requests_per_target")
        if isinstance(planned, int):  # the warm-up is soaked apart from the counted rows
            planned -= int(run.load.get("warmup_requests") or 0)
        if isinstance(planned, int) and rows.requests < planned:
            found.append(
                f"run {run.run_id} ({run.label}@{target}): {rows.requests} of the {planned} "
                "requests "
                f"asked for (run {run.status}); {BURST_SCOPED}"
            )
        planned_n = _planned_n(plan, run) if plan else None
        clean = int(rows.ok.sum())
        if planned_n is not None and clean < planned_n:
            found.append(
                f"run {run.run_id} ({run.label}@{target}): n={clean} is shorter than its plan's "
                f"n={planned_n}; {BURST_SCOPED}"
            )
    return found


def methodology_warnings(analysis: Analysis) -> list[str]:
    """One line per run or target whose data are thinner than they look."""
    found: list[str] = []
    plans = _plan_payloads(analysis.ledger)
    resumed = [e.run_id for e in analysis.events if e.kind == "resumed"]
    for run in analysis.runs:
        rows_by_target: dict[str, SliceColumns] = {}
        for (label, target), group in analysis.columns.slices.items():
            if label == run.label:
                for part in group:
                    if part.run_id == run.run_id:
                        rows_by_target[target] = part
        if resumed.count(run.run_id):
            found.append(
                f"run {run.run_id} ({run.label}) was resumed {resumed.count(run.run_id)} time(s): "
                "its load was not continuous"
            )
        if run.status == "running" and run.ended_at is None:
            found.append(f"run {run.run_id} ({run.label}) never ended cleanly (killed or running)")
        found.extend(_run_warnings(run, rows_by_target, plans.get(run.run_id)))
    if verify_chain(analysis.ledger) is not None:
        found.append(f"the plan ledger is broken at entry {verify_chain(analysis.ledger)}")
    cut = missing_anchor(analysis.runs, analysis.ledger)
    if cut is not None:
        found.append(cut)
    found.extend(_gateway_warnings(analysis))
    return found


def _gateway_warnings(analysis: Analysis) -> list[str]:
    """A unit whose answers a gateway retried upstream: its server failed more often than
    its errors show."""
    return [
        f"{unit.name}: a gateway retried {g.rows} answer(s) upstream ({g.retries} retries, "
        f"{g.clean} of the answers counted clean): the server failed at least {g.retries} "
        "more time(s) than its errors show (x-litellm-attempted-retries, x-envoy-attempt-count)"
        for unit in analysis.units if not unit.aggregate and (g := unit.gateway) is not None
    ]  # fmt: skip


def check_registration(
    digest: str, ledger: list[LedgerEntry], first_generation: dict[str, float],
    runs: Sequence[Run] = (),
) -> list[LedgerEntry]:  # fmt: skip
    """The ledger entries registering plan `digest` for each run, each before that run's data.

    `first_generation` maps every run the comparison covers to its first request's start.
    Raises PlanError when the ledger is broken, the plan is absent, or registered too late.
    """
    broken = verify_chain(ledger)
    if broken is not None:
        raise PlanError(f"the plan ledger is broken at entry {broken}: it was rewritten")
    cut = missing_anchor(runs, ledger)
    if cut is not None:
        raise PlanError(cut)
    entries = [e for e in ledger if e.kind == "plan" and e.payload.get("sha256") == digest]
    if not entries:
        raise PlanError(f"plan sha256 {digest[:12]}... was never registered in this database")
    used = []
    for run_id, first in sorted(first_generation.items()):
        mine = [e for e in entries if e.payload.get("run_id") in (run_id, None)]
        if not mine:
            raise PlanError(f"plan {digest[:12]}... was not registered for run {run_id}")
        earliest = min(mine, key=lambda e: e.at)
        if earliest.at > first:
            raise PlanError(
                f"plan {digest[:12]}... was registered for run {run_id} "
                f"{earliest.at - first:.1f} s after its first generation: not a pre-registration"
            )
        used.append(earliest)
    return used
