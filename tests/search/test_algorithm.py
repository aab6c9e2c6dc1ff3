"""The adaptive group test: exact on every interaction of needed knobs, within its probe bound."""

from __future__ import annotations

import itertools

from soakgate.search.algorithm import max_probes, run_sync


def test_names_exactly_the_needed_knobs_for_every_needed_set_within_the_bound():
    for count in range(1, 8):
        for size in range(1, count + 1):
            for needed in itertools.combinations(range(count), size):
                want = set(needed)
                named, asked = run_sync(count, lambda s, want=want: want <= s)
                assert set(named) == want, (count, needed)
                assert len(asked) <= max_probes(count)


def test_far_fewer_probes_than_configurations_when_few_knobs_matter():
    named, asked = run_sync(16, lambda s: {3, 11} <= s)
    assert named == (3, 11) and len(asked) < 16 < 2**16


def test_a_failure_any_one_of_several_knobs_causes_is_traced_to_one_of_them():
    named, _ = run_sync(6, lambda s: bool({1, 4} & s))
    assert named in ((1,), (4,))


def test_a_wrong_answer_can_only_grow_or_shrink_the_set_it_names():
    want = {0, 5}
    asked_first = []

    def liar(subset: frozenset[int]) -> bool:
        asked_first.append(subset)
        return False if len(asked_first) == 1 else want <= subset  # first failing probe wrong

    named, _ = run_sync(6, liar)
    assert want <= set(named)  # a failing set called clean keeps knobs, never loses one
