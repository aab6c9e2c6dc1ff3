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
