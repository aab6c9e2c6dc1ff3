"""How fast each unit answered: end-to-end latency, time to first token and time per output
token over its answered generations, as p50 / p90 / p99 with 95% intervals (`stats.latency`).

- **end-to-end**: `ended_at - started_at` of every answered generation.
- **TTFT**: time to the first token, streamed requests only.
- **TPOT**: time per output token after the first, per streamed request: (end-to-end - TTFT) /
  (completion tokens - 1), for requests with at least two tokens. It is each request's mean
  inter-token latency; the gaps between single tokens are not stored.

Intervals are order-statistic ones, as if requests were independent (the section says so); a
comparison of two units (`compare`) rests on a t over batch medians, which allows for
correlation between neighbouring requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from soakgate.report.latency_load import FloatArray, LatencySlice
from soakgate.report.model import Analysis, Unit
from soakgate.stats.latency import (
    QUANTILES,
    Distribution,
    MedianComparison,
    compare_medians,
    distribution,
)

TITLE = "latency per unit (answered generations; 95% intervals as if requests were independent)"
NOTE = (
    "end-to-end: request sent to last byte; TTFT: time to first token (streamed requests); "
    "TPOT: (end-to-end - TTFT) / (tokens - 1) per streamed request, its mean inter-token time"
)
MEASURES = ("end_to_end", "ttft", "tpot")
NAMES = {"end_to_end": "end-to-end", "ttft": "TTFT", "tpot": "TPOT"}


@dataclass(frozen=True, slots=True)
class UnitLatency:
    """One unit's latencies."""

    label: str
    target: str
    answered: int
    """Answered generations timed."""
    streamed: int
    """Of them, streamed with a first token (TTFT and TPOT come from these)."""
    end_to_end: Distribution | None
    ttft: Distribution | None
    tpot: Distribution | None

    @property
    def name(self) -> str:
        """`label@target`."""
        return f"{self.label}@{self.target}"

    def measure(self, name: str) -> Distribution | None:
        """One of MEASURES."""
        found: Distribution | None = getattr(self, name)
        return found


