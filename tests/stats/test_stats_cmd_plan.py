"""The `soakgate plan` command: figures, the written plan, and one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from soakgate.cli.main import main
from soakgate.stats.plan import plan_sha256, read_plan


def test_prints_n_per_arm(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--baseline-rate", "0.002", "--ratio", "1.5"]) == 0
    assert "n per arm: 39146" in capsys.readouterr().out


def test_prints_power_for_n(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--baseline-rate", "0.002", "--ratio", "1.5", "--n", "13000"]) == 0
    out = capsys.readouterr().out
    assert "36.5%" in out and "smallest ratio" in out


def test_writes_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "plan.toml"
    argv = ["plan", "--baseline-rate", "0.002", "--ratio", "1.5", "--write", str(path)]
    argv += ["--arms", "eager", "graph", "--hypothesis", "graph is worse", "--sequential"]
    assert main(argv) == 0
    plan = read_plan(path)
    assert plan.sequential is not None and plan.sequential.looks == 5
    assert plan_sha256(plan) in capsys.readouterr().out


@pytest.mark.parametrize(
    "extra",
    [
        ["--baseline-rate", "0", "--ratio", "1.5"],
        ["--baseline-rate", "0.002", "--ratio", "-1"],
        ["--baseline-rate", "0.002", "--ratio", "1.5", "--power", "1.2"],
        ["--baseline-rate", "0.002", "--ratio", "1.5", "--write", "x.toml"],
    ],
)
def test_bad_input_is_one_line_exit_2(extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("soakgate: error:") and err.count("\n") == 1


def _plan(tmp_path: Path, *extra: str) -> list[str]:
    path = tmp_path / "plan.toml"
    argv = ["plan", "--baseline-rate", "0.002", "--ratio", "1.5", "--write", str(path)]
    return [*argv, "--arms", "eager", "graph", "--hypothesis", "graph is worse", *extra]


def test_matched_targets_only_when_asked(tmp_path: Path) -> None:
    assert main(_plan(tmp_path)) == 0
    assert read_plan(tmp_path / "plan.toml").matched_targets is False
    assert main(_plan(tmp_path, "--matched-targets")) == 0
    assert read_plan(tmp_path / "plan.toml").matched_targets is True


def test_block_design_is_recommended_and_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from soakgate.stats.power import block_design, block_power

    assert main(["plan", "--baseline-rate", "0.002", "--ratio", "1.5"]) == 0
    out = capsys.readouterr().out
    blocks, per_block, _ = block_design(0.002, 1.5)
    assert (
        "recommended: replicate blocks" in out
        and f"{blocks} blocks per arm of {per_block:,}" in out
    )
    assert main(_plan(tmp_path, "--blocks", "10", "--design-effect", "4")) == 0
    plan = read_plan(tmp_path / "plan.toml")
    assert plan.blocks == 10 and plan.requests_per_block is not None
    assert block_power(0.002, 1.5, 10, plan.requests_per_block, design_effect=4) >= 0.8
    assert block_power(0.002, 1.5, 10, plan.requests_per_block - 1, design_effect=4) < 0.8
    assert plan.n_per_arm == 10 * plan.requests_per_block
    assert "replicate-block design: 10 blocks per arm" in capsys.readouterr().out


def test_block_power_matches_simulation_of_the_test_over_blocks() -> None:
    # Independent requests, 8 blocks per arm: the planned power is what the verdict delivers.
    import numpy as np

    from soakgate.stats import compare_outcomes
    from soakgate.stats.power import block_power

    rng = np.random.default_rng(31)
    hits = sum(
        compare_outcomes(
            list(rng.random((8, 3000)) < 0.002), list(rng.random((8, 3000)) < 0.004)
        ).differ
        for _ in range(300)
    )
    assert hits / 300 == pytest.approx(block_power(0.002, 2.0, 8, 3000), abs=0.08)


def _pilot_db(tmp_path: Path) -> Path:
    import numpy as np
    from bench.processes import by_name, simulate
    from tests.report.synth import add_run

    from soakgate.store import open_store

    db = tmp_path / "pilot.sqlite"
    store = open_store(db)
    rng = np.random.default_rng(12)
    for i, seq in enumerate(simulate(by_name("reset-2000"), rng, 2, 40_000, 0.002)):
        add_run(store, "eager", f"gpu{i}", list(seq), start=1.7e9 + i * 1e5)
    add_run(store, "other", "gpu0", list(rng.random(5000) < 0.01), start=1.8e9)
    store.close()
    return db


def test_pilot_sizes_with_the_long_range_design_effect(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from soakgate.report.api import load_analysis
    from soakgate.stats.dependence import long_range_design_effect
    from soakgate.stats.power import n_per_arm

    db = _pilot_db(tmp_path)
    assert main(["plan", "--pilot", str(db), "--label", "eager", "--ratio", "1.5"]) == 0
    out = capsys.readouterr().out
    analysis = load_analysis(db, clustering=False)
    seqs = [u.sequence for u in analysis.units if u.label == "eager" and not u.aggregate]
    estimate = long_range_design_effect([s for s in seqs if s is not None])
    rate = sum(int(s.sum()) for s in seqs if s is not None) / 80_000
    from soakgate.stats.clustering import dispersion_test

    windowed = max(dispersion_test(s, 500)[1] for s in seqs if s is not None)
    assert estimate.design_effect > 2 * windowed  # 500-request windows miss most of it
    assert f"long-range design effect {estimate.design_effect:.2f}" in out
    assert f"n per arm: {n_per_arm(rate, 1.5, design_effect=estimate.design_effect)}" in out
    # as README.md shows it: the same pilot, sizing a design of 8 replicate blocks per arm
    assert (
        main(["plan", "--pilot", str(db), "--label", "eager", "--ratio", "1.5", "--blocks", "8"])
        == 0
    )
    assert "8 blocks" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--design-effect", "2"], "not both"),
        (["--label", "nope"], "no label 'nope'"),
    ],
)
def test_pilot_bad_input_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    db = _pilot_db(tmp_path)
    assert main(["plan", "--pilot", str(db), "--ratio", "1.5", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert main(["plan", "--label", "eager", "--ratio", "1.5"]) == 2
    assert "--label needs --pilot" in capsys.readouterr().err
    assert main(["plan", "--pilot", str(tmp_path / "absent.sqlite"), "--ratio", "1.5"]) == 2
