"""Issue 29 item 5: a run of one separator character that fills a cut output's budget is a
collapse, through the real CLI against a server on loopback, streamed and not, completions and
chat; an ordinary output cut at a rule, an underline or leader dots is not."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from tests.command_line import soakgate
from tests.hostile import BUDGET_COLLAPSES, HostileProcess


@pytest.mark.parametrize(("endpoint", "stream"), [("completions", []), ("chat", ["--no-stream"])])
def test_separator_runs_filling_the_budget_are_flagged_and_cut_rules_are_not(
    tmp_path: Path, endpoint: str, stream: list[str]
) -> None:
    server = HostileProcess("budget-fill", tmp_path / "seen.jsonl")
    try:
        result = soakgate(
            "run", "--target", server.url, "--requests", "48", "--concurrency", "1",
            "--max-tokens", "16", "--endpoint", endpoint, *stream, "--db",
            str(tmp_path / "s.sqlite"), "--quiet", "--no-watch-metrics", cwd=tmp_path,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        answered = {r["rid"]: r["text"] for r in server.seen()}
    finally:
        server.stop()
    with sqlite3.connect(tmp_path / "s.sqlite") as connection:
        rows = connection.execute(
            "SELECT request_id, collapsed, details FROM generations WHERE error_class IS NULL"
        ).fetchall()
    assert len(rows) == 48
    for request_id, collapsed, details in rows:
        text = answered[request_id]
        assert bool(collapsed) == (text in BUDGET_COLLAPSES), (text, details)
        if collapsed:
            evidence = json.loads(details)["char_run"]
            assert evidence["class"] == "separator" and evidence["tail"] is True
    assert sum(bool(c) for _, c, _ in rows) == 16  # every third request
