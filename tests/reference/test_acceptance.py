"""Reference scoring against the mock's ground truth, through the real CLI and SQLite: fluent
corruption injected at 1% is flagged >= 95% with <= 0.2% false flags on clean generations (an
exact binomial test; streamed and not, completions and chat) at the default false-flag rate and
calibration; the calibration is stored, and reused by the non-streamed soak; collapses are
still collapses (and suspect too)."""

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


def _rows(db: Path, run: int) -> dict[str, tuple[int, int | None, dict[str, object], str | None]]:
    """The rows of the database's run number `run` (0: the first)."""
    with sqlite3.connect(db) as connection:
        run_ids = [r[0] for r in connection.execute("SELECT run_id FROM runs ORDER BY rowid")]
        rows = connection.execute(
            "SELECT request_id, collapsed, suspect, details, error_class FROM generations "
            "WHERE run_id = ?",
            (run_ids[run],),
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
        # one database per endpoint: the non-streamed soak reuses the streamed one's calibration
        # (how answers travel is not what the reference samples)
        db = tmp_path / f"{endpoint}.sqlite"
        for stream in ([], ["--no-stream"]):
            result = soakgate(
                "run", "--target", f"c={candidate.url}", "--score-reference", reference.url,
                "--requests", str(REQUESTS), "--concurrency", "16", "--max-tokens", "64",
                "--endpoint", endpoint, *stream, "--db", str(db), "--quiet",
                "--no-watch-metrics", cwd=tmp_path, timeout=900,
            )  # fmt: skip
            assert result.returncode == 0, result.stderr
            rows = _rows(db, run=len(stream))
            with sqlite3.connect(db) as connection:
                calibration = connection.execute(
                    "SELECT data FROM events WHERE kind = 'reference_calibration' ORDER BY id"
                ).fetchall()
                runs = connection.execute("SELECT detectors FROM runs ORDER BY rowid").fetchall()
            assert len(calibration) == len(runs) == 1 + len(stream), "one calibration per run"
            data = json.loads(calibration[-1][0])
            stored = json.loads(runs[-1][0])
            assert data["n"] == 5000 and data["false_flag_rate"] == 0.001
            assert data["warning"] is None and stored["reference"]["threshold"] == data["threshold"]
            assert (data.get("reused_from") is not None) == bool(stream), data.get("reused_from")
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
    # <= 0.2% false flags, judged by an exact one-sided binomial test at 0.1%: the flags of
    # ~10,000 clean rows under one calibration scatter around its own rate (a CI run of the
    # plain ratio met 24/9,847 = 0.24%, p = 0.19 at 0.2%); a rate of 0.4% fails 73% of the time
    assert stats.binom.sf(false_flags - 1, clean, 0.002) > 0.001, summary
    assert collapses >= 20 and collapsed_counted == collapses == both, summary
