"""The search's sequential test: its bounds hold at every look (simulated at the shipped design),
it decides where it should, and the block dispersion test sees clustered failures."""

from __future__ import annotations

import math

import numpy as np
import pytest

from soakgate.search.model import SearchSettings, design_for
from soakgate.stats.sprt import CLEAN, FAILS, block_dispersion, decide, probe_design

SHIPPED = design_for(SearchSettings("clean", "failing", 0.005), knobs=6)
"""The probe design `soakgate search` applies with its defaults, six knobs, 0.5% failing."""


def _decisions(rate: float, probes: int, block: int, seed: int) -> tuple[int, int, int]:
    """(fails, clean, truncated) over simulated probes at `rate`, looked at after every block."""
    rng = np.random.default_rng(seed)
    counts = {FAILS: 0, CLEAN: 0}
    truncated = 0
    for _ in range(probes):
        failures = answered = 0
        while True:
            failures += int(rng.binomial(block, rate))
            answered += block
            decision = decide(SHIPPED, failures, answered)
            if decision.outcome is not None:
                counts[decision.outcome] += 1
                truncated += decision.truncated
                break
    return counts[FAILS], counts[CLEAN], truncated


def test_a_clean_configuration_is_called_failing_within_its_bound_at_every_look():
    probes = 20_000
    fails, _, _ = _decisions(SHIPPED.p_clean, probes, 100, seed=1)
    bound = SHIPPED.fail_error
    assert fails / probes <= bound + 3 * math.sqrt(bound * (1 - bound) / probes)


def test_a_failing_configuration_is_called_clean_within_its_bound_at_every_look():
    probes = 20_000
    _, clean, _ = _decisions(SHIPPED.p_fail, probes, 100, seed=2)
    bound = SHIPPED.clean_error
    assert clean / probes <= bound + 3 * math.sqrt(bound * (1 - bound) / probes)


def test_decisions_at_the_rates_the_search_expects_are_right_and_never_truncated():
    fails, clean, truncated = _decisions(0.005, 500, 1000, seed=3)
    assert (fails, truncated) == (500, 0)
    fails, clean, truncated = _decisions(0.0, 500, 1000, seed=4)
    assert (clean, truncated) == (500, 0)


def test_an_undecided_probe_at_its_cap_is_decided_by_its_evidence_and_marked():
    design = probe_design(0.0, 0.005, 0.005, 0.005, max_requests=2000)
    assert decide(design, 1, 1000).outcome is None
    late = decide(design, 3, 2000)
    assert late.truncated and late.outcome in (FAILS, CLEAN)
    assert decide(design, 40, 2000).outcome == FAILS and not decide(design, 40, 2000).truncated


def test_rates_too_close_to_tell_apart_are_refused():
    with pytest.raises(ValueError, match="too close"):
        probe_design(0.004, 0.005, 0.01, 0.01)
    with pytest.raises(ValueError, match="failing rate"):
        probe_design(0.0, 1.5, 0.01, 0.01)


def test_the_dispersion_test_passes_independent_counts_and_flags_bursts():
    rng = np.random.default_rng(5)
    p_values = []
    for _ in range(400):
        groups = [[(int(rng.binomial(1000, 0.005)), 1000) for _ in range(6)] for _ in range(4)]
        found = block_dispersion(groups)
        assert found is not None
        p_values.append(found.p_value)
    assert 0.002 <= float(np.mean(np.array(p_values) < 0.05)) <= 0.10
    bursts = [[(int(rng.geometric(0.05, size=rng.poisson(0.25)).sum()), 1000) for _ in range(8)]
              for _ in range(4)]  # fmt: skip
    found = block_dispersion(bursts)
    assert found is not None and found.p_value < 0.01 and found.ratio > 3
    assert block_dispersion([[(0, 1000), (0, 1000)], [(3, 1000)]]) is None
    assert block_dispersion([[(16, 16), (16, 16)]]) is None  # always failing: no variance
