"""The verdict soakgate applies, on a run given as failure counts per segment.

The one-run verdict (`verdict.decide`) sees a run only through failure counts in equal
stretches of it: 12 batches for its t and 40 stretches for its correlation check. Cut the run
into 120 equal segments (120 is a multiple of both; the episodes that decide where the check
withholds are read per segment too) and those counts are sums of segment counts, so any
sequence with the same segment counts gets the same verdict. A plan's Monte
Carlo therefore simulates segment counts from a failure model and hands `decide` a short
sequence holding them (`compact_sequence`): the verdict applied is the real one, at a
fraction of the cost of a run of a million requests. (The one place the length enters is a
fallback for arms without any spread, where the binomial variance uses the rate: a tie of
every batch in both arms; `tests/stats/test_stats_segments.py` checks the verdicts against
full-length runs.)
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from soakgate.stats.dependence import CHECK_BINS
from soakgate.stats.robust import BATCHES
from soakgate.stats.verdict import EPISODE_SEGMENTS, Outcomes, Verdict, decide

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
SEGMENTS = 120  # per run (or per look of a sequential run): a multiple of BATCHES and CHECK_BINS
assert SEGMENTS % BATCHES == 0 and SEGMENTS % CHECK_BINS == 0 and SEGMENTS == EPISODE_SEGMENTS


def compact_sequence(counts: IntArray, width: int) -> BoolArray:
    """A 0/1 sequence of len(counts) segments of `width` requests each, segment i holding
    counts[i] failures (at its start: where they sit inside a segment changes no verdict)."""
    if len(counts) and int(counts.max()) > width:
        raise ValueError("a segment cannot hold more failures than requests")
    grid = np.arange(width)[None, :] < counts[:, None]
    result: BoolArray = grid.reshape(-1)
    return result


def segment_width(*runs: IntArray) -> int:
    """The narrowest segment that holds every count of these runs (at least 2)."""
    return max(2, *(int(run.max()) if len(run) else 0 for run in runs))


def one_run_verdict(
    counts_a: IntArray, counts_b: IntArray, alpha: float = 0.05, seed: int = 0
) -> Verdict:
    """`decide` for one run per arm given as segment counts (a multiple of SEGMENTS each)."""
    width = segment_width(counts_a, counts_b)
    a = compact_sequence(counts_a, width)
    b = compact_sequence(counts_b, width)
    return decide(
        Outcomes(int(counts_a.sum()), len(a), a), Outcomes(int(counts_b.sum()), len(b), b),
        alpha, seed,
    )  # fmt: skip


def side_by_side_verdict(
    counts_a: IntArray, counts_b: IntArray, alpha: float = 0.05, seed: int = 0
) -> Verdict:
    """`decide` for two arms soaked side by side (the targets of one run), given as segment
    counts over the same wall-clock span: segment i of both arms ended in window i of the 120
    the pairing cuts the common span into (`stats.paired`), so `decide` pairs them as it pairs
    a stored run's arms (the share test, the batches' t, or the one-run verdict)."""
    width = segment_width(counts_a, counts_b)
    arms = []
    for counts in (counts_a, counts_b):
        sequence = compact_sequence(counts, width)
        # request j of segment i ends at i + j / width; the last at the span's end exactly,
        # so that the pairing's window edges are the segments' (0, 1, ..., len(counts))
        times = np.repeat(np.arange(len(counts), dtype=np.float64), width)
        times += np.tile(np.arange(width, dtype=np.float64) / width, len(counts))
        times[-1] = float(len(counts))
        arms.append(Outcomes(int(counts.sum()), len(sequence), sequence, times=times))
    return decide(arms[0], arms[1], alpha, seed)


def blocks_verdict(
    counts_a: IntArray, counts_b: IntArray, length: int, alpha: float = 0.05, seed: int = 0
) -> Verdict:
    """`decide` for replicate blocks given as each block's failures (`length` counted requests
    per block): the test over blocks needs nothing else."""
    blocks_a = tuple((int(k), length) for k in counts_a)
    blocks_b = tuple((int(k), length) for k in counts_b)
    return decide(
        Outcomes(int(counts_a.sum()), length * len(counts_a), None, blocks_a),
        Outcomes(int(counts_b.sum()), length * len(counts_b), None, blocks_b),
        alpha, seed,
    )  # fmt: skip
