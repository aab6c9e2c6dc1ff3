"""The plan's Monte Carlo judges segment counts with the verdict itself: the same verdict,
p-values and correlation check as on the full-length runs those counts come from."""

from __future__ import annotations

import numpy as np
import pytest
from bench.processes import by_name, simulate

from soakgate.stats import compare_outcomes
from soakgate.stats.dependence import bin_edges
from soakgate.stats.paired import PAIRED
from soakgate.stats.segments import (
    SEGMENTS,
    blocks_verdict,
    compact_sequence,
    one_run_verdict,
    side_by_side_verdict,
)
from soakgate.stats.verdict import Outcomes, decide


def _segment_counts(seq: np.ndarray) -> np.ndarray:
    return np.add.reduceat(seq.astype(np.int64), bin_edges(len(seq), SEGMENTS)[:-1])


@pytest.mark.parametrize(("name", "n"), [("independent", 24_000), ("reset-2000", 36_000)])
def test_compact_runs_get_the_full_runs_verdict(name: str, n: int) -> None:
    rng = np.random.default_rng(7)
    runs = simulate(by_name(name), rng, 60, n, 0.003)
    for i in range(0, 60, 2):
        a, b = runs[i], runs[i + 1] | (rng.random(n) < 0.001)
        full = compare_outcomes(a, b, seed=i)
        compact = one_run_verdict(_segment_counts(a), _segment_counts(b), seed=i)
        assert compact.verdict == full.verdict
        assert compact.p_value == pytest.approx(full.p_value, rel=1e-9)
        assert compact.dependence is not None and full.dependence is not None
        assert compact.dependence.p_value == full.dependence.p_value


def test_compact_sequence_holds_the_counts() -> None:
    counts = np.array([0, 3, 1, 2], dtype=np.int64)
    seq = compact_sequence(counts, 3)
    assert len(seq) == 12 and _counts_of(seq, 4).tolist() == [0, 3, 1, 2]
    with pytest.raises(ValueError, match="cannot hold"):
        compact_sequence(counts, 2)


def _counts_of(seq: np.ndarray, parts: int) -> np.ndarray:
    return seq.reshape(parts, -1).sum(axis=1)


def test_blocks_verdict_is_compare_outcomes_on_blocks() -> None:
    rng = np.random.default_rng(3)
    for i in range(20):
        a = list(rng.random((6, 2_000)) < 0.004)
        b = list(rng.random((6, 2_000)) < 0.006)
        full = compare_outcomes(a, b, seed=i)
        counts = [np.array([int(s.sum()) for s in arm]) for arm in (a, b)]
        compact = blocks_verdict(counts[0], counts[1], 2_000, seed=i)
        assert (compact.verdict, compact.p_value, compact.design) == (
            full.verdict, full.p_value, full.design,
        )  # fmt: skip


def test_compact_runs_get_the_full_runs_verdict_on_dense_evidence() -> None:
    """Dense failures in one arm (half of 1,200 requests against 0.5%): the check often flags
    them and episodes are tried; the compact run still gets the full run's verdict."""
    tests = set()
    for i in range(60):
        a = np.random.default_rng(i).random(1_200) < 0.005
        b = np.random.default_rng(500 + i).random(1_200) < 0.5
        full = compare_outcomes(a, b, seed=i)
        compact = one_run_verdict(_segment_counts(a), _segment_counts(b), seed=i)
        assert (compact.verdict, compact.test) == (full.verdict, full.test)
        assert compact.p_value == pytest.approx(full.p_value, rel=1e-9)
        tests.add(full.test)
    assert "batch_means" in tests


def _side_by_side(seq: np.ndarray) -> Outcomes:
    """An arm of a run whose targets ran side by side, at an even pace over 120 seconds."""
    per_second = len(seq) / SEGMENTS
    times = np.arange(len(seq), dtype=np.float64) / per_second
    times[-1] = float(SEGMENTS)
    return Outcomes(int(seq.sum()), len(seq), seq, times=times)


@pytest.mark.parametrize(("name", "n"), [("independent", 24_000), ("reset-2000", 36_000)])
def test_side_by_side_segments_get_the_paired_verdict_of_full_runs(name: str, n: int) -> None:
    """`plan --side-by-side` simulates arms soaked at the same time as segment counts: `decide`
    pairs them window by window exactly as it pairs full-length arms with their completion
    times (the share test where its checks pass, else the one-run verdict)."""
    rng = np.random.default_rng(11)
    runs = simulate(by_name(name), rng, 60, n, 0.003)
    designs = set()
    for i in range(0, 60, 2):
        a, b = runs[i], runs[i + 1] | (rng.random(n) < 0.001)
        full = decide(_side_by_side(a), _side_by_side(b), seed=i)
        compact = side_by_side_verdict(_segment_counts(a), _segment_counts(b), seed=i)
        assert (compact.verdict, compact.design, compact.test) == (
            full.verdict, full.design, full.test,
        )  # fmt: skip
        assert compact.p_value == pytest.approx(full.p_value, rel=1e-9)
        designs.add(full.design)
    assert PAIRED in designs  # the pairing decided some of them
