"""Vectorised simulators shared by the statistics tests and the sequential bench."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def independent(rng: np.random.Generator, reps: int, n: int, rate: float) -> npt.NDArray[np.bool_]:
    """`reps` independent Bernoulli(rate) sequences of length n."""
    return rng.random((reps, n)) < rate


def bursty(
    rng: np.random.Generator,
    reps: int,
    n: int,
    clean: float = 0.001,
    burst: float = 0.3,
    enter: float = 0.0002,
    leave: float = 0.05,
) -> npt.NDArray[np.bool_]:
    """Two-state Markov (clean/burst) failure sequences, vectorised over replicates."""
    flips = rng.random((reps, n))
    draws = rng.random((reps, n))
    state = rng.random(reps) < enter / (enter + leave)  # start in the stationary distribution
    out = np.empty((reps, n), dtype=bool)
    for i in range(n):
        state ^= np.where(state, flips[:, i] < leave, flips[:, i] < enter)
        out[:, i] = draws[:, i] < np.where(state, burst, clean)
    return out
