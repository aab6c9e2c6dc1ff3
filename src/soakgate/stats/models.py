"""Failure processes a plan can assume, as failure counts in consecutive segments of a server's
life: what `delivered` feeds the verdict when it measures a design's power.

Every model describes one server from its start (uptime 0); `counts(rng, reps, start, length,
segments, multiplier)` draws, for `reps` freshly started servers, the failures in `segments`
near-equal consecutive stretches of the requests [start, start + length) of each, with every
hazard multiplied by `multiplier` (arm B of a ratio). A block is `segments=1`; a run judged by
the verdict is `segmented.SEGMENTS` segments.

- `Independent(rate)`: every request fails on its own with probability `rate`;
- `Clustered(rate, design_effect)`: failures come in short bursts of adjacent requests, so
  counts over any stretch are `design_effect` times as variable as independent ones, with no
  dependence between stretches: what `plan --design-effect` assumes. Bursts start at random
  and all have the same size, design_effect (or the two sizes around it, mixed to give it):
  the lumpiest bursts with that design effect. Measured on 5-row bursts, geometric sizes with
  the same design effect promised 81.4% for blocks that delivered 76.4 +- 1.3%.
A pilot's fitted model is in `stats.pilotmodel`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from soakgate.stats.dependence import bin_edges

IntArray = npt.NDArray[np.int64]


class FailureModel(Protocol):
    """A failure process a plan can simulate (hashable: simulations are cached by model)."""

    def __hash__(self) -> int:
        """Models are frozen dataclasses."""
        ...

    def counts(
        self,
        rng: np.random.Generator,
        reps: int,
        start: int,
        length: int,
        segments: int,
        multiplier: float,
    ) -> IntArray:
        """(reps, segments) failures in consecutive stretches of [start, start + length)."""
        ...

    def describe(self) -> str:
        """The process in words, for the line `plan` prints."""
        ...


def segment_sizes(length: int, segments: int) -> IntArray:
    """Requests in each of `segments` near-equal consecutive stretches of `length` (as the
    verdict's own batches cut a run)."""
    sizes: IntArray = np.diff(bin_edges(length, segments))
    if len(sizes) < segments:  # fewer requests than segments: the rest are empty
        sizes = np.concatenate([sizes, np.zeros(segments - len(sizes), dtype=np.int64)])
    return sizes


@dataclass(frozen=True, slots=True)
class Independent:
    """Every request fails independently with probability `rate`."""

    rate: float

    def counts(
        self,
        rng: np.random.Generator,
        reps: int,
        start: int,
        length: int,
        segments: int,
        multiplier: float,
    ) -> IntArray:
        """Binomial counts per segment."""
        sizes = segment_sizes(length, segments)
        hazard = min(1.0, self.rate * multiplier)
        drawn: IntArray = rng.binomial(sizes[None, :], hazard, (reps, segments)).astype(np.int64)
        return drawn

    def describe(self) -> str:
        """One phrase."""
        return f"independent requests failing at {self.rate:g}"


@dataclass(frozen=True, slots=True)
class Clustered:
    """Short bursts of adjacent failures making counts `design_effect` times as variable."""

    rate: float
    design_effect: float

    @property
    def sizes(self) -> tuple[int, float]:
        """(k, q): bursts of k failures, or k + 1 with probability q, so that E[S^2] / E[S],
        the design effect of bursts that start at random, is `design_effect`."""
        k = max(1, math.floor(self.design_effect))
        q = k * (self.design_effect - k) / (2 * k + 1 - self.design_effect)
        return k, min(max(q, 0.0), 1.0)

    def counts(
        self,
        rng: np.random.Generator,
        reps: int,
        start: int,
        length: int,
        segments: int,
        multiplier: float,
    ) -> IntArray:
        """Poisson burst starts per segment, each adding k or k + 1 failures."""
        sizes = segment_sizes(length, segments)
        k, q = self.sizes
        mean = k + q
        bursts = rng.poisson(sizes[None, :] * self.rate * multiplier / mean, (reps, segments))
        total = k * bursts + rng.binomial(bursts, q)
        clipped: IntArray = np.minimum(total, sizes[None, :]).astype(np.int64)
        return clipped

    def describe(self) -> str:
        """One phrase."""
        return (
            f"failures at {self.rate:g} in short bursts (design effect {self.design_effect:g}, "
            "no dependence between stretches of the run)"
        )


def assumed_model(rate: float, design_effect: float) -> Independent | Clustered:
    """The model a plan without a pilot assumes."""
    if design_effect <= 1.0:
        return Independent(rate)
    return Clustered(rate, design_effect)
