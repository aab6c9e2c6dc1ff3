"""The rate against uptime of every unit: collapses in bins of requests since each run's start.

A campaign block starts on a freshly started server, so its uptime is the server's; a plain run
may have begun on a server that was already up, and its bins then count from the run's start
(the line says how many runs of the unit are blocks). A run's warm-up (soaked, never counted:
`warmup_requests` in its load) is part of its uptime and is shown, apart, with what it held.
Intervals are exact 95% ones, widened by the unit's long-range design effect when the report
measured it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from soakgate.report.formatting import percent
from soakgate.report.model import Analysis, Unit
from soakgate.stats.uptime import UptimeBin, uptime_table


@dataclass(frozen=True, slots=True)
class UnitUptime:
    """One unit's collapse rate per uptime bin."""

    name: str
    """`label@target`."""
    runs: int
    """Runs pooled."""
    fresh: int
    """Of them, campaign blocks (each on a freshly started server)."""
    bins: tuple[UptimeBin, ...]
    """Rate per bin of requests since each run's start, warm-ups included."""
    warmup_requests: int
    """Warm-up requests soaked and not counted, over all runs."""
    warmup_collapses: int
    """Collapses among them."""

    def line(self) -> str:
        """`eager@gpu0 (8 runs, 8 fresh): 0-1,000 0.10% [..] | ...`."""
        cells = " | ".join(
            f"{b.start:,}-{b.end:,} {percent(b.rate)} [{percent(b.ci_low)}, {percent(b.ci_high)}]"
            for b in self.bins
        )
        warm = (
            f"; warm-up soaked, not counted: {self.warmup_collapses:,} / "
            f"{self.warmup_requests:,} collapsed"
            if self.warmup_requests
            else ""
        )
        return f"{self.name} ({self.runs} runs, {self.fresh} on fresh servers): {cells}{warm}"


def _sequences(analysis: Analysis, unit: Unit) -> tuple[list[np.ndarray], int, int]:
    """Each run's clean collapse flags from its start (warm-up first), and the warm-up totals."""
    warm = {w.run_id: w for w in analysis.columns.warmups.get((unit.label, unit.target), [])}
    sequences, requests, collapses = [], 0, 0
    for part in analysis.slices(unit.label, unit.target):
        early = warm.get(part.run_id)
        counted = part.clean_sequence
        if early is not None:
            requests += early.requests
            collapses += int(early.collapsed.sum())
            counted = np.concatenate([early.clean_sequence, counted])
        sequences.append(counted)
    return sequences, requests, collapses


def unit_uptimes(analysis: Analysis) -> list[UnitUptime]:
    """Every unit's rate against uptime; empty unless some unit's runs span two bins."""
    campaign_runs = {run.run_id for run in analysis.runs if run.campaign}
    found = []
    for unit in analysis.units:
        if unit.aggregate:
            continue
        sequences, requests, collapses = _sequences(analysis, unit)
        spread = unit.clustering.design_effect if unit.clustering is not None else 1.0
        bins = tuple(uptime_table(sequences, spread))
        fresh = sum(s.run_id in campaign_runs for s in analysis.slices(unit.label, unit.target))
        found.append(UnitUptime(unit.name, len(sequences), fresh, bins, requests, collapses))
    return found if any(len(u.bins) > 1 for u in found) else []


UPTIME_TITLE = (
    "rate against uptime (requests since each run's start; campaign blocks start on a freshly "
    "started server; exact 95% intervals, widened by the unit's design effect):"
)


def uptime_lines(analysis: Analysis) -> list[str]:
    """The report's section: a title and one line per unit (nothing when runs are short)."""
    rows = unit_uptimes(analysis)
    return [UPTIME_TITLE, *(f"  {row.line()}" for row in rows)] if rows else []


def _bin_json(b: UptimeBin) -> dict[str, Any]:
    return {"start": b.start, "end": b.end, "events": b.events, "n": b.n, "rate": b.rate,
            "ci": [b.ci_low, b.ci_high]}  # fmt: skip


def _unit_json(row: UnitUptime) -> dict[str, Any]:
    return {"unit": row.name, "runs": row.runs, "fresh_runs": row.fresh,
            "warmup_requests": row.warmup_requests, "warmup_collapses": row.warmup_collapses,
            "bins": [_bin_json(b) for b in row.bins]}  # fmt: skip


def uptime_json(analysis: Analysis) -> list[dict[str, Any]]:
    """The same for `--format json`."""
    return [_unit_json(row) for row in unit_uptimes(analysis)]