def _arrays(parts: list[LatencySlice]) -> dict[str, FloatArray]:
    """A unit's time-ordered end-to-end, TTFT and TPOT values (runs oldest first)."""
    if not parts:
        return {m: np.zeros(0) for m in MEASURES}
    seconds = np.concatenate([p.seconds for p in parts])
    ttft = np.concatenate([p.ttft for p in parts])
    tokens = np.concatenate([p.tokens for p in parts])
    decode = np.where(np.isfinite(ttft) & (tokens >= 2), seconds - ttft, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = decode / (tokens - 1)
    return {"end_to_end": seconds, "ttft": ttft, "tpot": tpot}


def unit_arrays(analysis: Analysis, unit: Unit) -> dict[str, FloatArray]:
    """The values a unit's (or an aggregate's) latencies are computed from, by measure, in time
    order (an aggregate's targets one after another)."""
    latency = analysis.columns.latency
    return _arrays([part for t in unit.targets for part in latency.get((unit.label, t), [])])


def unit_latencies(analysis: Analysis) -> list[UnitLatency]:
    """Every unit that has a timed answered generation, in report order (aggregates left out)."""
    found = []
    for unit in analysis.units:
        if unit.aggregate:
            continue
        values = unit_arrays(analysis, unit)
        if not len(values["end_to_end"]):
            continue
        found.append(UnitLatency(
            unit.label, unit.target, len(values["end_to_end"]),
            int(np.isfinite(values["ttft"]).sum()),
            *(distribution(values[m]) for m in MEASURES),
        ))  # fmt: skip
    return found


def seconds_text(value: float) -> str:
    """`850 ms`, `1.24 s`, `12.3 µs`; `-` for NaN."""
    if not math.isfinite(value):
        return "-"
    if value >= 1.0:
        return f"{value:.3g} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    return f"{value * 1e6:.3g} µs"


def cell(found: Distribution | None) -> str:
    """`p50 / p90 / p99` of one measure, e.g. `120 ms / 180 ms / 240 ms`."""
    if found is None:
        return "-"
    return " / ".join(seconds_text(found.quantile(q).value) for q in QUANTILES)


def table_rows(rows: list[UnitLatency]) -> list[list[str]]:
    """The terminal and markdown cells: unit, answered, streamed, then each measure's cell."""
    return [
        [
            row.name,
            f"{row.answered:,}",
            f"{row.streamed:,}",
            *(cell(row.measure(m)) for m in MEASURES),
        ]
        for row in rows
    ]


HEADERS = ("unit", "answered", "streamed", *(f"{NAMES[m]} p50 / p90 / p99" for m in MEASURES))


def csv_columns() -> list[str]:
    """The CSV's latency columns: `end_to_end_p50_s` ... `tpot_p99_s`."""
    return [f"{m}_p{round(q * 100)}_s" for m in MEASURES for q in QUANTILES]


def csv_values(row: UnitLatency | None) -> dict[str, float | None]:
    """A unit's values for csv_columns (None where not measured)."""
    values: dict[str, float | None] = dict.fromkeys(csv_columns())
    for m in MEASURES:
        found = row.measure(m) if row is not None else None
        for q in found.quantiles if found is not None else ():
            values[f"{m}_p{round(q.q * 100)}_s"] = q.value
    return values


def _distribution_json(found: Distribution | None) -> dict[str, Any] | None:
    if found is None:
        return None

    def finite(x: float) -> float | None:
        return x if math.isfinite(x) else None

    return {
        "n": found.n, "mean_s": found.mean,
        **{f"p{round(q.q * 100)}_s": q.value for q in found.quantiles},
        **{f"p{round(q.q * 100)}_ci_s": [finite(q.low), finite(q.high)]
           for q in found.quantiles},
    }  # fmt: skip


def latency_json(analysis: Analysis) -> list[dict[str, Any]]:
    """`--format json`: one object per unit, seconds throughout."""
    return [
        {"unit": row.name, "label": row.label, "target": row.target, "answered": row.answered,
         "streamed": row.streamed,
         **{m: _distribution_json(row.measure(m)) for m in MEASURES}}
        for row in unit_latencies(analysis)
    ]  # fmt: skip


@dataclass(frozen=True, slots=True)
class LatencyComparison:
    """B's latencies against A's, measure by measure (only those both arms have)."""

    a: str
    b: str
    measures: dict[str, MedianComparison]

    def lines(self, alpha: float = 0.05) -> list[str]:
        """A title and one line per measure."""
        if not self.measures:
            return []
        lines = [
            f"latency, {self.b} (B) against {self.a} (A): medians, Welch t over batch medians "
            "(valid when requests forget their past within a twelfth of a run; not part of "
            "the gate)"
        ]
        for name, c in self.measures.items():
            word = "differs" if c.p_value < alpha else "no significant difference"
            lines.append(
                f"  {NAMES[name]}: B {seconds_text(c.b)} vs A {seconds_text(c.a)} "
                f"(B/A {c.ratio:.3g}; t({c.df:.1f}) = {c.t:.3g}, p = {c.p_value:.3g}): {word}"
            )
        return lines

    def to_json(self) -> dict[str, Any]:
        """The same as JSON."""
        return {
            "a": self.a, "b": self.b,
            "measures": {
                m: {"median_a_s": c.a, "median_b_s": c.b, "ratio": c.ratio, "t": c.t,
                    "df": c.df, "p_value": c.p_value, "batches": list(c.batches)}
                for m, c in self.measures.items()
            },
        }  # fmt: skip


def compare_latency(analysis: Analysis, a: Unit, b: Unit) -> LatencyComparison:
    """Unit (or aggregate) B's latencies against A's."""
    values_a, values_b = unit_arrays(analysis, a), unit_arrays(analysis, b)
    found = {}
    for measure in MEASURES:
        result = compare_medians(values_a[measure], values_b[measure])
        if result is not None:
            found[measure] = result
    return LatencyComparison(f"{a.label}@{a.target}", f"{b.label}@{b.target}", found)
