"""Kill a real `python -m soakgate campaign` process mid-block and resume it: finished blocks
are not rerun, the interrupted block continues in the same run, nothing stored is lost."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from soakgate.campaign.state import reap_orphans
from soakgate.store import open_store
from tests.campaign.helpers import query, write_campaign

REQUESTS = 30


def _campaign(path: Path, db: Path, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "soakgate", "campaign", str(path), "--db", str(db), "--quiet",
         *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def _wait_mid_second_block(process: subprocess.Popen[bytes], db: Path) -> None:
    """Until block 0 is completed and block 1 has stored some (not all) generations."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and process.poll() is None:
        with contextlib.suppress(sqlite3.OperationalError):  # schema not created yet
            rows = query(
                db, "SELECT COUNT(*) FROM generations g JOIN runs r ON g.run_id = r.run_id "
                "WHERE r.campaign = 't/001-graph-r0'",
            )  # fmt: skip
            if rows[0][0] >= 4:
                return
        time.sleep(0.05)
    raise AssertionError(f"the campaign never reached block 1: {process.poll()}")


def test_sigkill_then_resume_reruns_nothing_and_loses_nothing(tmp_path: Path) -> None:
    slow = "--tokens-per-s 150"  # 16 tokens: ~0.1 s a request, so a block lasts a few seconds
    path = write_campaign(tmp_path, {"eager": slow, "graph": slow}, requests=REQUESTS)
    db = tmp_path / "runs.sqlite"
    first = _campaign(path, db)
    try:
        _wait_mid_second_block(first, db)
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=10)  # reaps it and closes its pipes
        before = _snapshot(db)
        assert before["done"] == ["t/000-eager-r0"]
        resumed = _campaign(path, db, "--resume")
        _, err = resumed.communicate(timeout=150)
        assert resumed.returncode == 0, err.decode()
        after = _snapshot(db)
    finally:
        _cleanup(db)
    assert before["ids"] <= after["ids"]  # nothing stored before the kill was lost
    assert after["done"] == ["t/000-eager-r0", "t/001-graph-r0"]
    assert after["runs"] == 2  # the interrupted block continued in its own run
    assert after["starts"]["t/000-eager-r0"] == 1  # the finished block never restarted
    assert after["resumed"] == ["t/001-graph-r0"]
    for block, counts in after["per_target"].items():
        assert counts == {"cpu:0": REQUESTS, "cpu:1": REQUESTS}, block
    assert after["orphans"] == 2  # the killed campaign's two servers were stopped
    assert after["unique_seq"]
    # The continued block's servers are new incarnations: rows say which one served them.
    assert after["incarnations"] == {"t/000-eager-r0": [0], "t/001-graph-r0": [0, 1]}
    # What the killed block had leased past its last stored row may have been sent already:
    # the resumed block says so for exactly those rows (issue 27), the finished block not at all.
    resent = query(db, "SELECT r.campaign, e.data FROM events e JOIN runs r "
                       "ON r.run_id = e.run_id WHERE e.kind = 'resent'")  # fmt: skip
    assert [block for block, _ in resent] == ["t/001-graph-r0"]
    ((first, last, certain),) = json.loads(resent[0][1])["ranges"]
    assert json.loads(resent[0][1])["cause"] == "killed" and certain is False
    marked = query(db, "SELECT r.campaign, g.seq, json_extract(g.details, '$.resent.possible') "
                       "FROM generations g JOIN runs r ON r.run_id = g.run_id "
                       "WHERE json_extract(g.details, '$.resent') IS NOT NULL")  # fmt: skip
    assert marked and all(b == "t/001-graph-r0" and first <= seq <= last and possible == 1
                          for b, seq, possible in marked)  # fmt: skip


def _snapshot(db: Path) -> dict[str, object]:
    done = [
        r[0] for r in query(
            db, "SELECT json_extract(data, '$.block') FROM events WHERE kind='block_completed' "
            "ORDER BY at",
        )
    ]  # fmt: skip
    per_target: dict[str, Counter[str]] = {}
    for block, target, n in query(
        db, "SELECT r.campaign, g.target, COUNT(*) FROM generations g JOIN runs r "
        "ON g.run_id = r.run_id GROUP BY 1, 2",
    ):  # fmt: skip
        per_target.setdefault(block, Counter())[target] = n
    starts = Counter(r[0] for r in query(
        db, "SELECT json_extract(data, '$.block') FROM events WHERE kind='block_started'"))  # fmt: skip
    seqs = query(db, "SELECT COUNT(*) = COUNT(DISTINCT run_id || '/' || seq) FROM generations")
    return {
        "done": done, "per_target": per_target, "starts": starts,
        "ids": {r[0] for r in query(db, "SELECT request_id FROM generations")},
        "runs": query(db, "SELECT COUNT(*) FROM runs")[0][0],
        "resumed": [r[0] for r in query(
            db, "SELECT json_extract(data, '$.block') FROM events WHERE kind='resumed'")],
        "orphans": query(db, "SELECT COUNT(*) FROM events WHERE kind='orphan_stopped'")[0][0],
        "unique_seq": bool(seqs[0][0]),
        "incarnations": {
            block: sorted(int(i) for i in incs.split(","))
            for block, incs in query(
                db, "SELECT campaign, GROUP_CONCAT(DISTINCT incarnation) FROM generations g "
                "JOIN runs r ON g.run_id = r.run_id GROUP BY 1",
            )
        },
    }  # fmt: skip


def _cleanup(db: Path) -> None:
    """Stop any server a failed test left behind (by recorded pid and exact command line)."""
    if db.exists():
        store = open_store(db)
        try:
            reap_orphans(store, store.runs())
        finally:
            store.close()
    assert os.name == "posix"
