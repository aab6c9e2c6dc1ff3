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
