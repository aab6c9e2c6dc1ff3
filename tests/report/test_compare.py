"""Comparisons from a database: arms, unit match, Holm families and registered plans."""

from __future__ import annotations

from pathlib import Path

import pytest
from statsmodels.stats.multitest import multipletests
from tests.report.synth import add_run, bernoulli, bursty

from soakgate.cli.main import main
from soakgate.errors import PlanError, UnitMismatchError, UsageError
from soakgate.report.analyze import analyze
from soakgate.report.api import load_analysis
from soakgate.report.comparisons import (
    compare_baseline,
    compare_units,
    compare_with_plan,
    differs,
    parse_arm,
)
from soakgate.report.model import ClusteringOptions
from soakgate.stats.decision import apply_decision
from soakgate.stats.plan import make_plan, plan_sha256, plan_to_dict, write_plan
from soakgate.store import MemoryStore, open_analysis, open_store

FAST_ARGS = ["--hmm-replicates", "0", "--gap-permutations", "49"]


def test_arm_specs_parse_and_bad_ones_are_usage_errors() -> None:
    assert parse_arm("eager") == ("eager", None)
    assert parse_arm("eager@gpu0") == ("eager", "gpu0")
    for bad in ("@gpu0", "eager@", ""):
        with pytest.raises(UsageError):
            parse_arm(bad)


def test_aggregate_against_one_target_is_refused(
    two_label_db: Path, fast: ClusteringOptions
) -> None:
    analysis = load_analysis(two_label_db, fast, clustering=False)
    with pytest.raises(UnitMismatchError, match="aggregate over several targets"):
        compare_units(analysis, "eager", "graph@gpu1", fast)
    forced = compare_units(analysis, "eager", "graph@gpu1", fast, allow_unit_mismatch=True)
    assert forced.mismatch is not None
    same_kind = compare_units(analysis, "eager@gpu0", "graph@gpu1", fast)
    assert same_kind.mismatch is None
    assert same_kind.comparison.labels == ("eager@gpu0", "graph@gpu1")


