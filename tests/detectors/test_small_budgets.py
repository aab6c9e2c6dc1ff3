"""Issue 12: detection must not weaken with a small token budget.

Through the real CLI against the real mock server on loopback, without token ids, every
collapse the mock injects is flagged at every `--max-tokens` >= 16, and no generation that the
mock left clean is flagged; a budget below what a detector needs is warned about once, on
stderr and as an event stored with the run.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.campaign.helpers import query, write_campaign

from soakgate.mockserver.process import MockProcess

BUDGETS = (16, 23, 32, 64, 128)  # 23: an odd budget, where half of it is not a whole token


def soakgate(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m soakgate ARGS`, as a user runs it."""
    command = [sys.executable, "-m", "soakgate", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def soak(
    mock: MockProcess, db: Path, max_tokens: int, *flags: str
) -> subprocess.CompletedProcess[str]:
    done = soakgate(
        "run", "--target", mock.url, "--requests", "150", "--concurrency", "8",
        "--max-tokens", str(max_tokens), "--db", str(db), "--quiet", *flags,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done


def stored_rows(db: Path) -> list[sqlite3.Row]:
    """The soak's generations as stored in SQLite."""
    with sqlite3.connect(db) as con:
        con.row_factory = sqlite3.Row
        return con.execute(
            "SELECT request_id, collapsed, flags, details, finish_reason, token_ids, text,"
            " error_class FROM generations"
        ).fetchall()


@pytest.mark.slow
@pytest.mark.parametrize("endpoint", ["completions", "chat"])
@pytest.mark.parametrize("stream", [True, False])
def test_every_injected_collapse_is_flagged_at_every_budget_from_16(
    start_mock: Callable[..., MockProcess], tmp_path: Path, endpoint: str, stream: bool
) -> None:
    # A third of the requests collapse (the mock's `!` runs, word loops and empty outputs run
    # from a random point to the end of the budget, at least half of it); a fifth of the clean
    # ones stop early, so clean rows are cut by the budget and not.
    mock = start_mock("--seed", "12", "--collapse-rate", "0.33", "--stop-rate", "0.2")
    flags = ["--endpoint", endpoint] + ([] if stream else ["--no-stream"])
    truth = {}
    for budget in BUDGETS:
        db = tmp_path / f"b{budget}.sqlite"
        soak(mock, db, budget, *flags)
        truth.update({row["request_id"]: row for row in mock.ground_truth()})
        rows = stored_rows(db)
        assert len(rows) == 150
        caught: Counter[str] = Counter()
        injected: Counter[str] = Counter()
        for row in rows:
            fact = truth[row["request_id"]]
            assert row["error_class"] is None and row["token_ids"] is None  # no ids asked for
            if fact["injected"]:
                injected[fact["injected"]] += 1
                caught[fact["injected"]] += row["collapsed"]
                assert row["collapsed"], (budget, fact["injected"], row["text"], row["details"])
            else:
                assert not row["collapsed"], (budget, row["flags"], row["details"], row["text"])
        # every kind was injected at this budget, and each cut clean row was seen too
        assert set(injected) == {"bang_run", "word_loop", "empty"}, injected
        assert caught == injected
        finishes = Counter(
            row["finish_reason"] for row in rows if not truth[row["request_id"]]["injected"]
        )
        assert finishes["length"] > 20 and finishes["stop"] > 5, finishes


def detector_budget_events(db: Path) -> list[dict[str, object]]:
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT data FROM events WHERE kind = 'detector_budget'").fetchall()
    return [json.loads(data) for (data,) in rows]


def test_a_budget_too_small_for_a_detector_is_warned_once_and_stored(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    mock = start_mock("--seed", "3")
    db = tmp_path / "small.sqlite"
    done = soak(mock, db, 12)
    warnings = [line for line in done.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1, done.stderr
    line = warnings[0]
    assert line.startswith("soakgate: warning: --max-tokens 12 is below what the detectors need")
    assert "char_run needs >= 16" in line and "word_loop needs >= 16" in line
    assert "8 characters" in line and "8 words" in line
    assert "empty" not in line  # 12 tokens are enough to see a blank output
    (event,) = detector_budget_events(db)
    assert event["message"] == line.removeprefix("soakgate: warning: ")
    tiny = soak(mock, tmp_path / "tiny.sqlite", 3)
    assert "empty needs >= 4" in tiny.stderr


def test_a_budget_large_enough_gives_no_warning(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    mock = start_mock("--seed", "3")
    db = tmp_path / "enough.sqlite"
    done = soak(mock, db, 16)
    assert "warning" not in done.stderr
    assert detector_budget_events(db) == []


def test_a_campaign_with_a_budget_too_small_warns_once_and_stores_it_per_block(
    tmp_path: Path,
) -> None:
    campaign = write_campaign(tmp_path, {"eager": "--seed 1"}, requests=4, max_tokens=10)
    db = tmp_path / "campaign.sqlite"
    done = soakgate("campaign", str(campaign), "--db", str(db), "--quiet")
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "--max-tokens 10 is below" in warnings[0], done.stderr
    events = query(db, "SELECT run_id, data FROM events WHERE kind = 'detector_budget'")
    runs = query(db, "SELECT run_id FROM runs")
    assert {run_id for run_id, _ in events} == {run_id for (run_id,) in runs}  # one per block
    assert all(json.loads(data)["message"] in warnings[0] for _, data in events)
