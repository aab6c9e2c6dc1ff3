"""The power a design delivers, by simulating the verdict soakgate applies: it agrees with
full-length soaks, sizes are the smallest that reach the power, and looks keep their promise."""

from __future__ import annotations

import math

import numpy as np
import pytest
from bench.processes import by_name, simulate_pair

from soakgate.stats import compare_outcomes
from soakgate.stats.delivered import Blocks, OneRun, SequentialRun, delivered
from soakgate.stats.models import Clustered, Independent, assumed_model
from soakgate.stats.sizing import size_blocks, size_one_run, size_sequential


def _full_length(n: int, reps: int, seed: int) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(reps):
        (a,), (b,) = simulate_pair(by_name("independent"), rng, 1, n, 0.004, 0.006)
        hits += compare_outcomes(a, b).differ
    share = hits / reps
    return share, math.sqrt(share * (1 - share) / reps)


def test_simulated_power_is_the_full_length_verdicts() -> None:
    got = delivered(Independent(0.004), OneRun(12_000), 1.5, reps=600)
    full, error = _full_length(12_000, 600, seed=41)
    assert abs(got.power - full) <= 2.5 * math.hypot(got.standard_error, error)
    assert 0.3 < got.power < 0.8 and got.indeterminate > 0.0  # the check's price, counted


def test_sizes_are_the_smallest_that_reach_the_power() -> None:
    model = Independent(0.01)
    one = size_one_run(model, 0.01, 2.0, 0.05, 0.8)
    assert isinstance(one.design, OneRun) and one.reached
    smaller = delivered(model, OneRun(int(one.design.n * 0.8)), 2.0, reps=800)
    assert smaller.power < 0.8
    blocks = size_blocks(model, 0.01, 2.0, 0.05, 0.8, 8, None)
    assert isinstance(blocks.design, Blocks) and blocks.design.blocks == 8 and blocks.reached
    shorter = Blocks(8, int(blocks.design.length * 0.8))
    assert delivered(model, shorter, 2.0, reps=1200).power < 0.8


def test_false_alarms_of_every_design_stay_at_alpha() -> None:
    for model in (Independent(0.01), Clustered(0.01, 4.0)):
        for design in (OneRun(6_000), Blocks(8, 800)):
            got = delivered(model, design, 1.0, reps=800)
            assert got.power <= 0.05 + 2.5 * got.standard_error


def test_short_bursts_cost_as_much_as_their_design_effect() -> None:
    plain = size_blocks(assumed_model(0.01, 1.0), 0.01, 2.0, 0.05, 0.8, 8, None).design
    bursty = size_blocks(assumed_model(0.01, 4.0), 0.01, 2.0, 0.05, 0.8, 8, None).design
    assert isinstance(plain, Blocks) and isinstance(bursty, Blocks)
    assert bursty.length == pytest.approx(4 * plain.length, rel=0.2)


@pytest.mark.slow
def test_looks_stop_early_at_the_planned_effect_and_keep_their_power() -> None:
    # README's effect, 0.2% vs 0.3%: n max sized for the looks' own t and check; at the
    # planned effect they stop after at most 3/4 of the fixed design's n on average.
    model = Independent(0.002)
    looks = size_sequential(model, 0.002, 1.5, 0.05, 0.8, 5)
    fixed = size_one_run(model, 0.002, 1.5, 0.05, 0.8)
    assert isinstance(looks.design, SequentialRun) and isinstance(fixed.design, OneRun)
    assert looks.reached and looks.delivered.mean_n <= 0.75 * fixed.design.n
    null = delivered(model, looks.design, 1.0, reps=500)
    assert null.power <= 0.05 + 2.5 * null.standard_error
    # what plan printed before: the z design's n inflated by O'Brien-Fleming's 2.5%, which the
    # looks' t and check take to 72-77% (BENCHMARKS.md, sections 7 and 12)
    assert looks.design.rule.n_max_per_arm > 40_114
