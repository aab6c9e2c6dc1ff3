"""Block orders: sequential and interleaved (A B B A) with repetitions."""

from __future__ import annotations

from soakgate.campaign import plan_blocks


def _labels(order: str, labels: list[str], repetitions: int) -> list[str]:
    return [b.label for b in plan_blocks("c", labels, order, repetitions)]


def test_interleaved_alternates_direction_so_mean_positions_match() -> None:
    assert _labels("interleaved", ["A", "B"], 2) == ["A", "B", "B", "A"]
    assert _labels("interleaved", ["A", "B", "C"], 3) == list("ABCCBAABC")
    blocks = plan_blocks("c", ["A", "B"], "interleaved", 4)
    positions = {label: [b.index for b in blocks if b.label == label] for label in "AB"}
    assert sum(positions["A"]) == sum(positions["B"])  # a linear drift cancels


def test_sequential_runs_every_repetition_of_a_config_together() -> None:
    assert _labels("sequential", ["A", "B"], 2) == ["A", "A", "B", "B"]


def test_block_ids_are_stable_and_unique() -> None:
    blocks = plan_blocks("camp", ["eager", "graph"], "interleaved", 2)
    assert [b.block_id for b in blocks] == [
        "camp/000-eager-r0", "camp/001-graph-r0", "camp/002-graph-r1", "camp/003-eager-r1",
    ]  # fmt: skip
    assert [b.repetition for b in blocks] == [0, 0, 1, 1]
