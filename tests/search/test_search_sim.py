"""The search as `soakgate search` runs it (its own walk), simulated with the shipped defaults:
its error bounds hold where they are tightest, the clustering warning covers what they do not,
and it costs far less than the full factorial at the same bounds."""

from __future__ import annotations

import math

import pytest

from soakgate.search.model import SearchSettings, design_for
from soakgate.search.plan import Scenario, simulate_factorial, simulate_search

SETTINGS = SearchSettings("clean", "failing", 0.005)
DESIGN = design_for(SETTINGS, knobs=6)
SEARCHES = 1500


def _within(rate: float, bound: float) -> bool:
    return rate <= bound + 3 * math.sqrt(bound * (1 - bound) / SEARCHES)


@pytest.mark.parametrize("needed", [(2,), (0, 5), (0, 2, 4)])
def test_at_the_bounds_a_knob_that_does_not_matter_is_named_within_false_knob(needed):
    scenario = Scenario(6, needed, DESIGN.p_fail, DESIGN.p_clean, 1000)
    found = simulate_search(DESIGN, scenario, SEARCHES, seed=len(needed))
    assert _within(found.extra, SETTINGS.false_knob)
    assert _within(found.missed, SETTINGS.missed_knob)
    assert found.exact >= 0.9


def test_clustered_failures_name_a_wrong_knob_unwarned_within_false_knob():
    scenario = Scenario(6, (0, 5), 0.005, 0.0, 1000, burst=5.0)
    found = simulate_search(DESIGN, scenario, SEARCHES, seed=11)
    assert found.extra > SETTINGS.false_knob  # the bound alone does not hold under bursts ...
    assert _within(found.extra_unwarned, SETTINGS.false_knob)  # ... the warning covers it
    assert found.warned > 0.5


def test_independent_failures_are_rarely_warned_of_clustering():
    found = simulate_search(DESIGN, Scenario(6, (0, 5), 0.005, 0.0, 1000), SEARCHES, seed=12)
    assert found.exact > 0.99 and _within(found.warned, 0.01 * 3)


def test_the_search_costs_under_half_the_full_factorial_at_the_same_bounds():
    scenario = Scenario(6, (1, 4), 0.005, 0.0, 1000)
    found = simulate_search(DESIGN, scenario, 300, seed=13)
    factorial, _, exact = simulate_factorial(scenario, SETTINGS.false_knob, SETTINGS.missed_knob,
                                             SETTINGS.reproduce, 1.0, 20, seed=13)  # fmt: skip
    assert found.requests <= 0.5 * factorial and exact == 1.0
