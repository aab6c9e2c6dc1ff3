"""The release gate errs toward failing (issue 26 item 3): an outcome one run per arm cannot
resolve (INDETERMINATE) does not clear the candidate when the evidence against it is
overwhelming (adjusted p <= alpha / 50), and a gate that passes says which outcomes it left
unresolved. Real mock servers, the real CLI, one request in flight, so each server's collapses
are exactly the pattern asked of it (`--state-collapse W:P`: the first W of every P requests)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.cli.helpers import soakgate

from soakgate.mockserver.process import MockProcess

REQUESTS = 2_000


def _soak(tmp_path: Path, db: Path, label: str, *mock_args: str) -> None:
    with MockProcess(["--seed", "3", "--tokens-per-s", "0", "--output-tokens", "16",
                      "--collapse-kinds", "bang_run",
                      *mock_args]) as mock:  # fmt: skip
        ran = soakgate("run", "--target", mock.url, "--label", label, "--requests",
                       str(REQUESTS), "--concurrency", "1", "--max-tokens", "16", "--db",
                       str(db), "--quiet", "--no-watch-metrics", cwd=tmp_path)  # fmt: skip
    assert ran.returncode == 0, ran.stderr


@pytest.fixture(scope="module")
def arms(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """`clean` never collapses; `stuck` collapses on the first 500 of every 800 requests (three
    long blocks, 1,400 of its 2,000 answers: one run cannot resolve such dependence, the batch
    t gives p = 0.00013); `lumpy` on 200 of every 800 (p = 0.026)."""
    tmp_path = tmp_path_factory.mktemp("indeterminate")
    db = tmp_path / "arms.sqlite"
    _soak(tmp_path, db, "clean")
    _soak(tmp_path, db, "stuck", "--state-collapse", "500:800")
    _soak(tmp_path, db, "lumpy", "--state-collapse", "200:800")
    return tmp_path, db


def _gate(arms: tuple[Path, Path], candidate: str, *extra: str) -> tuple[Any, str]:
    """`compare clean CANDIDATE --outcome collapse --fail-on-differ`, and its gate line."""
    tmp_path, db = arms
    judged = soakgate("compare", str(db), "clean", candidate, "--outcome", "collapse",
                      "--fail-on-differ", *extra, cwd=tmp_path)  # fmt: skip
    lines = judged.stdout.splitlines()
    return judged, next((x for x in lines if x.startswith(("gate PASS", "gate FAIL"))), "")


def test_overwhelming_evidence_one_run_cannot_resolve_fails_the_gate(
    arms: tuple[Path, Path],
) -> None:
    tmp_path, db = arms
    judged, line = _gate(arms, "stuck")
    assert judged.returncode == 1, judged.stdout + judged.stderr
    assert (
        line.startswith("gate FAIL: stuck@")
        and "collapses 70.0% vs 0.0% (1,400/2,000 vs 0/2,000" in line
    ), line
    assert "INDETERMINATE yet not cleared" in line and "p <= 0.001" in line, line
    assert "[scope: these server instances" in line, line
    # the outcome's own verdict is still INDETERMINATE: the gate does not call it DIFFER
    assert ": INDETERMINATE (batch_means p=0.00013" in judged.stdout, judged.stdout
    # the report's gates judge both candidates against clean in one family (p doubled by Holm)
    document = json.loads(soakgate("report", str(db), "--format", "json", cwd=tmp_path).stdout)
    (gate,) = [g for g in document["gates"] if g["candidate"].startswith("stuck@")]
    (collapses,) = [o for o in gate["outcomes"] if o["outcome"] == "collapse"]
    assert gate["fails"] and collapses["verdict"] == "indeterminate"
    assert collapses["not_cleared"] and not collapses["worse"]
    assert collapses["adjusted_p"] <= 0.001
    (lumpy,) = [g for g in document["gates"] if g["candidate"].startswith("lumpy@")]
    assert not lumpy["fails"]
    # --configurations-only fails only on replicated designs: one run per arm is instances
    scoped, _ = _gate(arms, "stuck", "--configurations-only")
    assert scoped.returncode == 0, scoped.stdout


def test_weaker_evidence_passes_and_the_line_names_what_stayed_unresolved(
    arms: tuple[Path, Path],
) -> None:
    judged, line = _gate(arms, "lumpy")
    assert judged.returncode == 0, judged.stdout + judged.stderr
    assert line.startswith("gate PASS: lumpy@") and "is not shown worse than clean@" in line
    assert "INDETERMINATE, not resolved by this design: collapses" in line, line
