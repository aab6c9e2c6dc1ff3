"""Exact rate intervals against textbook values and as properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from soakgate.errors import UsageError
from soakgate.stats.rates import clopper_pearson, summarize_rate, zero_event_upper_bound


def test_clopper_pearson_zero_of_hundred() -> None:
    low, high = clopper_pearson(0, 100)
    assert low == 0.0
    assert high == pytest.approx(0.036217, abs=1e-6)  # 1 - 0.025**(1/100)


def test_clopper_pearson_five_of_thousand() -> None:
    low, high = clopper_pearson(5, 1000)
    assert low == pytest.approx(0.0016254, abs=1e-7)
    assert high == pytest.approx(0.0116295, abs=1e-7)


def test_all_events_reaches_one() -> None:
    assert clopper_pearson(7, 7)[1] == 1.0


def test_zero_event_bound_is_exact_rule_of_three() -> None:
    assert zero_event_upper_bound(100) == pytest.approx(0.0295130, abs=1e-7)
    assert zero_event_upper_bound(30000) == pytest.approx(3 / 30000, rel=0.01)


def test_summary_has_one_sided_bound_only_for_zero_events() -> None:
    assert summarize_rate(0, 500).upper_bound_one_sided is not None
    summary = summarize_rate(3, 500)
    assert summary.upper_bound_one_sided is None
    assert summary.rate == pytest.approx(0.006)


@pytest.mark.parametrize(("events", "n"), [(-1, 10), (11, 10), (0, 0)])
def test_bad_counts(events: int, n: int) -> None:
    with pytest.raises(UsageError):
        clopper_pearson(events, n)


@given(st.integers(1, 10**6).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_interval_contains_estimate_within_unit(counts: tuple[int, int]) -> None:
    events, n = counts
    summary = summarize_rate(events, n)
    assert 0.0 <= summary.ci_low <= summary.rate <= summary.ci_high <= 1.0
