"""The differential check finds the mock's perturbed generations exactly, and nothing else."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from soakgate.load import LoadSpec
from soakgate.load.runner import SoakConfig, run_soak
from soakgate.mockserver.process import MockProcess
from soakgate.probes.differential import first_divergence, is_sampled
from soakgate.probes.soak import StandardProbes
from soakgate.stats.rates import summarize_rate
from soakgate.store import open_store
from soakgate.targets import RequestSpec, TargetSpec


def differential_soak(target: MockProcess, references: list[MockProcess], db: Path) -> str:
    config = SoakConfig(
        probes=StandardProbes(),
        targets=[TargetSpec.parse(f"compiled={target.url}")], label="compiled",
        request=RequestSpec(max_tokens=48, return_token_ids=True), load=LoadSpec(8, requests=300),
        db=db, references=[TargetSpec.parse(r.url) for r in references], reference_fraction=0.5,
    )  # fmt: skip
    return run_soak(config).run.run_id


def test_perturbed_generations_are_found_at_the_configured_rate(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    target = start_mock("--seed", "3", "--perturb-rate", "0.2")
    reference = start_mock("--seed", "4")
    db = tmp_path / "d.sqlite"
    run_id = differential_soak(target, [reference], db)
    truth = {row["request_id"]: row for row in target.ground_truth()}
    store = open_store(db)
    rows = list(store.generations(run_id))
    (baseline,) = [e for e in store.events(run_id) if e.kind == "reference_baseline"]
    store.close()
    assert baseline.data["informative"] and baseline.data["divergent"] == 0
    compared = [g for g in rows if g.reference_divergence is not None]
    assert 100 < len(compared) < 200  # about half of 300 sampled
    for g in compared:
        perturbed = truth[g.request_id]["perturbed"] > 0
        assert (g.reference_divergence >= 0) == perturbed, g.request_id
    divergent = sum(g.reference_divergence >= 0 for g in compared)
    # Which rows are compared depends on the soak's timing, so the count is a binomial draw: a
    # 95% interval would miss 0.2 in one run in twenty. The exact bijection above is the real
    # check; this one only catches a rate far from the configured one (false failure 1e-6).
    rate = summarize_rate(divergent, len(compared), confidence=1 - 1e-6)
    assert rate.ci_low <= 0.2 <= rate.ci_high
    assert all(g.details["differential"]["greedy"] for g in compared)
    assert all("differential" not in g.details for g in rows if g.reference_divergence is None)


def test_identical_deterministic_mocks_never_diverge(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    target, reference = start_mock("--seed", "1"), start_mock("--seed", "2")
    db = tmp_path / "d.sqlite"
    run_id = differential_soak(target, [reference], db)
    store = open_store(db)
    compared = [g.reference_divergence for g in store.generations(run_id)]
    store.close()
    assert [d for d in compared if d is not None and d >= 0] == []
    assert sum(d is not None for d in compared) > 100


def test_nondeterministic_reference_makes_the_baseline_uninformative(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    target = start_mock("--seed", "1")
    steady, shaky = start_mock("--seed", "2"), start_mock("--seed", "3", "--perturb-rate", "1")
    db = tmp_path / "d.sqlite"
    run_id = differential_soak(target, [steady, shaky], db)
    store = open_store(db)
    (baseline,) = [e for e in store.events(run_id) if e.kind == "reference_baseline"]
    store.close()
    assert baseline.data["divergent"] > 0 and not baseline.data["informative"]


def test_every_compared_row_keeps_the_references_repeat_and_the_baseline_its_positions(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    """The reference's own nondeterminism is measured beside every comparison (issue 25): the
    reference is asked again, and where its second answer first diverged from its first is
    kept; the before-soak baseline keeps where each of its pairs diverged."""
    target = start_mock("--seed", "1")
    reference = start_mock("--seed", "2", "--perturb-rate", "0.3", "--perturb-from", "8")
    db = tmp_path / "d.sqlite"
    run_id = differential_soak(target, [reference], db)
    store = open_store(db)
    rows = list(store.generations(run_id))
    (baseline,) = [e for e in store.events(run_id) if e.kind == "reference_baseline"]
    store.close()
    compared = [g for g in rows if g.reference_divergence is not None]
    marks = [g.details["differential"] for g in compared]
    assert len(compared) > 100 and all(m["unit"] == "tokens" for m in marks)
    repeats = [m["reference_repeat"] for m in marks]
    assert all(r == -1 or r >= 8 for r in repeats)  # the reference only diverges late
    assert 0.3 * len(repeats) < sum(r >= 8 for r in repeats) < 0.7 * len(repeats)
    positions = baseline.data["positions"]
    assert len(positions) == baseline.data["pairs"]
    assert sum(p >= 0 for p in positions) == baseline.data["divergent"]


def test_a_reference_without_a_models_route_works_when_the_model_is_given(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    from tests.command_line import soakgate

    target = start_mock("--seed", "1")
    reference = start_mock("--seed", "2", "--quirk", "no-models")
    argv = ["run", "--target", target.url, "--reference", reference.url, "--requests", "30",
            "--reference-fraction", "1", "--no-watch-metrics", "--quiet", "--token-ids"]  # fmt: skip
    given_model = soakgate(*argv, "--model", "soakgate-mock", "--db", "m.sqlite", cwd=tmp_path)
    assert given_model.returncode == 0, given_model.stderr
    store = open_store(tmp_path / "m.sqlite")
    compared = [g for g in store.generations() if g.reference_divergence is not None]
    store.close()
    assert len(compared) == 30 and all(g.reference_divergence == -1 for g in compared)
    discovered = soakgate(*argv, "--db", "d.sqlite", cwd=tmp_path)
    assert discovered.returncode == 2 and discovered.stderr.count("\n") == 1, discovered.stderr


@given(st.lists(st.integers(0, 3)), st.lists(st.integers(0, 3)))
def test_first_divergence_matches_definition(a: list[int], b: list[int]) -> None:
    position = first_divergence(a, b)
    if a == b:
        assert position == -1
    else:
        assert a[:position] == b[:position]
        assert position == min(len(a), len(b)) or a[position] != b[position]


def test_sampling_is_reproducible_and_near_the_fraction() -> None:
    picks = [is_sampled(seq, 0.1, seed=5) for seq in range(5000)]
    assert picks == [is_sampled(seq, 0.1, seed=5) for seq in range(5000)]
    assert 400 < sum(picks) < 600
    assert not any(is_sampled(seq, 0.0) for seq in range(100))
