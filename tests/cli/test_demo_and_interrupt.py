"""`soakgate demo` matches the mock's ground truth; Ctrl-C stops a soak cleanly with nothing lost."""

from __future__ import annotations

import os
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
    assert "[green]" not in text and "[/]" not in text, text  # a verdict, not markup
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
    deadline = time.monotonic() + 300  # the soak is sending (not a fixed wait: a loaded machine
    while len(mock.ground_truth()) < 12 and time.monotonic() < deadline:  # starts it late)
        time.sleep(0.1)
    soaker.send_signal(signal.SIGINT)
    assert soaker.wait(timeout=300) == 130
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


def test_a_second_signal_stops_at_once_and_keeps_every_row(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    mock = start_mock("--tokens-per-s", "2")  # 64 tokens take 32 s: the 30 s grace would run out
    db = tmp_path / "r.sqlite"
    soaker = subprocess.Popen(
        [sys.executable, "-m", "soakgate", "run", "--target", mock.url, "--duration", "60s",
         "--concurrency", "6", "--max-tokens", "64", "--db", str(db), "--quiet"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    while len(mock.ground_truth()) < 6 and time.monotonic() < deadline:
        time.sleep(0.1)
    soaker.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    soaker.send_signal(signal.SIGTERM)
    _, stderr = soaker.communicate(timeout=300)
    assert soaker.returncode == 130
    assert "signal again to stop now" in stderr and "Traceback" not in stderr
    store = open_store(db)
    rows = list(store.generations())
    (run,) = store.runs()
    store.close()
    assert run.status == "interrupted"
    assert {g.request_id for g in rows} == {row["request_id"] for row in mock.ground_truth()}
    # cancelled, not answered: it did not wait out the 30 s grace (64 tokens take 32 s)
    assert rows and all(g.error_class == "cancelled" for g in rows)


def test_a_second_resume_of_a_run_being_written_is_refused_in_one_line(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    mock = start_mock("--tokens-per-s", "100")  # 1.3 s per request: 40 take ~7 s at 8 in flight
    db = tmp_path / "r.sqlite"
    command = [sys.executable, "-m", "soakgate", "run", "--target", mock.url, "--requests", "40",
               "--label", "L", "--db", str(db), "--quiet"]  # fmt: skip
    first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300  # a few requests in: interrupt it (a completed run is not
    while len(mock.ground_truth()) < 8 and time.monotonic() < deadline:  # resumed)
        time.sleep(0.05)
    first.send_signal(signal.SIGINT)
    _, first_stderr = first.communicate(timeout=300)
    assert first.returncode == 130, first_stderr
    store = open_store(db)
    (run,) = store.runs()
    store.close()
    assert run.status == "interrupted"
    resume = [*command, "--resume", run.run_id]
    # The server stands still while the second resume tries, so the first is surely still
    # writing then (it once finished the rest of the run before the second had started).
    os.kill(mock.pid, signal.SIGSTOP)
    try:
        writer = subprocess.Popen(resume, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True)  # fmt: skip
        lock = tmp_path / f"r.sqlite.{run.run_id}.lock"
        deadline = time.monotonic() + 300
        while not lock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        second = subprocess.run(resume, capture_output=True, text=True, timeout=300)
        assert writer.poll() is None, "the first resume ended while its server stood still"
    finally:
        os.kill(mock.pid, signal.SIGCONT)
    _, writer_stderr = writer.communicate(timeout=300)
    assert writer.returncode == 0, writer_stderr
    assert second.returncode == 2
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and "being written by another soakgate process" in lines[0], lines
    store = open_store(db)
    rows = list(store.generations(run.run_id))
    store.close()
    assert len(rows) == 40 and len({g.request_id for g in rows}) == 40
    assert not lock.exists()
