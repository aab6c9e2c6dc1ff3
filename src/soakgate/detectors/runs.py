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


def repeat_flags(text: str) -> bytes:
    """Byte i is 1 where character i+1 repeats character i (one byte fewer than the text)."""
    if len(text) < 2:
        return b""
    points = code_points(text)
    flags: bytes = (points[1:] == points[:-1]).tobytes()
    return flags


# Runs of up to this many repeats are measured by substring searches; past it the long runs
# themselves are searched for, and past _SEARCHED_RUNS of those numpy lists every run.
_SEARCHED_REPEATS = 64
_SEARCHED_RUNS = 256
_SEARCHED_RUN_LENGTH = 4096
CharRun = tuple[int, int]
"""(start, length) of a run of one character."""
CharRunSummary = tuple[int, int, list[CharRun]]
"""What `char_runs` returns: the first longest run's length and start, and the long runs."""
BATCH_CHARACTERS = 1 << 20
"""Characters `char_runs_many` measures in one array (~1-4 MB of code points)."""
CROWDED_RUNS = 16
"""A chunk where more than one character in this many repeats the one before (ordinary text:
one in ~30-40, doubled letters) is measured one by one, whose searches do not list every run:
a text of pairs (`aabbaabb...`) cost the batch ~30x per character of that."""


def longest_ones(flat: bytes, cap: int | None = None) -> tuple[int, int]:
    """Length and start of the first longest run of 1-bytes in a 0/1 byte string ((0, -1) if
    none); with `cap`, a longer run counts as `cap` long.

    Doubling then bisecting substring searches (C speed): ordinary text has only short runs, so
    this takes a handful of searches, without listing every run. Past _SEARCHED_RUN_LENGTH ones
    in a row, numpy lists the runs instead (searches for long needles get slow).
    """
    limit = len(flat) if cap is None else cap
    found, size = 0, 1  # a run of `found` ones exists; the next length to look for
    while size <= limit and b"\1" * size in flat:
        if size >= _SEARCHED_RUN_LENGTH:
            starts, lengths = true_runs(np.frombuffer(flat, dtype=np.bool_))
            capped = np.minimum(lengths, limit)
            best = int(np.argmax(capped))  # the first run of the longest (capped) length
            return int(capped[best]), int(starts[best])
        found, size = size, size * 2
    size = min(size, limit + 1)
    while size - found > 1:  # bisect: `found` ones in a row exist, `size` do not
        middle = (found + size) // 2
        if b"\1" * middle in flat:
            found = middle
        else:
            size = middle
    return (found, flat.find(b"\1" * found)) if found else (0, -1)


def char_runs(text: str, min_length: int) -> CharRunSummary:
    """The first longest run (length, start) and every run at least `min_length` long."""
    if min_length <= 1 or len(text) <= 1:
        starts, lengths = run_starts_and_lengths(code_points(text))
        return _summary([(int(s), int(n)) for s, n in zip(starts, lengths, strict=True)], 1)
    flat = repeat_flags(text)
    found, start = longest_ones(flat, _SEARCHED_REPEATS)
    if found < _SEARCHED_REPEATS and found + 1 < min_length:
        return found + 1, max(start, 0), []
    runs = _runs_by_search(flat, min(found, min_length - 1))
    if runs is None:
        starts, lengths = true_runs(np.frombuffer(flat, dtype=np.bool_))
        keep = lengths >= min(found, min_length - 1)
        runs = [(int(s), int(n) + 1) for s, n in zip(starts[keep], lengths[keep], strict=True)]
    return _summary(runs, min_length)


def char_runs_many(
    texts: Sequence[str], min_length: int, chunk: int = BATCH_CHARACTERS,
    crowded: int = CROWDED_RUNS,
) -> list[CharRunSummary]:  # fmt: skip
    """`[char_runs(text, min_length) for text in texts]`, a batch at a time: the texts' code
    points compared in one array, with the comparisons across two texts cleared, and every run
    of repeats listed once (ordinary text has a few short ones), then each text's first longest
    taken from its group of runs. A batch of the soak's 64-token answers costs about 40 % of
    them one by one (BENCHMARKS.md section 21). The texts are taken `chunk` characters at a time
    or more (a text longer than that alone), so that a batch of long answers never holds more
    than a few megabytes of arrays; a chunk where more than one character in `crowded` repeats
    the one before is measured one by one (`CROWDED_RUNS`). `min_length` <= 1 is measured one
    by one."""
    if min_length <= 1:
        return [char_runs(text, min_length) for text in texts]
    summaries: list[CharRunSummary] = []
    taken, size = 0, 0
    for index, text in enumerate(texts):
        size += len(text)
        if size >= chunk:
            summaries += _joined_char_runs(texts[taken : index + 1], min_length, crowded)
            taken, size = index + 1, 0
    if taken < len(texts):
        summaries += _joined_char_runs(texts[taken:], min_length, crowded)
    return summaries


