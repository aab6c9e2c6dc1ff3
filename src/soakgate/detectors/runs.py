"""Vectorised run-length primitives shared by the detectors (numpy keeps them at C speed)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

CodePoints = npt.NDArray[np.uint8] | npt.NDArray[np.uint32]


def code_points(text: str) -> CodePoints:
    """The text as an array of code points; one byte per character for ASCII text."""
    if text.isascii():
        return np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def run_starts_and_lengths(values: npt.NDArray[np.generic]) -> tuple[npt.NDArray[np.intp], ...]:
    """Start index and length of every maximal run of equal values."""
    size = values.shape[0]
    if size == 0:
        empty = np.zeros(0, dtype=np.intp)
        return empty, empty
    boundaries = np.flatnonzero(values[1:] != values[:-1]) + 1
    starts = np.concatenate(([0], boundaries)).astype(np.intp)
    lengths = np.diff(np.concatenate((starts, [size]))).astype(np.intp)
    return starts, lengths


def longest_true_run(mask: npt.NDArray[np.bool_]) -> tuple[int, int]:
    """Length and start of the longest run of True in a boolean array ((0, -1) if none)."""
    if not mask.any():
        return 0, -1
    padded = np.concatenate(([False], mask, [False])).view(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    starts, ends = edges[0::2], edges[1::2]
    best = int(np.argmax(ends - starts))
    return int(ends[best] - starts[best]), int(starts[best])


def longest_equal_run(items: Sequence[int]) -> tuple[int, int, int]:
    """Length, value and start of the longest run of one repeated integer ((0, -1, -1) if empty)."""
    if not items:
        return 0, -1, -1
    values = np.asarray(items, dtype=np.int64)
    starts, lengths = run_starts_and_lengths(values)
    best = int(np.argmax(lengths))
    return int(lengths[best]), int(values[starts[best]]), int(starts[best])
