"""A reference that stops answering costs no row and passes none as clean-scored: the rows it
did not score are stored unscored with the reason, the closed loop goes on."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

from soakgate.mockserver.process import MockProcess
from tests.command_line import soakgate


def test_rows_the_reference_did_not_score_are_stored_unscored(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    candidate = start_mock()
    # the reference answers the calibration (150 samples + 150 scorings), then dies
    reference = start_mock("--die-after", "300")
    db = tmp_path / "t.sqlite"
    result = soakgate(
        "run", "--target", candidate.url, "--score-reference", reference.url, "--requests",
        "300", "--false-flag-rate", "0.01", "--calibration", "150", "--max-tokens", "16",
        "--score-timeout", "2", "--db", str(db), "--quiet", "--no-watch-metrics", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    with sqlite3.connect(db) as connection:
        rows = connection.execute(
            "SELECT suspect, reference_score, details, error_class FROM generations"
        ).fetchall()
    assert len(rows) == 300 and all(r[3] is None for r in rows)  # every candidate row kept
    for suspect, score, details, _ in rows:
        reference = json.loads(details)["reference"]
        assert suspect is None and score is None, reference
        assert reference["status"] == "unscored" and reference["reason"].startswith("reference_")
