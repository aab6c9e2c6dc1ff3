"""How the collapse rate depends on uptime: requests since the server started.

State that builds up (a cache filling, a leak, a graph degrading) makes a freshly started
server fail less than one that has run a while. Two views of runs that each begin on a freshly
started server (a campaign block, a pilot soaked right after starting the server, or the
stretch after a restart):

- `uptime_table`: the rate in bins of uptime (0-1,000, 1,000-2,000, 2,000-5,000, ...), each
  with an exact interval widened by the design effect (clustered failures are worth fewer
  independent ones);
- `fit_uptime`: the rate as `steady * (1 - exp(-uptime / scale))`, the law of a hazard that
  grows with the state's age when the state is cleared at random, fitted by maximum likelihood,
  with a profile (quasi-)likelihood interval for `scale`. `warmup` is the uptime by which the
  rate reaches 90% of its steady value at the interval's upper end: soak that much before
  counting, or count from the start and answer for a fresh server.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]
EDGES = (0, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000)
"""Uptime bins of the table (requests since the server started); the last bin is open."""
REACHED = 0.9  # the warm-up reaches this share of the steady rate
CONFIDENCE = 0.9  # two-sided level of the interval for the scale (its upper end: 95% one-sided)


@dataclass(frozen=True, slots=True)
class UptimeBin:
    """Collapses in one bin of uptime, pooled over runs that reach it."""

    start: int
    """First uptime of the bin (requests since the server started)."""
    end: int
    """Uptime after its last request (exclusive)."""
    events: int
    """Collapses in the bin."""
    n: int
    """Clean generations in the bin."""
    ci_low: float
    """Lower end of the exact 95% interval, widened by the design effect."""
    ci_high: float
    """Upper end of that interval."""

    @property
    def rate(self) -> float:
        """Collapse rate in the bin."""
        return self.events / self.n if self.n else math.nan


def _widened_interval(events: int, n: int, design_effect: float) -> tuple[float, float]:
    """Exact (Clopper-Pearson) 95% interval for the rate, the counts shrunk by the design
    effect: clustered failures carry the information of events / design effect."""
    from soakgate.stats.rates import clopper_pearson

    scale = max(design_effect, 1.0)
    effective_n = max(1, round(n / scale))
    effective_events = min(effective_n, round(events / scale))
    return clopper_pearson(effective_events, effective_n)


def uptime_table(
    sequences: Sequence[BoolArray], design_effect: float = 1.0, edges: Sequence[int] = EDGES
) -> list[UptimeBin]:
    """The rate per uptime bin over runs that each start on a freshly started server (bins no
    run reaches are left out; the last bin ends at the longest run)."""
    longest = max((len(s) for s in sequences), default=0)
    bounds = [e for e in edges if e < longest] + [longest]
    table = []
    for start, end in itertools.pairwise(bounds):
        events = sum(int(s[start:end].sum()) for s in sequences)
        n = sum(max(0, min(len(s), end) - start) for s in sequences)
        if n == 0:
            continue
        low, high = _widened_interval(events, n, design_effect)
        table.append(UptimeBin(start, end, events, n, low, high))
    return table


@dataclass(frozen=True, slots=True)
class UptimeFit:
    """rate(uptime) = steady * (1 - exp(-uptime / scale)), fitted to fresh runs."""

    steady: float
    """Rate once the state has built up."""
    scale: float
    """Requests over which the rate approaches it (0: no dependence on uptime)."""
    scale_high: float
    """Upper end of the interval for `scale` (inf: the runs cannot bound it)."""
    span: int
    """Longest run fitted: no statement reaches beyond it."""
    rising_p: float
    """p-value of the likelihood-ratio test of a rate flat in uptime (scale 0)."""

    @property
    def warmup(self) -> float:
        """Uptime at which the rate reaches 90% of `steady` at `scale_high` (inf if unbounded)."""
        return self.scale_high * math.log(1.0 / (1.0 - REACHED))

    @property
    def steady_within(self) -> bool:
        """Whether that warm-up lies within the first half of the longest run."""
        return self.warmup <= self.span / 2

    def line(self) -> str:
        """One line for `plan` and the report."""
        if self.scale_high == 0.0:
            return "rate does not change with uptime (no failure to fit)"
        bound = (
            f"up to {self.scale_high:,.0f}"
            if math.isfinite(self.scale_high)
            else f"not bounded within {self.span:,} requests"
        )
        reach = (
            f"90% of the steady rate after {self.warmup:,.0f} requests"
            if math.isfinite(self.warmup)
            else "the steady rate is not reached within the runs"
        )
        return (
            f"rate against uptime: {self.steady:.4%} once built up, over a scale of "
            f"{self.scale:,.0f} requests ({CONFIDENCE:.0%} interval {bound}; flat in uptime: "
            f"p={self.rising_p:.2g}); {reach}"
        )


def _profile(uptimes: FloatArray, lengths: Sequence[int], scale: float) -> tuple[float, float]:
    """(profile log-likelihood, steady rate) at `scale` (Poisson approximation)."""
    events = len(uptimes)
    if scale <= 0.0:
        exposure = float(sum(lengths))
        shape = 0.0
    else:
        keep = math.exp(-1.0 / scale)
        exposure = float(sum(n - (1.0 - keep**n) / (1.0 - keep) for n in lengths))
        shape = float(np.log(-np.expm1(-uptimes / scale)).sum())
    steady = events / exposure
    return shape + events * math.log(steady) - events, steady


def fit_uptime(sequences: Sequence[BoolArray], design_effect: float = 1.0) -> UptimeFit:
    """Maximum-likelihood fit of the rising rate, with a profile interval for its scale whose
    likelihood is divided by the design effect (quasi-likelihood: clustered failures)."""
    from scipy.stats import chi2

    runs = [s for s in sequences if len(s)]
    lengths = [len(s) for s in runs]
    span = max(lengths, default=0)
    uptimes = np.concatenate([np.flatnonzero(s) + 1.0 for s in runs] or [np.zeros(0)])
    if len(uptimes) == 0:
        return UptimeFit(0.0, 0.0, 0.0, span, 1.0)
    grid = np.concatenate(([0.0], np.geomspace(1.0, 20.0 * span, 240)))
    profile = np.array([_profile(uptimes, lengths, float(s))[0] for s in grid])
    best = int(np.argmax(profile))
    scale = float(grid[best])
    steady = _profile(uptimes, lengths, scale)[1]
    drop = 2.0 * (profile[best] - profile) / max(design_effect, 1.0)
    inside = np.flatnonzero(drop <= chi2.isf(1.0 - CONFIDENCE, 1))
    high = math.inf if inside[-1] == len(grid) - 1 else float(grid[inside[-1] + 1])
    flat = float(chi2.sf(max(drop[0], 0.0), 1))
    return UptimeFit(steady, scale, high, span, flat)