def test_cli_refuses_mismatch_with_exit_2_and_labels_a_forced_one(
    two_label_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", str(two_label_db), "eager", "graph@gpu1", *FAST_ARGS]) == 2
    assert "refusing to compare" in capsys.readouterr().err
    argv = ["compare", str(two_label_db), "eager", "graph@gpu1", "--allow-unit-mismatch"]
    assert main([*argv, *FAST_ARGS]) == 0
    out = capsys.readouterr().out
    assert out.count("UNIT MISMATCH") == 2
    for part in ("difference B-A", "rate ratio B/A", "pooled_z", "fisher", "verdict test:"):
        assert part in out


def test_one_run_per_arm_is_judged_by_batch_means_whatever_the_clustering_tests_say(
    two_label_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", str(two_label_db), "eager@gpu0", "graph@gpu0", *FAST_ARGS]) == 0
    out = capsys.readouterr().out
    # 7 + few collapses: the check is judged at its sparse level and may withhold the verdict,
    # but the test is the batch means either way
    assert "verdict test: batch_means, because " in out and "(batch_means p = " in out
    assert "design: one run per arm (1 + 1 run(s) of a target)" in out
    assert "clustering (descriptive; the verdict does not depend on it)" in out
    assert "long-range design effect" in out


def _unit_sequences(db: Path, *specs: str) -> list[list[list[bool]]]:
    """Each unit's clean collapse flags, one list per run, in time order."""
    store = open_analysis(db)
    try:
        order = {run.run_id: i for i, run in enumerate(store.runs())}
        rows = sorted(store.generations(), key=lambda g: (order[g.run_id], g.seq))
    finally:
        store.close()
    out = []
    for spec in specs:
        label, _, target = spec.partition("@")
        runs: dict[str, list[bool]] = {}
        for g in rows:
            if g.ok and (g.label, g.target) == (label, target):
                runs.setdefault(g.run_id, []).append(g.collapsed)
        out.append(list(runs.values()))
    return out


def test_compare_prints_exactly_the_library_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from soakgate.stats import compare_outcomes

    db = tmp_path / "lib.sqlite"
    store = open_store(db)
    add_run(store, "old", "gpu0", bernoulli(13_000, 0.002, 41))
    add_run(store, "new", "gpu0", bursty(13_000, 42, enter=0.0005, inside=0.3), start=1.7e9 + 1e4)
    store.close()
    (a,), (b,) = _unit_sequences(db, "old@gpu0", "new@gpu0")
    for seed in (0, 5):
        assert main(["compare", str(db), "old", "new", "--seed", str(seed)]) == 0
        out = capsys.readouterr().out
        ours = compare_outcomes(a, b, seed=seed)
        word = {"differ": "DIFFER", "no difference": "no significant difference",
                "indeterminate": "INDETERMINATE"}[ours.verdict]  # fmt: skip
        assert f"verdict: {word} ({ours.test} p = {ours.p_value:.4g}, alpha 0.05)" in out
        assert f"verdict test: {ours.test}, because {ours.reason}" in out


def test_replicate_runs_are_compared_over_blocks_and_say_whether_servers_restarted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from soakgate.stats import compare_outcomes

    db = tmp_path / "blocks.sqlite"
    store = open_store(db)
    for i in range(4):  # interleaved A B B A A B B A, each block a campaign run
        for j, label in enumerate(("eager", "graph") if i % 2 == 0 else ("graph", "eager")):
            start = 1.7e9 + (2 * i + j) * 1e4
            add_run(store, label, "gpu0", bernoulli(3000, 0.004 if label == "eager" else 0.012,
                    100 + 2 * i + j), start=start, campaign=f"c/{2 * i + j:03d}-{label}-r{i}")  # fmt: skip
    add_run(store, "plain", "gpu0", bernoulli(3000, 0.004, 7), start=1.8e9)
    for i in range(2):
        add_run(store, "plain", "gpu0", bernoulli(3000, 0.004, 8 + i), start=1.8e9 + (i + 1) * 1e4)
    store.close()
    assert main(["compare", str(db), "eager", "graph", "--fail-on-differ"]) == 1
    out = capsys.readouterr().out
    assert "design: replicate blocks, 4 + 4 blocks (one per run and target): campaign blocks" in out
    a, b = _unit_sequences(db, "eager@gpu0", "graph@gpu0")
    ours = compare_outcomes(a, b)
    assert ours.design == "replicate blocks" and ours.differ
    assert f"verdict: DIFFER (quasi_poisson p = {ours.p_value:.4g}, alpha 0.05)" in out
    assert main(["compare", str(db), "eager", "plain"]) == 0
    assert "3 of them are not campaign blocks" in capsys.readouterr().out


def test_baseline_family_honours_the_seed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "family.sqlite"
    store = open_store(db)
    add_run(store, "base", "gpu0", bernoulli(6000, 0.01, 51))  # p-values that move with the seed
    add_run(store, "other", "gpu0", bernoulli(6000, 0.01, 52), start=1.7e9 + 1e4)
    store.close()

    def body(argv: list[str]) -> list[str]:
        assert main(["compare", str(db), *argv]) == 0
        lines = capsys.readouterr().out.splitlines()
        return [line for line in lines if "p=" in line and "Holm" not in line]

    pair = body(["base", "other", "--seed", "3"])
    assert body(["--baseline", "base", "--seed", "3"]) == pair
    assert body(["--baseline", "base", "--seed", "4"]) != pair


def test_baseline_family_uses_holm_explicitly(fast: ClusteringOptions) -> None:
    store = MemoryStore()
    add_run(store, "base", "gpu0", bernoulli(4000, 0.004, 10))
    for i, rate in enumerate((0.004, 0.007, 0.012)):
        add_run(store, f"arm{i}", "gpu0", bernoulli(4000, rate, 20 + i), start=1.8e9 + i * 1e4)
    analysis = analyze(store, fast, clustering=False)
    family = compare_baseline(analysis, "base", fast)
    assert [r.units[1].label for r in family] == ["arm0", "arm1", "arm2"]
    raw = [r.comparison.p_value for r in family]
    _, holm, _, _ = multipletests(raw, alpha=0.05, method="holm")
    assert [r.adjusted_p for r in family] == pytest.approx(list(holm))
    assert [r.adjusted_significant for r in family] == [p < 0.05 for p in holm]
    assert family[2].adjusted_significant and not family[0].adjusted_significant


def _planned_store(register_at: float | None, tmp_path: Path) -> tuple[MemoryStore, Path, str]:
    store = MemoryStore()
    plan = make_plan("graph raises the rate", ("eager", "graph"), 0.004, 2.0)
    path = tmp_path / "plan.toml"
    digest = write_plan(plan, path)
    runs = [
        add_run(store, "eager", "gpu0", bernoulli(3000, 0.004, 1)),
        add_run(store, "graph", "gpu0", bernoulli(3000, 0.008, 2), start=1_700_001_000.0),
    ]
    if register_at is not None:
        for run in runs:
            payload = {"sha256": digest, "run_id": run.run_id, "plan": plan_to_dict(plan)}
            store.append_ledger("plan", payload, at=register_at)
    return store, path, digest


def test_plan_registered_before_the_data_is_applied_exactly(
    tmp_path: Path, fast: ClusteringOptions
) -> None:
    store, path, digest = _planned_store(1_699_999_000.0, tmp_path)
    report = compare_with_plan(analyze(store, fast, clustering=False), path, fast)
    assert report.decision is not None and report.decision.plan_sha256 == digest
    expected = apply_decision(make_plan("graph raises the rate", ("eager", "graph"), 0.004, 2.0),
                              report.comparison)  # fmt: skip
    assert report.decision == expected
    assert any("n=3000 is below the planned" in d for d in report.decision.deviations)


def test_plan_registered_late_or_never_or_altered_is_refused(
    tmp_path: Path, fast: ClusteringOptions
) -> None:
    late, path, _ = _planned_store(1_700_000_500.0, tmp_path)  # between the two runs' starts
    with pytest.raises(PlanError, match="after its first generation"):
        compare_with_plan(analyze(late, fast, clustering=False), path, fast)
    never, path, _ = _planned_store(None, tmp_path)
    with pytest.raises(PlanError, match="never registered"):
        compare_with_plan(analyze(never, fast, clustering=False), path, fast)
    store, path, _ = _planned_store(1_699_999_000.0, tmp_path)
    path.write_text(path.read_text().replace("alpha = 0.05", "alpha = 0.1"))
    with pytest.raises(PlanError, match="never registered"):
        compare_with_plan(analyze(store, fast, clustering=False), path, fast)


def test_plan_for_other_runs_does_not_cover_these(tmp_path: Path, fast: ClusteringOptions) -> None:
    store, path, digest = _planned_store(None, tmp_path)
    store.append_ledger("plan", {"sha256": digest, "run_id": "some-other-run"}, at=1.0)
    with pytest.raises(PlanError, match="not registered for run"):
        compare_with_plan(analyze(store, fast, clustering=False), path, fast)
    assert plan_sha256(make_plan("x", ("a", "b"), 0.01, 2.0)) != digest


def test_plan_with_matched_targets_refuses_arms_on_different_targets(
    tmp_path: Path, fast: ClusteringOptions
) -> None:
    store = MemoryStore()
    plan = make_plan("h", ("eager", "graph"), 0.004, 2.0, matched_targets=True)
    path = tmp_path / "plan.toml"
    digest = write_plan(plan, path)
    store.append_ledger("plan", {"sha256": digest, "run_id": None}, at=1.0)  # a DB-wide entry
    add_run(store, "eager", "gpu0", bernoulli(2000, 0.004, 1))
    add_run(store, "graph", "gpu1", bernoulli(2000, 0.004, 2), start=1_700_001_000.0)
    analysis = analyze(store, fast, clustering=False)
    with pytest.raises(UnitMismatchError, match="matched targets"):
        compare_with_plan(analysis, path, fast)
    forced = compare_with_plan(analysis, path, fast, allow_unit_mismatch=True)
    assert forced.mismatch is not None and forced.decision is not None


def test_sequential_plan_takes_earlier_looks_from_events(
    tmp_path: Path, fast: ClusteringOptions
) -> None:
    from soakgate.records import Event

    store = MemoryStore()
    plan = make_plan("h", ("eager", "graph"), 0.004, 2.0, looks=4)
    assert plan.sequential is not None
    path = tmp_path / "plan.toml"
    digest = write_plan(plan, path)
    store.append_ledger("plan", {"sha256": digest}, at=1.0)
    n = plan.sequential.n_max_per_arm // 2
    look = Event("graph-gpu0-1700001000", 1_700_001_100.0, "look", "gpu0", {"fraction": 0.25})
    add_run(store, "eager", "gpu0", bernoulli(n, 0.004, 1))
    add_run(store, "graph", "gpu0", bernoulli(n, 0.004, 2), start=1_700_001_000.0, events=[look])
    report = compare_with_plan(analyze(store, fast, clustering=False), path, fast)
    assert report.decision is not None
    # Second look at about half the information: equal rates cannot cross the boundary yet.
    assert report.decision.verdict == "continue"
    assert "at look 2" in report.decision.reason  # the recorded look at 0.25 counted
    assert report.decision.test in ("batch_means", "pooled_z")
    assert not differs(report)  # "continue" is no finding: a gated pipeline goes on


def test_fail_on_differ_gates_a_pipeline_by_exit_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "gate.sqlite"
    store = open_store(db)
    add_run(store, "old", "gpu0", bernoulli(3000, 0.003, 1))
    add_run(store, "same", "gpu0", bernoulli(3000, 0.003, 2), start=1_700_001_000.0)
    add_run(store, "broken", "gpu0", bernoulli(3000, 0.03, 3), start=1_700_002_000.0)
    store.close()

    def exit_status(*argv: str) -> tuple[int, str]:
        code = main(["compare", str(db), *argv, *FAST_ARGS])
        return code, capsys.readouterr().out

    code, out = exit_status("old", "broken", "--fail-on-differ")
    assert code == 1 and "verdict: DIFFER" in out
    assert exit_status("old", "broken")[0] == 0  # without the flag the verdict is only printed
    code, out = exit_status("old", "same", "--fail-on-differ")
    assert code == 0 and "verdict: no significant difference" in out
    code, out = exit_status("--baseline", "old", "--fail-on-differ")  # any arm of the family
    assert code == 1 and out.count("verdict: DIFFER") == 1


def test_an_hmm_bootstrap_that_cannot_count_is_a_one_line_usage_error(
    two_label_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["compare", str(two_label_db), "eager@gpu0", "graph@gpu0", "--hmm-replicates", "59"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "1/60, cannot fall below alpha/3" in err and err.count("\n") == 1


def _look_then_overrun(db: Path, tmp_path: Path, recorded: str | None) -> Path:
    """A sequential plan whose first look sees B collapse far more (DIFFER), then rows stored
    past that look (the soak went on) in which B collapses no more than A over the whole run;
    `recorded`: the verdict a `look` event stored during the soak says look 1 reached."""
    from soakgate.records import Event

    plan = make_plan("h", ("eager", "graph"), 0.004, 2.0, looks=4)
    assert plan.sequential is not None and plan.sequential.n_max_per_arm == 9120
    path = tmp_path / "plan.toml"
    store = open_store(db)
    store.append_ledger("plan", {"sha256": write_plan(plan, path)}, at=1.0)
    graph = [*bernoulli(2280, 0.06, 2), *([False] * 6840)]
    looks = [] if recorded is None else [
        Event("graph-gpu0-1700001000", 1_700_001_200.0, "look", "gpu0",
              {"look": 1, "fraction": 0.25, "verdict": recorded})
    ]  # fmt: skip
    add_run(store, "eager", "gpu0", bernoulli(9120, 0.015, 1))
    add_run(store, "graph", "gpu0", graph, start=1_700_001_000.0, events=looks)
    store.close()
    return path


def test_a_sequential_plan_is_decided_at_its_deciding_look_not_on_rows_stored_after(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "seq.sqlite"
    path = _look_then_overrun(db, tmp_path, "differ")
    store = open_analysis(db)
    try:
        whole = compare_units(analyze(store, clustering=False), "eager", "graph")
    finally:
        store.close()
    assert whole.comparison.verdict.verdict != "differ"  # all rows together: no difference
    argv = ["compare", str(db), "--plan", str(path), "--fail-on-differ", *FAST_ARGS]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "plan verdict: DIFFER" in out and "plan deviations: none" in out
    assert "look 1 of 4 at n=2,280 per arm" in out
    assert "6,840 generations per arm stored after it" in out


def test_a_look_recorded_during_the_soak_that_the_rows_contradict_is_a_deviation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "seq.sqlite"
    path = _look_then_overrun(db, tmp_path, "continue")
    assert main(["compare", str(db), "--plan", str(path), *FAST_ARGS]) == 0
    out = capsys.readouterr().out
    assert "plan verdict: DIFFER" in out
    assert "look 1 recorded continue during the soak; the stored rows give differ" in out
