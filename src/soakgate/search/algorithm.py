"""The adaptive group test of a configuration search: which knobs must change for the failure.

Junker's QuickXplain (AAAI 2004), written here as a generator so one definition drives both the
soak (`search.runner`) and the simulations (`search.plan`): it yields a set of knob indexes to
try (those knobs at their failing values, the rest clean) and is sent back True when that
configuration fails. Given a clean baseline and a failing configuration with every knob changed,
and a failure that appears whenever the knobs it needs are all changed (any of them alone or in
part may do nothing: an interaction), it returns a minimal set of knobs whose change reproduces
it, with about 2 k log2(K / k) + 2 k probes for k needed knobs of K, and never more than
2 K - 2. A probe decided wrongly can make the answer too large (a failing set called clean keeps
a knob) or too small (a clean set called failing drops one); `search.runner` bounds both.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

Probe = Generator[tuple[frozenset[int], int], bool, tuple[int, ...]]
"""Yields the knob set to try and its depth in the search tree (the recursion's, from 0); is
sent whether it fails; returns the knobs it needs."""


def max_probes(knobs: int) -> int:
    """The most probes `minimal_knobs` can ask for over `knobs` knobs, whatever the answers."""
    return max(0, 2 * knobs - 2)


def minimal_knobs(knobs: int) -> Probe:
    """A minimal set of the knobs 0..knobs-1 whose change makes the configuration fail
    (the failing configuration, all of them changed, is taken to fail; none changed, not)."""
    if knobs < 1:
        return ()
    found = yield from _explain((), False, tuple(range(knobs)), 0)
    return tuple(sorted(found))


def _explain(
    background: tuple[int, ...], added: bool, candidates: tuple[int, ...], depth: int
) -> Probe:
    """QuickXplain's step: the candidates needed beside `background` (which fails, if `added`
    knobs were just put into it, when none of the candidates is needed)."""
    if added and (yield frozenset(background), depth):
        return ()
    if len(candidates) == 1:
        return candidates
    half = len(candidates) // 2
    first, second = candidates[:half], candidates[half:]
    needed_second = yield from _explain(background + first, True, second, depth + 1)
    needed_first = yield from _explain(background + needed_second, bool(needed_second), first,
                                       depth + 1)  # fmt: skip
    return needed_first + needed_second


def run_sync(
    knobs: int, fails: Callable[[frozenset[int]], bool]
) -> tuple[tuple[int, ...], list[frozenset[int]]]:
    """Drive the search with `fails(set)`: the knobs it names and the sets it asked about."""
    asked: list[frozenset[int]] = []
    search = minimal_knobs(knobs)
    try:
        subset, _ = next(search)
        while True:
            asked.append(subset)
            subset, _ = search.send(fails(subset))
    except StopIteration as done:
        return tuple(done.value), asked