def _joined_char_runs(texts: Sequence[str], min_length: int, crowded: int) -> list[CharRunSummary]:
    """`char_runs_many` of texts measured in one array (see there); texts of one character are
    measured one by one, as `char_runs` lists single characters there."""
    joined = "".join(texts)
    points: CodePoints = (
        np.frombuffer(joined.encode("ascii"), dtype=np.uint8)
        if joined.isascii()
        else np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    )
    lengths = np.fromiter(map(len, texts), np.intp, len(texts))
    ends = np.cumsum(lengths)
    repeats = points[1:] == points[:-1]
    joins = ends[:-1]  # repeats[end - 1] compares a text's last character with the next's first
    repeats[joins[(joins > 0) & (joins < points.shape[0])] - 1] = False
    if np.count_nonzero(repeats) * crowded > points.shape[0]:  # e.g. pairs: one by one
        return [char_runs(text, min_length) for text in texts]
    starts, counts = true_runs(repeats)
    owners = np.searchsorted(ends, starts, side="right")  # nondecreasing: runs are in order
    longest: dict[int, tuple[int, int]] = {}
    if owners.shape[0]:  # each text's runs are a group; its first longest is the first top
        groups = np.flatnonzero(np.concatenate(([True], owners[1:] != owners[:-1])))
        sizes = np.diff(np.append(groups, owners.shape[0]))
        tops = np.flatnonzero(counts == np.repeat(np.maximum.reduceat(counts, groups), sizes))
        best = tops[np.concatenate(([True], owners[tops[1:]] != owners[tops[:-1]]))]
        pairs = zip(counts[best].tolist(), starts[best].tolist(), strict=True)
        longest = dict(zip(owners[best].tolist(), pairs, strict=True))
    offsets = (ends - lengths).tolist()
    long_runs: dict[int, list[CharRun]] = {}
    kept = counts >= min_length - 1
    for owner, start, count in zip(owners[kept].tolist(), starts[kept].tolist(),
                                   counts[kept].tolist(), strict=True):  # fmt: skip
        long_runs.setdefault(owner, []).append((start - offsets[owner], count + 1))
    summaries: list[CharRunSummary] = []
    for index, text in enumerate(texts):
        if len(text) <= 1:
            summaries.append(char_runs(text, min_length))
            continue
        count, start = longest.get(index, (0, offsets[index]))
        summaries.append((count + 1, start - offsets[index], long_runs.get(index, [])))
    return summaries


def _runs_by_search(flat: bytes, repeats: int) -> list[CharRun] | None:
    """Runs of at least `repeats` repeats, found by search; None when there are too many."""
    needle, runs = b"\1" * repeats, []
    at = flat.find(needle)
    while at >= 0:
        end = flat.find(b"\0", at + repeats)
        end = len(flat) if end < 0 else end
        runs.append((at, end - at + 1))
        if len(runs) > _SEARCHED_RUNS:
            return None
        at = flat.find(needle, end)
    return runs


def _summary(runs: list[CharRun], min_length: int) -> CharRunSummary:
    """The first longest of `runs` and those at least `min_length` long."""
    if not runs:
        return 0, -1, []
    start, length = max(runs, key=lambda run: run[1])
    return length, start, [run for run in runs if run[1] >= min_length]


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


def true_runs(mask: npt.NDArray[np.bool_]) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Start and length of every run of True; costs one pass plus the number of runs."""
    # Run boundaries; runs alternate in value, starting with mask[0].
    edges = np.flatnonzero(mask[1:] != mask[:-1]) + 1
    bounds = np.empty(edges.shape[0] + 2, dtype=np.intp)
    bounds[0], bounds[-1] = 0, mask.shape[0]
    bounds[1:-1] = edges
    first = 0 if mask.shape[0] and mask[0] else 1
    starts = bounds[first:-1:2]
    return starts, bounds[first + 1 :: 2] - starts


def longest_true_run(mask: npt.NDArray[np.bool_]) -> tuple[int, int]:
    """Length and start of the first longest run of True in a boolean array ((0, -1) if none)."""
    return longest_ones(mask.tobytes())


def longest_equal_run(items: Sequence[int]) -> tuple[int, int, int]:
    """Length, value and start of the first longest run of one repeated integer ((0, -1, -1) if
    empty)."""
    if not items:
        return 0, -1, -1
    values = np.asarray(items, dtype=np.int64)
    repeats, start = longest_ones((values[1:] == values[:-1]).tobytes())
    start = max(start, 0)
    return repeats + 1, int(values[start]), start
