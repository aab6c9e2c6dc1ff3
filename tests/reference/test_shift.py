"""Issue 28: corruption that shifts every token a little is judged per unit, as a whole, against
the reference's own samples: the statistic holds its level by simulation at the shipped
calibration size, the mock's `--shift-rate` control is fluent and recorded, and `report` says
SHIFTED for a shifted candidate and not for a clean one, through the CLI."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from soakgate.mockserver import lm
from soakgate.mockserver.process import MockProcess
from soakgate.stats.shift import SHIFTED, TOO_FEW, expected_share, score_shift, score_shift_z
from tests.cli.helpers import soakgate

REQUESTS = 2500  # per arm: enough suspect rows that the one-run check leaves its sparse level


def test_the_unit_verdict_holds_its_level_and_sees_a_shift_on_one_request_in_ten() -> None:
    """Reference-like units (scores drawn as the calibration's) at the shipped calibration size
    (5,000) and 2,000 scored rows; then 1 row in 10 moved up by one calibration SD."""
    rng = np.random.default_rng(28)
    false, found, reps = 0, 0, 1000
    for _ in range(reps):
        calibration = rng.normal(size=5000)
        cutoff = float(np.sort(calibration)[int(0.9 * 5000)])
        clean = rng.normal(size=2000)
        false += score_shift(clean, cutoff, 5000).verdict == SHIFTED
        moved = rng.normal(size=2000) + (rng.random(2000) < 0.1) * 1.0
        found += score_shift(moved, cutoff, 5000).verdict == SHIFTED
    assert false / reps <= 0.065  # one-sided level 0.05; MC SE 0.7 points
    assert found / reps >= 0.8
    mean, variance = expected_share(5000)
    assert mean == pytest.approx(500 / 5001) and 0 < variance < 1e-4
    assert score_shift(np.zeros(50), 0.0, 5000).verdict == TOO_FEW


def _skewed(rng: np.random.Generator, n: int) -> np.ndarray:
    """A standardised gamma(2): mean 0, variance 1, a long upper tail (a soak z of short
    generations is skewed so)."""
    return (rng.gamma(2.0, 1.0, n) - 2.0) / np.sqrt(2.0)


def test_the_soak_z_verdict_holds_its_level_and_sees_a_small_shift_on_a_share_of_rows() -> None:
    """The verdict `report` applies to the soak z (share above the 90th percentile and mean,
    each at half the level), at the shipped calibration size (5,000) and 2,000 scored rows, on
    a skewed score: reference-like units stay at the level; with 1 row in 10 moved up by 0.75
    SD it is SHIFTED far more often than the share test alone (simulated: 60% against 40%); and
    every row moved down by 0.1 SD (a sharper model: text more predictable than the
    reference's own), which the share test cannot see, is SHIFTED by the mean."""
    rng = np.random.default_rng(2828)
    false, found, share_only, lower, reps = 0, 0, 0, 0, 1000
    for _ in range(reps):
        calibration = _skewed(rng, 5000)
        cutoff = float(np.sort(calibration)[int(0.9 * 5000)])
        mean, variance = float(calibration.mean()), float(calibration.var(ddof=1))
        clean = _skewed(rng, 2000)
        false += score_shift_z(clean, cutoff, 5000, mean, variance).verdict == SHIFTED
        moved = _skewed(rng, 2000) + (rng.random(2000) < 0.1) * 0.75
        found += score_shift_z(moved, cutoff, 5000, mean, variance).verdict == SHIFTED
        share_only += score_shift(moved, cutoff, 5000).verdict == SHIFTED
        sharper = score_shift_z(_skewed(rng, 2000) - 0.1, cutoff, 5000, mean, variance)
        lower += sharper.verdict == SHIFTED and sharper.mean_statistic < 0
    assert false / reps <= 0.065  # level 0.05; MC SE 0.7 points
    assert found / reps >= 0.55 and found / reps >= share_only / reps + 0.15
    assert lower / reps >= 0.8
    assert score_shift_z(np.zeros(50), 0.0, 5000, 0.0, 1.0).verdict == TOO_FEW


def test_the_mock_shift_control_is_fluent_and_recorded(tmp_path: Path) -> None:
    truth = tmp_path / "truth.jsonl"
    with MockProcess(["--shift-rate", "0.5", "--seed", "2"], ground_truth_path=truth) as mock:
        result = soakgate("run", "--target", mock.url, "--requests", "60", "--max-tokens", "32",
                          "--db", str(tmp_path / "s.sqlite"), "--quiet", "--no-watch-metrics",
                          cwd=tmp_path)  # fmt: skip
        assert result.returncode == 0, result.stderr
        records = mock.ground_truth()
    shifted = [r for r in records if r["shifted"]]
    assert 15 <= len(shifted) <= 45 and len(records) == 60
    rng = random.Random(1)
    for context in (lm.CORES[0].ids[0], 5, 17):  # every shifted token is a likely one: fluent
        draws = [lm.sample_tempered(context, 2.0, rng) for _ in range(200)]
        assert set(draws) <= set(lm.CORES[context].ids) and len(set(draws)) > 3


@pytest.mark.slow
@pytest.mark.timeout(1800)  # two scored soaks: minutes on a loaded machine
def test_report_says_shifted_for_a_shifted_candidate_and_not_for_a_clean_one(
    tmp_path: Path,
) -> None:
    db = tmp_path / "arms.sqlite"
    with MockProcess(["--seed", "5"]) as clean, MockProcess(
        ["--seed", "3", "--shift-rate", "0.2"]
    ) as shifted, MockProcess() as reference:  # fmt: skip
        for label, mock in (("eager", clean), ("compiled", shifted)):
            result = soakgate(
                "run", "--target", f"gpu0={mock.url}", "--label", label, "--score-reference",
                reference.url, "--requests", str(REQUESTS), "--calibration", "1999",
                "--max-tokens", "64", "--concurrency", "1", "--db", str(db), "--quiet",
                "--no-watch-metrics", cwd=tmp_path, timeout=900,
            )  # fmt: skip
            # The gate below failed once beside four busy loops (2026-12-04): both outcomes
            # INDETERMINATE. At 1,200 per arm the pair held ~82 suspect rows, where the one-run
            # check is judged at its sparse level (0.29): on independent arms at these rates it
            # withheld 25% of the time for suspect and 6% for shifted, so neither decided in
            # 1.3% of draws (300 simulated pairs). At 2,500 per arm suspect holds ~170 rows
            # (level 0.05). One request at a time keeps the rows in the requests' order
            # whatever the load (16 in flight, a starved machine reorders completions).
            assert result.returncode == 0, result.stderr
    document = json.loads(soakgate("report", str(db), "--format", "json", cwd=tmp_path).stdout)
    units = {u["unit"]: u for u in document["probes"]["reference"]}
    assert units["compiled@gpu0"]["shift"]["verdict"] == SHIFTED
    # the mock reference returns 20 alternatives per position and the soak samples: the soak
    # z is judged (its share above the p90 and its mean)
    assert units["compiled@gpu0"]["shift"]["score"] == "soak z"
    print({name: unit["shift"] for name, unit in units.items()})
    assert units["compiled@gpu0"]["shift"]["p_value"] < 1e-4
    # The clean arm is one draw of a 5%-level test whose calibration (the same samples on
    # every run: the mock keys them by request id) sits at its population's 88.9th percentile:
    # assert it is nowhere near the shifted one rather than its verdict.
    assert units["eager@gpu0"]["shift"]["p_value"] > 1e-3
    # Per generation the typicality score flags a share of the shifted rows (the worst token
    # alone flagged none of them); the clean arm keeps the 0.1% rate (at most Beta(2, 2000) over
    # calibrations: more than 20 of 2,500 has probability 4e-5).
    assert units["compiled@gpu0"]["suspect"] >= 80
    assert units["eager@gpu0"]["suspect"] <= 20
    table = soakgate("report", str(db), cwd=tmp_path, env={"COLUMNS": "250"}).stdout
    assert "SHIFTED by soak z" in table and "as a whole" in table
    # The release gate hears it: the candidate's shifted share against the baseline's.
    gate = soakgate("compare", str(db), "eager", "compiled", "--fail-on-differ", cwd=tmp_path)
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert "gate FAIL" in gate.stdout and "shifted (scores above the reference's p90)" in (
        gate.stdout
    )
    alone = soakgate("compare", str(db), "eager", "compiled", "--outcome", "shifted", cwd=tmp_path)
    assert alone.returncode == 0, alone.stderr
    assert alone.stdout.startswith("outcome: shifted (reference scoring)")
