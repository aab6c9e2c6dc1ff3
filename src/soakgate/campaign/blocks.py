"""Block planning: which configuration runs when, so drift cannot pose as a config effect."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Block:
    """One configuration soaked once on every device (one run in the store)."""

    index: int
    """Position in the campaign, from 0."""
    label: str
    """Configuration label."""
    repetition: int
    """Which repetition of this configuration, from 0."""
    block_id: str
    """Stable id `NAME/INDEX-LABEL-rREP`, stored as the run's `campaign` field."""


def plan_blocks(name: str, labels: Sequence[str], order: str, repetitions: int) -> list[Block]:
    """Blocks in run order.

    `sequential`: every repetition of the first config, then the next (A A B B).
    `interleaved`: rounds in alternating direction (A B B A A B ...), so each config's mean
    position in time is the same and a linear drift cancels out of the comparison.
    """
    if order == "sequential":
        sequence = [(label, rep) for label in labels for rep in range(repetitions)]
    elif order == "interleaved":
        sequence = [
            (label, rep)
            for rep in range(repetitions)
            for label in (labels if rep % 2 == 0 else list(reversed(labels)))
        ]
    else:
        raise ValueError(f"unknown order {order!r}")
    return [
        Block(index, label, rep, f"{name}/{index:03d}-{label}-r{rep}")
        for index, (label, rep) in enumerate(sequence)
    ]
