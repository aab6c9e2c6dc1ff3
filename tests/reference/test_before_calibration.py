"""Reference scoring reaches every target and the reference, and has the reference score one
text, before it draws its calibration samples (minutes of work): an unreachable target or
reference, or a reference that does not score, is one short line and exit 2 with no sample
drawn; a signal during the calibration stops it at once (exit 130, the run `interrupted`, no
row lost because none was sent)."""

from __future__ import annotations

import importlib.util
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from soakgate.mockserver.process import MockProcess
from tests.cli.helpers import one_error_line
from tests.command_line import soakgate
from tests.hostile import HostileProcess
from tests.realservers.helpers import model_dir

DEAD = "http://127.0.0.1:9"
needs_model = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None or not (model_dir() / "config.json").is_file(),
    reason="needs transformers and the shared model (../shared/models/tiny-llama-8k)",
)


def _run(tmp_path: Path, target: str, *reference: str) -> subprocess.CompletedProcess[str]:
    return soakgate(
        "run", "--target", target, *reference, "--calibration", "999", "--requests", "10",
        "--max-tokens", "16", "--db", str(tmp_path / "r.sqlite"), "--quiet",
        "--no-watch-metrics", cwd=tmp_path, timeout=600,
    )  # fmt: skip


def test_an_unreachable_target_is_refused_before_any_calibration_sample(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    reference = start_mock("--seed", "2")
    done = _run(tmp_path, DEAD, "--score-reference", reference.url)
    assert done.returncode == 2
    assert f"cannot reach {DEAD}" in one_error_line(done)
    assert reference.ground_truth() == []  # not one sample drawn


@needs_model
def test_an_unreachable_target_is_refused_before_the_model_calibrates(tmp_path: Path) -> None:
    done = _run(tmp_path, DEAD, "--reference-model", str(model_dir()))
    assert done.returncode == 2 and f"cannot reach {DEAD}" in one_error_line(done)


def test_an_unreachable_reference_is_one_short_line(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    target = start_mock("--seed", "3")
    done = _run(tmp_path, target.url, "--score-reference", DEAD)
    assert done.returncode == 2
    line = one_error_line(done)
    assert line.startswith(f"soakgate: error: cannot reach reference {DEAD}: connection failed")
    assert len(line) < 120 and "ConnectionKey" not in line, line
    assert target.ground_truth() == []


def test_a_reference_that_does_not_score_is_refused_after_one_request(
    start_mock: Callable[..., MockProcess], hostile: Callable[[str], HostileProcess],
    tmp_path: Path,
) -> None:  # fmt: skip
    target = start_mock("--seed", "4")
    plain = hostile("ok")  # answers completions, without prompt_logprobs
    done = _run(tmp_path, target.url, "--score-reference", plain.url)
    assert done.returncode == 2
    assert "does not score generations" in one_error_line(done)
    assert len(plain.seen()) == 1 and target.ground_truth() == []


def _interrupt_calibration(tmp_path: Path, target: str, *reference: str) -> tuple[int, str, Path]:
    """Start a scored soak, SIGTERM it once it says it calibrates; (exit, stderr, database)."""
    db = tmp_path / "r.sqlite"
    process = subprocess.Popen(
        [sys.executable, "-m", "soakgate", "run", "--target", target, *reference,
         "--calibration", "50000", "--false-flag-rate", "0.001", "--requests", "10",
         "--max-tokens", "16", "--db", str(db), "--quiet", "--no-watch-metrics"],
        cwd=tmp_path, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
        env=os.environ,
    )  # fmt: skip
    assert process.stderr is not None
    try:
        lines = [process.stderr.readline()]
        while lines[-1] and "calibrating reference scoring" not in lines[-1]:
            lines.append(process.stderr.readline())
        process.send_signal(signal.SIGTERM)
        _, rest = process.communicate(timeout=300)
    finally:
        if process.poll() is None:  # it ignored the signal: end it, leave nothing behind
            process.kill()
            process.communicate()
    return process.returncode, "".join(lines) + rest, db


def _stored(db: Path) -> tuple[list[tuple[str, str]], int]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as check:
        runs = check.execute("SELECT run_id, status FROM runs").fetchall()
        (rows,) = check.execute("SELECT COUNT(*) FROM generations").fetchone()
    return runs, rows


def test_sigterm_stops_the_calibration_at_once(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    target, reference = start_mock("--seed", "5"), start_mock("--seed", "6")
    code, err, db = _interrupt_calibration(tmp_path, target.url, "--score-reference", reference.url)
    assert code == 130, err
    assert "Traceback" not in err
    runs, rows = _stored(db)
    assert [status for _, status in runs] == ["interrupted"] and rows == 0
    assert target.ground_truth() == []  # the soak never started
    assert len(reference.ground_truth()) < 50000  # the calibration did not run to its end


@needs_model
@pytest.mark.slow
def test_sigterm_stops_an_in_process_models_calibration_at_once(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    target = start_mock("--seed", "7")
    code, err, db = _interrupt_calibration(
        tmp_path, target.url, "--reference-model", str(model_dir())
    )
    assert code == 130, err
    runs, rows = _stored(db)
    assert [status for _, status in runs] == ["interrupted"] and rows == 0
