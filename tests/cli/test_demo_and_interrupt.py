"""`soakgate demo` matches the mock's ground truth; Ctrl-C stops a soak cleanly with nothing lost."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from soakgate.mockserver.process import MockProcess
from soakgate.store import open_store


def test_demo_reports_an_exact_match(tmp_path: Path) -> None:
    db = tmp_path / "demo.sqlite"
    result = subprocess.run(
        [sys.executable, "-m", "soakgate", "demo", "--duration", "4s", "--db", str(db), "--quiet"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    text = " ".join(result.stdout.split())
    assert "exact match" in text and "soakgate summary" in text
    store = open_store(db)
    rows = list(store.generations())
    store.close()
    assert len(rows) > 50
    assert f"{sum(g.collapsed for g in rows)} detected" in text


def test_ctrl_c_stops_cleanly_and_keeps_every_result(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    mock = start_mock("--tokens-per-s", "200")  # slow streams: requests are in flight at Ctrl-C
    db = tmp_path / "r.sqlite"
    soaker = subprocess.Popen(
        [sys.executable, "-m", "soakgate", "run", "--target", mock.url, "--duration", "60s",
         "--concurrency", "6", "--max-tokens", "64", "--db", str(db), "--quiet"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(4)
    soaker.send_signal(signal.SIGINT)
    assert soaker.wait(timeout=45) == 130
    store = open_store(db)
    rows = list(store.generations())
    (run,) = store.runs()
    store.close()
    sent = {row["request_id"] for row in mock.ground_truth()}
    assert run.status == "interrupted" and run.ended_at is not None
    assert {g.request_id for g in rows} == sent  # every request the server saw is stored
    assert all(g.ok or g.error_class == "cancelled" for g in rows)


def test_store_text_flagged_keeps_hashes_and_flagged_text(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    mock = start_mock("--collapse-rate", "0.1", "--seed", "4")
    db = tmp_path / "r.sqlite"
    subprocess.run(
        [sys.executable, "-m", "soakgate", "run", "--target", mock.url, "--requests", "200",
         "--db", str(db), "--quiet", "--store-text", "flagged", "--max-tokens", "128"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    store = open_store(db)
    rows = list(store.generations())
    store.close()
    assert all(len(g.text_sha256) == 64 for g in rows)
    assert all(g.text is not None for g in rows if g.collapsed)
    kept_clean = [g for g in rows if not g.collapsed and g.text is not None]
    assert 0 < len(kept_clean) <= 200 // 100 + 1  # the 1-in-100 sample of clean text
