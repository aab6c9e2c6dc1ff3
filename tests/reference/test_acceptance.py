"""Reference scoring against the mock's ground truth, through the real CLI and SQLite: fluent
corruption injected at 1% is flagged >= 95% with <= 0.2% false flags on clean generations
(streamed and not, completions and chat) at the default false-flag rate and calibration; the
calibration is stored; collapses are still collapses (and suspect too)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from scipy import stats

from soakgate.mockserver.process import MockProcess
from tests.command_line import soakgate

REQUESTS = 2500  # per variant: 10,000 generations, ~100 fluently corrupted, in all


def _bounds(hits: int, n: int) -> tuple[float, float]:
    """Exact two-sided 95% Clopper-Pearson interval."""
    lower = stats.beta.ppf(0.025, hits, n - hits + 1) if hits else 0.0
    upper = stats.beta.ppf(0.975, hits + 1, n - hits) if hits < n else 1.0
    return float(lower), float(upper)


def _rows(db: Path) -> dict[str, tuple[int, int | None, dict[str, object], str | None]]:
    with sqlite3.connect(db) as connection:
        rows = connection.execute(
            "SELECT request_id, collapsed, suspect, details, error_class FROM generations"
        ).fetchall()
    return {r[0]: (r[1], r[2], json.loads(r[3]), r[4]) for r in rows}


@pytest.mark.slow
@pytest.mark.timeout(3600)  # four scored soaks with their calibrations: minutes on a loaded machine
def test_fluent_corruption_is_flagged_and_clean_rows_are_not(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    candidate = start_mock("--seed", "7", "--fluent-rate", "0.01", "--collapse-rate", "0.005")
    reference = start_mock("--seed", "8")
    injected = flagged = clean = false_flags = collapses = collapsed_counted = both = 0
    for endpoint in ("completions", "chat"):
        for stream in ([], ["--no-stream"]):
            db = tmp_path / f"{endpoint}{len(stream)}.sqlite"
            result = soakgate(
                "run", "--target", f"c={candidate.url}", "--score-reference", reference.url,
                "--requests", str(REQUESTS), "--concurrency", "16", "--max-tokens", "64",
                "--endpoint", endpoint, *stream, "--db", str(db), "--quiet",
                "--no-watch-metrics", cwd=tmp_path, timeout=900,
            )  # fmt: skip
            assert result.returncode == 0, result.stderr
            rows = _rows(db)
            with sqlite3.connect(db) as connection:
                calibration = connection.execute(
                    "SELECT data FROM events WHERE kind = 'reference_calibration'"
                ).fetchall()
                stored = json.loads(connection.execute("SELECT detectors FROM runs").fetchone()[0])
            assert len(calibration) == 1, "one calibration stored with the run"
            data = json.loads(calibration[0][0])
            assert data["n"] == 5000 and data["false_flag_rate"] == 0.001
            assert data["warning"] is None and stored["reference"]["threshold"] == data["threshold"]
            truth = {
                t["request_id"]: t for t in candidate.ground_truth() if t["request_id"] in rows
            }
            assert len(truth) == REQUESTS
            for request_id, t in truth.items():
                was_collapsed, suspect, details, error = rows[request_id]
                assert error is None
                assert suspect is not None, details.get("reference")  # every row was scored
                if t["injected"]:
                    collapses += 1
                    collapsed_counted += was_collapsed
                    both += was_collapsed and suspect
                elif t["fluent"]:
                    injected += 1
                    flagged += suspect
                    first = details["reference"]["first"]  # type: ignore[index]
                    assert (
                        first["position"] in t["fluent_positions"]
                        or first["position"] - 1 in (t["fluent_positions"])
                    )
                    assert not was_collapsed, "fluent corruption is not degenerate"
                else:
                    clean += 1
                    false_flags += suspect
                    assert not was_collapsed
    detection, misses = _bounds(flagged, injected), _bounds(false_flags, clean)
    summary = (f"flagged {flagged}/{injected} (95% CI {detection[0]:.3f}-{detection[1]:.3f}); "
               f"false flags {false_flags}/{clean} (95% CI {misses[0]:.4f}-{misses[1]:.4f}); "
               f"collapses counted {collapsed_counted}/{collapses}, also suspect {both}")  # fmt: skip
    print(summary)
    assert injected >= 60 and clean >= 9000, summary
    assert flagged / injected >= 0.95, summary
    assert false_flags / clean <= 0.002, summary
    assert collapses >= 20 and collapsed_counted == collapses == both, summary
