"""Vectorised random k-subsets of positions: the permutation null of a 0/1 sequence; and the
Monte Carlo p-value of a statistic against such a null."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
TIES = 1e-12
"""A replicate within this of the observed statistic counts as reaching it (float noise)."""


def monte_carlo_p(null: npt.ArrayLike, observed: float) -> float:
    """(1 + replicates at or above `observed`) / (1 + replicates): the exact p-value of a
    Monte Carlo test (the observed statistic counted as one of the null's draws)."""
    replicated = np.asarray(null, dtype=np.float64)
    return (1 + int((replicated >= observed - TIES).sum())) / (1 + replicated.size)


def random_subsets(rng: np.random.Generator, n: int, k: int, replicates: int) -> IntArray:
    """`replicates` uniformly random sorted k-subsets of range(n), one per row."""
    if k == 0:
        return np.empty((replicates, 0), dtype=np.int64)
    if 4 * k > n:
        keys = rng.random((replicates, n))
        chosen = np.argpartition(keys, k - 1, axis=1)[:, :k]
        return np.sort(chosen, axis=1).astype(np.int64)
    # Sampling with replacement and dropping repeats in draw order is sampling without
    # replacement; it touches only ~k numbers per row instead of a full permutation of n.
    width = k + int(3 * k * k / n) + 16
    out = np.empty((replicates, k), dtype=np.int64)
    todo = np.arange(replicates)
    while todo.size:
        draws = rng.integers(0, n, size=(todo.size, width))
        order = np.argsort(draws, axis=1, kind="stable")
        ordered = np.take_along_axis(draws, order, axis=1)
        repeat_sorted = np.zeros(ordered.shape, dtype=bool)
        repeat_sorted[:, 1:] = ordered[:, 1:] == ordered[:, :-1]
        repeat = np.empty_like(repeat_sorted)
        np.put_along_axis(repeat, order, repeat_sorted, axis=1)
        kept = np.cumsum(~repeat, axis=1)
        take = ~repeat & (kept <= k)
        full = kept[:, -1] >= k
        rows = np.nonzero(full)[0]
        out[todo[rows]] = draws[rows][take[rows]].reshape(-1, k)
        todo = todo[~full]
    return np.sort(out, axis=1)
