"""Failure processes a plan can assume, as failure counts in consecutive segments of a server's
life: what `delivered` feeds the verdict when it measures a design's power.

Every model describes one server from its start (uptime 0); `counts(rng, reps, start, length,
segments, multiplier)` draws, for `reps` freshly started servers, the failures in `segments`
near-equal consecutive stretches of the requests [start, start + length) of each, with every
hazard multiplied by `multiplier` (arm B of a ratio). A block is `segments=1`; a run judged by
the verdict is `segmented.SEGMENTS` segments.

- `Independent(rate)`: every request fails on its own with probability `rate`;
- `Clustered(rate, design_effect)`: failures come in short bursts of adjacent requests (bursts
  start at random; geometric sizes with mean (design_effect + 1) / 2), so counts over any
  stretch are `design_effect` times as variable as independent ones, with no dependence
  between stretches: what `plan --design-effect` assumes.
A pilot's fitted model is in `stats.pilotmodel`.
"""

from __future__ import annotations

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
    def burst_mean(self) -> float:
        """Mean failures per burst: a geometric size with mean m has design effect 2m - 1."""
        return (self.design_effect + 1.0) / 2.0

    def counts(
        self,
        rng: np.random.Generator,
        reps: int,
        start: int,
        length: int,
        segments: int,
        multiplier: float,
    ) -> IntArray:
        """Poisson burst starts per segment, each adding a geometric number of failures."""
        sizes = segment_sizes(length, segments)
        mean = self.burst_mean
        starts = rng.poisson(sizes[None, :] * self.rate * multiplier / mean, (reps, segments))
        if mean <= 1.0:
            return starts.astype(np.int64)
        # a sum of k geometric sizes on {1, 2, ...} is k + NegativeBinomial(k, 1/mean)
        extra = np.zeros_like(starts)
        some = starts > 0
        extra[some] = rng.negative_binomial(starts[some], 1.0 / mean)
        total: IntArray = np.minimum(starts + extra, sizes[None, :]).astype(np.int64)
        return total

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
