"""What an earlier soak (a pilot) can vouch for when a plan is sized from it.

A pilot of a few runs holds few failures, so its rate and its design effect are uncertain,
and the design effect it measures at its longest windows is a lower bound whenever the
variance-time curve is still rising. A plan sized on the estimates themselves under-delivers
(issue 26: 55-64% for a promised 80%). So a plan takes from the pilot only what it can vouch
for, at a stated confidence (CONFIDENCE, one-sided):

- the dispersion of counts over a block of m requests: at most the upper confidence bound of
  the variance-time curve at windows up to m (scaled chi-square on the windows it rests on),
  over the whole runs and, for a block counted after a warm-up, over the runs from that uptime
  on (the larger); past the longest window (an eighth of the runs) the bound grows with the
  square root of the length when the curve was still rising there, and stays flat when not;
- the rate over the requests [w, w + m) after each server's start: at least the lower
  confidence bound of the pilot's own rate over those uptimes (each pilot run is taken to
  start on a freshly started server), its counts shrunk by the dispersion bound. Past the
  pilot's runs only when the rate has levelled off in them (`stats.uptime`): the rate of the
  runs' second half is then carried on, up to REACH times the runs' length.

Block counts are then drawn with that mean and dispersion from the most lopsided law that has
them (`BlockBounds`): each block's server is either failing, at the rate that gives the mean,
or not at all (a two-point mixture of Poisson counts). The verdict's test over blocks loses
more power on such lumpy counts than on smooth ones of the same variance (measured: with the
true mean and dispersion, a gamma mixture promised 44% where clean/bursty regimes delivered
32-34%; the two-point mixture 36%), so the power printed holds for lumpier processes too.

One run per arm is not sized from a pilot:
its verdict depends on correlation over stretches as long as a tenth of the run, which a pilot
much shorter than the run cannot measure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from soakgate.errors import UsageError
from soakgate.stats.dependence import LongRangeEstimate, long_range_design_effect
from soakgate.stats.uptime import UptimeFit, fit_uptime

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
CONFIDENCE = 0.8  # one-sided level of the rate's lower and the dispersion's upper bound
REACH = 4  # a levelled-off rate is carried on past the pilot's runs up to this many times them
OVERLAP_GAIN = 1.5  # overlapping windows carry about 1.5 times the information of disjoint ones


@dataclass(frozen=True, slots=True)
class BlockBounds:
    """Block counts of a plan sized from a pilot, with mean rate x length and variance
    `dispersion` times the mean: Poisson counts of servers that are either failing (with
    probability share) at rate / share, or not at all (a FailureModel for blocks only)."""

    rate: float
    """Rate per counted request (the pilot's lower bound over the counted uptimes)."""
    dispersion: float
    """Variance of a block's count over its mean (the pilot's upper bound at that length)."""

    def counts(
        self,
        rng: np.random.Generator,
        reps: int,
        start: int,
        length: int,
        segments: int,
        multiplier: float,
    ) -> IntArray:
        """(reps, 1) block counts; the bounds already refer to the design's uptimes."""
        if segments != 1:
            raise UsageError("a pilot's bounds size blocks, not segments of one run")
        mean = self.rate * multiplier * length
        if self.dispersion <= 1.0 or mean <= 0.0:
            drawn: IntArray = rng.poisson(mean, (reps, 1)).astype(np.int64)
            return drawn
        # Var = mean x dispersion when share = m / (m + dispersion - 1), m arm A's mean: the
        # same share in both arms (the ratio scales the failing state's rate, as in arm B)
        base = self.rate * length
        share = base / (base + self.dispersion - 1.0)
        failing = rng.random((reps, 1)) < share
        mixed: IntArray = rng.poisson(np.where(failing, mean / share, 0.0)).astype(np.int64)
        return mixed

    def describe(self) -> str:
        """One phrase."""
        return f"rate >= {self.rate:.4%}, dispersion <= {self.dispersion:.2f}"


@dataclass(frozen=True, slots=True)
class PilotEstimate:
    """What an earlier soak says about the failure process a plan must allow for."""

    source: str
    """Where the pilot came from (database and label), for the printed line."""
    sequences: tuple[BoolArray, ...]
    """Its time-ordered runs (one per run and target), each from a server's start."""
    long_range: LongRangeEstimate
    """Their variance-time curve and the design effect it implies."""
    uptime: UptimeFit
    """How their rate depends on the requests since the server started."""
    trimmed: dict[int, LongRangeEstimate] = field(default_factory=dict, compare=False, repr=False)
    """Variance-time curves of the runs from a later uptime on (filled as plans ask)."""

    @property
    def n(self) -> int:
        """Clean generations in the pilot."""
        return sum(len(s) for s in self.sequences)

    @property
    def events(self) -> int:
        """Collapses in the pilot."""
        return sum(int(s.sum()) for s in self.sequences)

    @property
    def rate(self) -> float:
        """Collapse rate of the pilot."""
        return self.events / self.n if self.n else 0.0

    @property
    def span(self) -> int:
        """Longest run: the uptimes the pilot has seen."""
        return max(len(s) for s in self.sequences)

    def line(self) -> str:
        """One line describing the estimate."""
        estimate = self.long_range
        rising = " (still rising at an eighth of the run: a lower bound)"
        bound = rising if estimate.still_rising else ""
        return (
            f"pilot {self.source}: {len(self.sequences)} run(s), {self.events:,} / {self.n:,} "
            f"collapsed ({self.rate:.4%}); long-range design effect {estimate.design_effect:.2f} "
            f"at windows of {estimate.window:,} requests{bound}"
        )

    def dispersion_high(self, length: int, start: int = 0) -> float:
        """Upper bound (CONFIDENCE) of the dispersion of counts over `length` requests: over the
        whole pilot, and, for counting that starts at uptime `start`, over its runs from there
        on (state that builds up can make late stretches the more variable), the larger."""
        high = _dispersion_bound(self.long_range, self.sequences, length)
        if start > 0:
            trimmed = tuple(s[start:] for s in self.sequences if len(s) > start)
            if trimmed:
                if start not in self.trimmed:
                    self.trimmed[start] = long_range_design_effect(list(trimmed))
                high = max(high, _dispersion_bound(self.trimmed[start], trimmed, length))
        return high

    def rate_low(self, start: int, length: int) -> float | None:
        """Lower bound (CONFIDENCE) of the rate over uptimes [start, start + length), or None
        where the pilot cannot vouch for it (past its runs while its rate still changed)."""
        end = start + length
        if end > self.longest(0):
            return None
        seen = (start, min(end, self.span))
        late = (max(start, self.span // 2), self.span)
        total = 0.0
        for (first, last), share in ((seen, seen[1] - seen[0]), (late, max(0, end - self.span))):
            if share <= 0:
                continue
            total += share * self._rate_bound(first, last)
        return total / length

    def _rate_bound(self, first: int, last: int) -> float:
        from scipy.stats import gamma

        events = sum(int(s[first:last].sum()) for s in self.sequences)
        exposure = sum(max(0, min(len(s), last) - first) for s in self.sequences)
        if events == 0 or exposure == 0:
            return 0.0
        spread = self.dispersion_high(max(1, exposure // len(self.sequences)), first)
        effective = events / spread
        return float(gamma.ppf(1.0 - CONFIDENCE, effective)) * spread / exposure

    def longest(self, warmup: int) -> int:
        """The longest counted stretch after `warmup` the pilot vouches for."""
        if self.uptime.steady_within:
            return max(0, REACH * self.span - warmup)
        return max(0, self.span - warmup)

    def blocks(self, warmup: int, length: int) -> BlockBounds | None:
        """The block model for counted stretches [warmup, warmup + length) of fresh servers."""
        rate = self.rate_low(warmup, length)
        if rate is None or rate <= 0.0:
            return None
        return BlockBounds(rate, self.dispersion_high(length, warmup))


def _dispersion_bound(
    curve: LongRangeEstimate, sequences: Sequence[BoolArray], length: int
) -> float:
    """The largest upper confidence bound of the curve at windows up to `length`, grown with
    the square root of the length past its longest window while the curve was still rising."""
    from scipy.stats import chi2

    bounds: list[float] = []
    for point in curve.curve:
        if point.window > length and bounds:
            break
        disjoint = sum(len(s) // point.window for s in sequences)
        df = max(1.0, (disjoint - len(sequences)) * OVERLAP_GAIN)
        bounds.append(point.design_effect * df / float(chi2.ppf(1.0 - CONFIDENCE, df)))
    high = max([1.0, *bounds])
    last = curve.curve[-1].window if curve.curve else length
    if length > last and curve.still_rising:
        high *= math.sqrt(length / last)
    return high


def pilot_estimate(source: str, sequences: Sequence[BoolArray]) -> PilotEstimate:
    """The pilot's rate, long-range design effect and uptime law, pooled over its runs (never
    joined)."""
    usable = tuple(s for s in sequences if len(s) > 0)
    if not usable:
        raise UsageError(f"pilot {source} holds no clean generations")
    curve = long_range_design_effect(list(usable))
    return PilotEstimate(source, usable, curve, fit_uptime(usable, curve.design_effect))
