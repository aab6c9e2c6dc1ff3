"""One response that SQLite cannot hold as sent costs its own row's fidelity, never the batch."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.command_line import soakgate
from tests.hostile import HostileProcess


def rows(db: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT seq, request_id, error_class, completion_tokens, prompt_tokens, text, "
            "token_ids IS NULL, details FROM generations ORDER BY seq"
        ).fetchall()


@pytest.mark.parametrize("scenario", ["lone-surrogate", "huge-usage", "huge-token-id"])
def test_one_unstorable_answer_is_one_row_and_every_other_row_is_stored(
    scenario: str, hostile: Callable[[str], HostileProcess], tmp_path: Path
) -> None:
    server = hostile(scenario)
    db = tmp_path / "d.sqlite"
    result = soakgate(
        "run", "--target", server.url, "--requests", "400", "--concurrency", "4",
        "--no-stream", "--token-ids", "--db", str(db), "--quiet", "--no-watch-metrics",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    stored = rows(db)
    assert len(stored) == 400
    assert sorted(r[1] for r in stored) == sorted(server.request_ids())
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT status FROM runs").fetchall() == [("completed",)]
    (bad,) = [
        r for r in stored if r[1] == server.request_ids()[7]
    ]  # the 8th answer was the bad one
    assert all(r[2] is None for r in stored)  # no row lost its answer to an error
    assert [r for r in stored if "unstorable" in json.loads(r[7])] == [bad]
    details = json.loads(bad[7])
    if scenario == "lone-surrogate":
        assert bad[5] == "broken \ufffd text"  # stored as valid UTF-8
        assert details["unstorable"]["text"] == {"lone_surrogates": 1}
    elif scenario == "huge-usage":
        assert bad[3] is None and bad[4] is None
        assert details["unstorable"]["completion_tokens"] == str(2**64)
        assert details["unstorable"]["prompt_tokens"] == str(2**63)
    else:
        assert bad[6] == 1  # token ids not stored as a truncated or wrapped array
        assert details["unstorable"]["token_ids"] == {
            "count": 4,
            "out_of_range": 1,
            "first": str(2**31),
        }
