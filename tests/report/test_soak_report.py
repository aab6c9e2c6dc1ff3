"""End to end: soak the mock server (a real process) through `run_soak`, then report on it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from soakgate.cli.main import main
from soakgate.load import LoadSpec
from soakgate.load.runner import SoakConfig, run_soak
from soakgate.mockserver.process import MockProcess
from soakgate.probes.soak import StandardProbes
from soakgate.targets import RequestSpec, TargetSpec

REQUESTS = 2000
BURSTY = ("--collapse-rate", "0.002", "--burst-enter", "0.003", "--burst-exit", "0.05",
          "--burst-collapse-rate", "0.6")  # fmt: skip
INDEPENDENT = ("--collapse-rate", "0.02")


def soak(mock: MockProcess, db: Path, label: str, name: str) -> None:
    config = SoakConfig(
        probes=StandardProbes(),
        targets=[TargetSpec.parse(f"{name}={mock.url}")], label=label,
        request=RequestSpec(max_tokens=8, stream=False), db=db,
        load=LoadSpec(concurrency=8, requests=REQUESTS, grace_s=5),
    )  # fmt: skip
    run_soak(config)


@pytest.mark.slow
def test_mock_bursts_are_reported_clustered_and_independent_mode_is_not(
    start_mock: Callable[..., MockProcess], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "soak.sqlite"
    common = ("--tokens-per-s", "0", "--output-tokens", "8")
    soak(start_mock("--seed", "3", *common, *BURSTY), db, "graph", "gpu0")
    soak(start_mock("--seed", "4", *common, *INDEPENDENT), db, "eager", "gpu0")
    argv = [
        "report",
        str(db),
        "--format",
        "json",
        "--hmm-replicates",
        "0",
        "--html",
        str(tmp_path / "r.html"),
    ]
    assert main(argv) == 0
    rows = {row["label"]: row for row in json.loads(capsys.readouterr().out)["units"]}
    assert rows["graph"]["n"] == rows["eager"]["n"] == REQUESTS
    assert rows["graph"]["clustered"] is True and rows["graph"]["design_effect"] > 2
    assert rows["eager"]["clustered"] is False
    assert main(["compare", str(db), "eager", "graph"]) == 0
    out = capsys.readouterr().out
    assert "graph@gpu0: clustered:" in out  # described, but the verdict does not switch on it
    assert "verdict test: batch_means, because" in out and "design: one run per arm" in out
