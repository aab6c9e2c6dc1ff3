"""The calibrated threshold holds its false-flag rate (simulated with the shipped defaults), and
a calibration too small for the rate is refused or stored with a warning, through the CLI."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from soakgate.errors import UsageError
from soakgate.mockserver.process import MockProcess
from soakgate.reference.calibrate import calibrate, minimum_samples
from tests.command_line import soakgate


def test_threshold_holds_the_false_flag_rate_at_the_defaults() -> None:
    # 400 calibrations of the default size (5000) at the default rate (0.001), each judged on
    # 20,000 fresh draws from the same heavy-tailed and tied (discrete) score distributions.
    rng = np.random.default_rng(17)
    for draw in (lambda n: rng.standard_t(2, n), lambda n: np.round(rng.exponential(1, n), 1)):
        rates = []
        for _ in range(400):
            threshold = calibrate(list(draw(5000)), 0.001).threshold
            rates.append(float(np.mean(draw(20_000) > threshold)))
        mean, se = float(np.mean(rates)), float(np.std(rates) / np.sqrt(len(rates)))
        assert mean <= 0.001 + 3 * se, (mean, se)  # E[rate] <= a: the conformal bound
        assert mean >= 0.0005, (mean, se)  # and not wastefully strict (ties aside)


def test_too_small_a_calibration_is_refused_and_a_small_one_warned() -> None:
    assert minimum_samples(0.001) == 999
    with pytest.raises(UsageError, match="cannot support"):
        calibrate([0.0] * 998, 0.001)
    assert calibrate(list(range(999)), 0.001).warning is not None
    assert calibrate(list(range(5000)), 0.001).warning is None


def test_cli_refuses_a_calibration_below_the_minimum_before_any_load(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    mock = start_mock()
    result = soakgate(
        "run", "--target", mock.url, "--score-reference", mock.url, "--requests", "10",
        "--calibration", "100", "--db", str(tmp_path / "t.sqlite"), "--quiet", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "at least 999 samples" in lines[0], result.stderr
    assert mock.ground_truth() == []  # nothing was sent


def test_cli_stores_a_small_calibration_with_its_warning(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    candidate, reference = start_mock("--fluent-rate", "0.2"), start_mock()
    db = tmp_path / "t.sqlite"
    result = soakgate(
        "run", "--target", candidate.url, "--score-reference", reference.url, "--requests",
        "200", "--false-flag-rate", "0.01", "--calibration", "120", "--max-tokens", "32",
        "--db", str(db), "--quiet", "--no-watch-metrics", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "warning: reference calibration: 120 samples" in result.stderr
    with sqlite3.connect(db) as connection:
        (data,) = connection.execute(
            "SELECT data FROM events WHERE kind = 'reference_calibration'"
        ).fetchone()
        counts = dict(connection.execute(
            "SELECT suspect, count(*) FROM generations GROUP BY suspect"
        ).fetchall())  # fmt: skip
    stored = json.loads(data)
    assert stored["n"] == 120 and stored["warning"] and stored["score"] == "max_surprisal"
    assert stored["reference"]["url"] == reference.url
    assert None not in counts and counts[1] >= 20  # all scored; the fluent ones flagged


def test_cli_refuses_a_reference_model_that_is_not_a_model_before_any_load(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    mock = start_mock()
    result = soakgate(
        "run", "--target", mock.url, "--reference-model", str(tmp_path), "--requests", "10",
        "--db", str(tmp_path / "t.sqlite"), "--quiet", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2
    assert (
        result.stderr.strip().splitlines()
        == [f"soakgate: --reference-model {tmp_path}: no config.json (not a model folder)"]
        or "no config.json" in result.stderr.strip().splitlines()[-1]
    )
    assert len(result.stderr.strip().splitlines()) == 1
    assert mock.ground_truth() == [] and not (tmp_path / "t.sqlite").exists()


@pytest.mark.parametrize("top_p", [None, "0.95"])
def test_sampling_without_top_p_is_noted_with_the_calibration(
    start_mock: Callable[..., MockProcess], tmp_path: Path, top_p: str | None
) -> None:
    # Without a nucleus the clean long tail sets the threshold (bench_reference_sharpness.py):
    # the run says so once on stderr and stores it with the calibration; with --top-p it does not.
    mock = start_mock()
    db = tmp_path / "t.sqlite"
    result = soakgate(
        "run", "--target", mock.url, "--score-reference", mock.url, "--requests", "20",
        "--false-flag-rate", "0.01", "--calibration", "120", "--max-tokens", "16",
        *(("--top-p", top_p) if top_p else ()), "--db", str(db), "--quiet",
        "--no-watch-metrics", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if line.startswith("soakgate: note:")]
    with sqlite3.connect(db) as connection:
        (data,) = connection.execute(
            "SELECT data FROM events WHERE kind = 'reference_calibration'"
        ).fetchone()
    stored = json.loads(data)["sampling_note"]
    if top_p is None:
        assert len(notes) == 1 and "without --top-p" in notes[0], result.stderr
        assert stored is not None and "--top-p" in stored
    else:
        assert notes == [] and stored is None, result.stderr


@pytest.mark.timeout(900)  # five scored soaks
def test_a_calibration_is_drawn_once_for_identical_settings_with_its_cost_and_progress(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    """Issue 28: every run (and --resume) drew its calibration again, printing nothing while it
    ran. Now the first chunk's pace is printed as the cost of the whole, and a run with the same
    reference, prompts, sampling, sample count and rate reuses the stored calibration, streamed
    or not."""
    candidate, reference = start_mock(), start_mock()
    db = tmp_path / "t.sqlite"

    def run(*extra: str) -> str:
        result = soakgate(
            "run", "--target", candidate.url, "--score-reference", reference.url, "--requests",
            "40", "--false-flag-rate", "0.01", "--calibration", "120", "--max-tokens", "16",
            "--db", str(db), "--quiet", "--no-watch-metrics", *extra, cwd=tmp_path,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return result.stderr

    def drawn() -> int:
        ids = [r.get("request_id", "") for r in reference.ground_truth()]
        return sum(str(i).startswith("calibration-") for i in ids)

    first = run()
    assert "calibrating reference scoring on 120 of the reference's own samples" in first
    assert "soakgate: calibration: the first 48 of 120 samples took" in first
    assert "in all" in first and drawn() == 120
    ids = [str(r.get("request_id", "")) for r in reference.ground_truth()]
    assert len({i for i in ids if i.startswith("calibration-")}) == 120  # chunks number on
    second = run()
    assert "reference calibration reused from run" in second and drawn() == 120
    # how answers travel is not what the reference samples: a non-streamed soak reuses it too
    unstreamed = run("--no-stream")
    assert "reference calibration reused from run" in unstreamed and drawn() == 120
    third = run("--recalibrate")
    assert "reused" not in third and drawn() == 240
    fourth = run("--max-tokens", "24")  # other sampling settings: not the same calibration
    assert "reused" not in fourth and drawn() == 360
    with sqlite3.connect(db) as connection:
        rows = connection.execute(
            "SELECT data FROM events WHERE kind = 'reference_calibration' ORDER BY id"
        ).fetchall()
    stored = [json.loads(data) for (data,) in rows]
    reused = [s.get("reused_from") is not None for s in stored]
    assert reused == [False, True, True, False, False]
    assert len({s["fingerprint"] for s in stored[:4]}) == 1
    assert stored[4]["fingerprint"] != stored[0]["fingerprint"]
    assert stored[1]["threshold"] == stored[0]["threshold"] and stored[1]["n"] == 120


@pytest.mark.timeout(900)  # a soak interrupted, then resumed: minutes on a loaded machine
def test_resume_reuses_its_runs_calibration(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    import signal
    import subprocess
    import sys
    import time

    candidate, reference = start_mock("--tokens-per-s", "2000"), start_mock()
    db = tmp_path / "t.sqlite"
    scoring = ["--score-reference", reference.url, "--false-flag-rate", "0.01", "--calibration",
               "120", "--db", str(db), "--quiet", "--no-watch-metrics"]  # fmt: skip
    soaker = subprocess.Popen(
        [sys.executable, "-m", "soakgate", "run", "--target", f"gpu0={candidate.url}", "--label",
         "s", "--requests", "400", "--concurrency", "4", "--max-tokens", "32", *scoring],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 600  # the calibration comes first: slow on a loaded machine
    while time.monotonic() < deadline and len(candidate.ground_truth()) < 40:
        time.sleep(0.2)
    soaker.send_signal(signal.SIGINT)
    assert soaker.wait(timeout=60) == 130
    with sqlite3.connect(db) as connection:
        ((run_id,),) = connection.execute("SELECT run_id FROM runs").fetchall()
    resumed = soakgate("run", "--resume", run_id, "--target", f"gpu0={candidate.url}", "--label",
                       "s", *scoring, cwd=tmp_path)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert f"reference calibration reused from run {run_id}" in resumed.stderr
    ids = [str(r.get("request_id", "")) for r in reference.ground_truth()]
    assert sum(i.startswith("calibration-") for i in ids) == 120


def test_calibration_progress_lines_follow_progress_every(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    """Issue 30 item 7: the calibration's lines after its first (its cost) come every
    --progress-every (1 ms here: one after each chunk), and none with 0."""
    candidate, reference = start_mock(), start_mock()

    def calibrate(every: str) -> list[str]:
        result = soakgate(
            "run", "--target", candidate.url, "--score-reference", reference.url, "--requests",
            "4", "--false-flag-rate", "0.01", "--calibration", "120", "--max-tokens", "8",
            "--db", str(tmp_path / f"{every}.sqlite"), "--quiet", "--no-watch-metrics",
            "--progress-every", every, cwd=tmp_path,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return [line for line in result.stderr.splitlines() if "soakgate: calibration:" in line]

    often, never = calibrate("1ms"), calibrate("0")
    assert often[0].startswith("soakgate: calibration: the first 48 of 120 samples took")
    assert [line.split("(")[0] for line in often[1:]] == [
        "soakgate: calibration: 96/120 samples ",
        "soakgate: calibration: 120/120 samples ",
    ]
    assert len(never) == 1 and never[0] == never[0].replace("/120", "") and "first 48" in never[0]
