"""The replay's classification (pure): a collapse seen once in five replays under load against a
background soak collapsing at the same 2% is no evidence of load (issue 27's case); the runs
test is exact; the state-driven class needs the control to collapse too."""

from __future__ import annotations

import itertools

import pytest

from soakgate.probes.reproduce import (
    AS_OTHERS,
    INPUT_TRIGGERED,
    NEVER,
    NO_ANSWER,
    STATE_DRIVEN,
    UNDER_LOAD,
    Evidence,
    Tally,
    classify,
    runs_test_p,
)


def tally(collapsed: int, clean: int, errors: int = 0) -> Tally:
    return Tally(clean + errors, collapsed, errors)


def evidence(**changes: object) -> Evidence:
    """Ten rows at 2% everywhere: the row itself 0/10 alone, 1/5 under load (issue 27)."""
    values: dict[str, object] = {
        "alone": tally(0, 10), "control_alone": tally(1, 50), "under_load": tally(1, 5),
        "load_pool": tally(7, 350), "alone_pool": tally(3, 150), "state_p": 0.6,
        "rows": 10, "runs": 1,
    }  # fmt: skip
    values.update(changes)
    return Evidence(**values)  # type: ignore[arg-type]


def test_one_collapse_under_load_at_the_background_rate_is_not_only_under_load() -> None:
    judged = classify(evidence())
    assert judged.verdict == AS_OTHERS
    assert judged.load_p > judged.thresholds["load"]


def test_the_load_verdict_needs_the_server_to_collapse_more_under_load_than_alone() -> None:
    judged = classify(evidence(load_pool=tally(100, 350), alone_pool=tally(0, 150)))
    assert judged.verdict == UNDER_LOAD and judged.load_p < 1e-9


def test_input_triggered_needs_more_collapses_alone_than_the_control() -> None:
    assert classify(evidence(alone=tally(9, 10))).verdict == INPUT_TRIGGERED
    same = classify(evidence(alone=tally(9, 10), control_alone=tally(45, 50)))
    assert same.verdict == AS_OTHERS and same.input_p > 0.5


def test_state_driven_needs_runs_and_the_control_collapsing() -> None:
    assert classify(evidence(state_p=1e-6)).verdict == STATE_DRIVEN
    assert classify(evidence(state_p=1e-6, control_alone=tally(0, 50))).verdict == AS_OTHERS


def test_too_few_answers_is_inconclusive_and_no_collapse_is_never() -> None:
    assert classify(evidence(under_load=tally(0, 2, errors=3))).verdict == NO_ANSWER
    assert classify(evidence(control_alone=tally(0, 0, errors=50))).verdict == NO_ANSWER
    assert classify(evidence(under_load=tally(0, 5))).verdict == NEVER


@pytest.mark.parametrize("n, k", [(8, 3), (10, 4), (9, 1), (7, 6)])
def test_the_runs_test_is_the_exact_share_of_orders_with_as_few_runs(n: int, k: int) -> None:
    orders = [tuple(i in ones for i in range(n)) for ones in itertools.combinations(range(n), k)]

    def runs(order: tuple[bool, ...]) -> int:
        return 1 + sum(a != b for a, b in itertools.pairwise(order))

    for observed in orders[:: max(1, len(orders) // 15)]:
        expected = sum(runs(o) <= runs(observed) for o in orders) / len(orders)
        assert runs_test_p(list(observed)) == pytest.approx(expected, rel=1e-12)
    assert runs_test_p([True] * 5) == runs_test_p([False] * 5) == 1.0
