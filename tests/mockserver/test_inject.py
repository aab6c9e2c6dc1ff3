"""The injection model: Bernoulli rates, Markov bursts, exclusivity, and config validation."""

from __future__ import annotations

from itertools import groupby, pairwise

import pytest
from scipy.stats import binomtest

from soakgate.errors import UsageError
from soakgate.mockserver.config import MockConfig, parse_weights
from soakgate.mockserver.inject import Injector


def draw(config: MockConfig, n: int) -> list[tuple[str | None, str | None, bool, bool]]:
    injector = Injector(config)
    return [
        (d.injected, d.fault, d.perturb, d.burst) for d in (injector.decide() for _ in range(n))
    ]


def test_collapse_rate_is_consistent_with_configured_rate() -> None:
    decisions = draw(MockConfig(collapse_rate=0.05, seed=7), 20_000)
    collapses = sum(d[0] is not None for d in decisions)
    assert binomtest(collapses, len(decisions), 0.05).pvalue > 0.001
    kinds = {d[0] for d in decisions if d[0]}
    assert kinds == {"bang_run", "word_loop", "empty"}


def test_collapse_kind_weights_are_honoured() -> None:
    config = MockConfig(collapse_rate=1.0, collapse_kinds={"bang_run": 3.0, "empty": 1.0})
    kinds = [d[0] for d in draw(config, 4000)]
    assert set(kinds) == {"bang_run", "empty"}
    assert binomtest(kinds.count("bang_run"), len(kinds), 0.75).pvalue > 0.001


def test_fault_rates_and_exclusivity() -> None:
    config = MockConfig(fault_rates={"http_500": 0.1, "reset": 0.05}, collapse_rate=0.2)
    decisions = draw(config, 20_000)
    assert not any(d[0] and d[1] for d in decisions)
    http_500 = sum(d[1] == "http_500" for d in decisions)
    assert binomtest(http_500, len(decisions), 0.1).pvalue > 0.001
    non_fault = [d for d in decisions if d[1] is None]
    collapses = sum(d[0] is not None for d in non_fault)
    assert binomtest(collapses, len(non_fault), 0.2).pvalue > 0.001


def test_bursts_cluster_collapses() -> None:
    config = MockConfig(burst_enter=0.01, burst_exit=0.1, burst_collapse_rate=0.8, seed=3)
    decisions = draw(config, 20_000)
    burst_runs = [len(list(g)) for flag, g in groupby(d[3] for d in decisions) if flag]
    # Geometric run lengths with exit 0.1: mean 10.
    assert 7 < sum(burst_runs) / len(burst_runs) < 14
    collapsed = [d[0] is not None for d in decisions]
    assert all(d[3] for d in decisions if d[0])  # clean-state rate is 0
    rate = sum(collapsed) / len(collapsed)
    after_collapse = [b for a, b in pairwise(collapsed) if a]
    assert sum(after_collapse) / len(after_collapse) > 5 * rate


def test_perturbations_only_on_clean_requests() -> None:
    decisions = draw(MockConfig(perturb_rate=0.3, collapse_rate=0.3), 5000)
    assert not any(d[0] and d[2] for d in decisions)
    clean = [d for d in decisions if d[0] is None]
    assert binomtest(sum(d[2] for d in clean), len(clean), 0.3).pvalue > 0.001


def test_same_seed_same_decisions() -> None:
    config = MockConfig(collapse_rate=0.1, burst_enter=0.05, perturb_rate=0.1, seed=11)
    assert draw(config, 500) == draw(config, 500)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"collapse_rate": 1.5},
        {"fault_rates": {"http_500": 0.7, "reset": 0.7}},
        {"port": 70000},
        {"quirks": frozenset({"nope"})},
        {"tokens_per_s": -1.0},
    ],
)
def test_bad_values_are_usage_errors(kwargs: dict[str, object]) -> None:
    with pytest.raises(UsageError):
        MockConfig(**kwargs)  # type: ignore[arg-type]


def test_parse_weights() -> None:
    known = ("a", "b")
    assert parse_weights("a,b=2", known, "--x", 1.0) == {"a": 1.0, "b": 2.0}
    with pytest.raises(UsageError):
        parse_weights("c=1", known, "--x", 1.0)
    with pytest.raises(UsageError):
        parse_weights("a=z", known, "--x", 1.0)
