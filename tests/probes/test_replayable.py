"""Everything needed to replay is stored: each row of a real soak turns back into the exact
body the server read (prompt or messages, every sampling parameter, seed, max_tokens, endpoint,
stream mode, model), and each distinct prompt is stored once per run, also for --prompts FILE."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.cli.helpers import soakgate
from tests.hostile import HostileProcess

from soakgate.probes.replayable import known_prompts, stored_request
from soakgate.store import open_analysis
from soakgate.targets.parse import build_payload

PROMPTS = [
    {"id": "p1", "prompt": "Name three rivers."},
    {"id": "p2", "messages": [{"role": "system", "content": "Be brief."},
                              {"role": "user", "content": "Why is the sky blue?"}]},
    {"id": "p1", "prompt": "Name three rivers."},  # the same prompt twice: stored once
    {"id": "p3", "prompt": "Count to five."},
]  # fmt: skip


def _soak(tmp_path: Path, server: HostileProcess, *flags: str) -> Path:
    db = tmp_path / "runs.sqlite"
    done = soakgate(
        "run", "--target", f"gpu0={server.url}", "--label", "compiled", "--requests", "24",
        "--concurrency", "3", "--max-tokens", "16", "--db", str(db), "--quiet",
        "--no-watch-metrics", *flags, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return db


def _check_every_row_replays_exactly(db: Path, server: HostileProcess) -> int:
    seen = {line["rid"]: line for line in server.seen()}
    store = open_analysis(db)
    try:
        (run,) = store.runs()
        prompts = known_prompts(run, store.prompts(run.run_id))
        rows = list(store.generations(run.run_id))
        for row in rows:
            request = stored_request(run, row, prompts)
            sent = seen[row.request_id]
            assert build_payload(request.spec, request.prompt, request.model or "") == sent["body"]
            assert sent["path"].endswith(
                "/chat/completions" if row.endpoint == "chat" else "/completions"
            )
    finally:
        store.close()
    return len(rows)


def test_every_row_of_a_prompts_file_soak_turns_back_into_the_body_the_server_read(
    tmp_path: Path,
) -> None:
    file = tmp_path / "prompts.jsonl"
    file.write_text("".join(json.dumps(p) + "\n" for p in PROMPTS))
    server = HostileProcess("ok", tmp_path / "seen.jsonl")
    try:
        db = _soak(
            tmp_path, server, "--prompts", str(file), "--endpoint", "chat", "--temperature",
            "0.7", "--top-p", "0.9", "--seed", "5", "--ignore-eos", "--logprobs", "--no-stream",
            "--reference", server.url, "--reference-fraction", "0.5",
        )  # fmt: skip
        assert _check_every_row_replays_exactly(db, server) == 24
    finally:
        server.stop()
    file.unlink()  # the soak's prompts are in the database, not only in the file
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as check:
        stored = check.execute("SELECT prompt_id, text, system FROM prompts ORDER BY 1").fetchall()
        greedy = check.execute(
            "SELECT COUNT(*) FROM generations WHERE details LIKE '%\"greedy\":true%'"
        ).fetchone()[0]
    assert stored == [
        ("p1", "Name three rivers.", None),
        ("p2", "Why is the sky blue?", "Be brief."),
        ("p3", "Count to five.", None),
    ]
    assert 0 < greedy < 24  # greedy differential rows were replayed greedy, the others sampled


def test_builtin_prompts_are_stored_once_per_run_and_streamed_rows_replay(tmp_path: Path) -> None:
    server = HostileProcess("ok", tmp_path / "seen.jsonl")
    try:
        db = _soak(tmp_path, server)
        assert _check_every_row_replays_exactly(db, server) == 24
        _soak(tmp_path, server, "--label", "eager")  # a second run in the same database
    finally:
        server.stop()
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as check:
        per_run = check.execute(
            "SELECT COUNT(*), COUNT(DISTINCT prompt_id) FROM prompts GROUP BY run_id"
        ).fetchall()
    assert per_run == [(300, 300), (300, 300)]
