"""Group-sequential boundaries against textbook values and simulation."""

from __future__ import annotations

import numpy as np
import pytest

from soakgate.errors import UsageError
from soakgate.stats.sequential import design_sequential, efficacy_boundaries, sequential_decision

FIVE_LOOKS = [0.2, 0.4, 0.6, 0.8, 1.0]


def test_textbook_five_looks() -> None:
    # Lan-DeMets O'Brien-Fleming, two-sided 0.05 (gsDesign sfLDOF / rpact asOF).
    expected = [4.877, 3.357, 2.680, 2.290, 2.031]
    assert efficacy_boundaries(FIVE_LOOKS) == pytest.approx(expected, abs=2e-3)


def test_two_looks_and_one_look() -> None:
    assert efficacy_boundaries([0.5, 1.0]) == pytest.approx([2.963, 1.969], abs=2e-3)
    assert efficacy_boundaries([1.0]) == pytest.approx([1.95996], abs=1e-4)


def test_inflation_and_expected_size() -> None:
    design = design_sequential(5)
    assert design.inflation == pytest.approx(1.026, abs=0.003)
    assert design.expected_fraction_h1 < 0.85
    assert design.expected_fraction_h0 > 0.98


def test_boundaries_hold_alpha_by_simulation() -> None:
    rng = np.random.default_rng(3)
    steps = rng.standard_normal((40_000, 5)) * np.sqrt(0.2)
    z = np.cumsum(steps, axis=1) / np.sqrt(FIVE_LOOKS)
    rejected = (np.abs(z) >= np.array(efficacy_boundaries(FIVE_LOOKS))).any(axis=1).mean()
    assert rejected == pytest.approx(0.05, abs=0.005)


def test_decisions() -> None:
    assert sequential_decision([0.2], [2.5]).action == "continue"
    assert sequential_decision([0.2, 0.4], [1.0, 3.5]).action == "reject"
    assert sequential_decision([0.5, 1.2], [1.0, 1.5]).action == "accept"
    assert sequential_decision([0.4], [0.1], futility_z=0.5).action == "accept"


def test_bad_looks() -> None:
    with pytest.raises(UsageError):
        sequential_decision([0.4, 0.2], [0.0, 0.0])
    with pytest.raises(UsageError):
        sequential_decision([0.4], [])


def test_a_t_statistic_is_judged_on_the_t_scale() -> None:
    from scipy.stats import norm
    from scipy.stats import t as student_t

    from soakgate.stats.sequential import t_boundary

    assert t_boundary(1.959964, None) == pytest.approx(1.959964)
    assert t_boundary(2.031, 10) == pytest.approx(student_t.isf(norm.sf(2.031), 10))
    assert t_boundary(4.877, 12) > 8.0  # the first look's boundary on 12 df is far out
    fractions = [0.2, 0.4, 0.6, 0.8, 1.0]
    # |t| = 2.15 at the last of five looks: beyond the z boundary 2.031, not the t(10) one.
    assert sequential_decision(fractions, [0, 0, 0, 0, 2.15]).action == "reject"
    decided = sequential_decision(fractions, [0, 0, 0, 0, 2.15], df=10.0)
    assert decided.action == "accept" and decided.boundary > 2.2 and "t(10.0)" in decided.reason


def _sequential_verdicts(name: str, reps: int, seed: int) -> list[str]:
    """What `run --until-verdict` decides for two arms of the same process (its look code)."""
    from bench.processes import by_name, sequential_verdict, simulate

    from soakgate.stats.plan import make_plan

    plan = make_plan("h", ["A", "B"], 0.002, 1.5, looks=5)
    assert plan.sequential is not None
    rule = plan.sequential
    rng = np.random.default_rng(seed)
    verdicts = []
    for _ in range(reps):
        a, b = simulate(by_name(name), rng, 2, rule.n_max_per_arm, 0.002)
        verdicts.append(sequential_verdict(plan, a, b)[0])
    return verdicts


@pytest.mark.slow
def test_sequential_looks_hold_alpha_under_the_self_exciting_process() -> None:
    # Each collapse raises the next ~200 requests' hazard (branching 0.5): 10.3% with the
    # window-robust z of old; the bench measures it over 1,000 pairs.
    verdicts = _sequential_verdicts("self-exciting", 200, seed=77)
    assert verdicts.count("differ") / 200 <= 0.08
