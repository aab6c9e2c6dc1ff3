"""`--resume` continues a run with its stored request and load settings: an explicit flag that
differs is refused by name (exit 2, nothing sent), and a completed run is not resumed."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.cli.helpers import one_error_line, soakgate

from soakgate.errors import StoreError
from soakgate.load.resume import soaked_seconds
from soakgate.mockserver.process import MockProcess
from soakgate.store import open_analysis


def _rows(db: Path) -> int:
    try:
        store = open_analysis(db)
    except StoreError:  # created, but its schema is not committed yet
        return 0
    try:
        return sum(1 for _ in store.generations())
    finally:
        store.close()


def _interrupted_run(mock: MockProcess, db: Path, cwd: Path) -> str:
    soaker = subprocess.Popen(
        [sys.executable, "-m", "soakgate", "run", "--target", f"gpu0={mock.url}", "--label", "s",
         "--requests", "300", "--concurrency", "4", "--max-tokens", "64", "--temperature", "0.8",
         "--db", str(db), "--quiet", "--no-watch-metrics"],
        cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not db.exists() or _rows(db) < 40):
        time.sleep(0.2)
    soaker.send_signal(signal.SIGINT)
    assert soaker.wait(timeout=60) == 130
    store = open_analysis(db)
    (run,) = store.runs()
    store.close()
    assert run.status == "interrupted"
    return run.run_id


def test_resume_refuses_differing_flags_then_continues_with_the_stored_settings(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    mock = start_mock("--tokens-per-s", "3000")
    db = tmp_path / "runs.sqlite"
    run_id = _interrupted_run(mock, db, tmp_path)
    stored = _rows(db)
    assert 40 <= stored < 300
    sent = len(mock.ground_truth())
    common = ["run", "--resume", run_id, "--target", f"gpu0={mock.url}", "--label", "s",
              "--db", str(db), "--quiet", "--no-watch-metrics"]  # fmt: skip

    refused = soakgate(*common, "--requests", "300", "--max-tokens", "16", "--temperature", "0",
                       cwd=tmp_path)  # fmt: skip
    assert refused.returncode == 2
    line = one_error_line(refused)
    assert "--max-tokens 16 (stored: 64)" in line and "--temperature 0.0 (stored: 0.8)" in line
    assert _rows(db) == stored and len(mock.ground_truth()) == sent  # nothing was sent

    for flags in (["--concurrency", "9"], ["--requests", "1000"], ["--no-stream"]):
        other = soakgate(*common, *flags, cwd=tmp_path)
        assert other.returncode == 2 and flags[0] in one_error_line(other)

    same = soakgate(*common, "--max-tokens", "64", cwd=tmp_path)  # the stored value: accepted
    assert same.returncode == 0, same.stderr
    store = open_analysis(db)
    rows = list(store.generations(run_id))
    (run,) = store.runs()
    store.close()
    assert len(rows) == 300 and run.status == "completed"
    assert {g.completion_tokens for g in rows} == {64}
    after = mock.ground_truth()[sent:]
    assert len(after) == 300 - stored
    assert {(r["max_tokens"], r["temperature"]) for r in after} == {(64, 0.8)}
    assert run.load["max_tokens"] == 64 and run.load["temperature"] == 0.8

    again = soakgate(*common, cwd=tmp_path)
    assert again.returncode == 2
    assert "already completed" in one_error_line(again)
    assert len(mock.ground_truth()) == sent + len(after)


def test_resume_without_flags_takes_the_stored_bound_and_sampling(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    mock = start_mock("--tokens-per-s", "3000")
    db = tmp_path / "runs.sqlite"
    run_id = _interrupted_run(mock, db, tmp_path)
    resumed = soakgate("run", "--resume", run_id, "--target", f"gpu0={mock.url}", "--label", "s",
                       "--db", str(db), "--quiet", cwd=tmp_path)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr  # no --requests needed: the stored bound
    assert _rows(db) == 300
    assert {r["max_tokens"] for r in mock.ground_truth()} == {64}


def test_resume_of_a_run_soaked_from_a_prompts_file_needs_that_file(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    mock = start_mock("--tokens-per-s", "3000")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(f'{{"prompt": "question {i}"}}\n' for i in range(30)))
    db = tmp_path / "runs.sqlite"
    soaker = subprocess.Popen(
        [sys.executable, "-m", "soakgate", "run", "--target", f"gpu0={mock.url}", "--label", "s",
         "--requests", "3000", "--concurrency", "4", "--max-tokens", "64", "--prompts",
         str(prompts), "--db", str(db), "--quiet", "--no-watch-metrics"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 300  # rows stored: the soak runs (not a wait of fixed length)
    while time.monotonic() < deadline and (not db.exists() or _rows(db) < 20):
        time.sleep(0.2)
    soaker.send_signal(signal.SIGINT)
    assert soaker.wait(timeout=60) == 130
    store = open_analysis(db)
    (run,) = store.runs()
    store.close()
    common = ["run", "--resume", run.run_id, "--target", f"gpu0={mock.url}", "--label", "s",
              "--db", str(db), "--quiet"]  # fmt: skip
    builtin = soakgate(*common, cwd=tmp_path)
    assert builtin.returncode == 2 and "--prompts FILE" in one_error_line(builtin)
    prompts.write_text("".join(f'{{"prompt": "other {i}"}}\n' for i in range(30)))
    changed = soakgate(*common, "--prompts", str(prompts), cwd=tmp_path)
    assert changed.returncode == 2 and "another prompt set" in one_error_line(changed)


def test_resume_of_a_duration_run_soaks_only_what_is_left_of_it(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    mock = start_mock("--tokens-per-s", "3000")
    db = tmp_path / "runs.sqlite"
    soaker = subprocess.Popen(
        [sys.executable, "-m", "soakgate", "run", "--target", f"gpu0={mock.url}", "--label", "d",
         "--duration", "12s", "--concurrency", "4", "--max-tokens", "32", "--db", str(db),
         "--quiet", "--no-watch-metrics"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and (not db.exists() or _rows(db) < 20):
        time.sleep(0.2)
    soaker.send_signal(signal.SIGINT)
    assert soaker.wait(timeout=60) == 130
    store = open_analysis(db)
    (run,) = store.runs()
    first = soaked_seconds(run, store.events(run.run_id), (g.ended_at for g in store.generations()))
    store.close()
    resumed = soakgate("run", "--resume", run.run_id, "--target", f"gpu0={mock.url}", "--label",
                       "d", "--db", str(db), "--quiet", cwd=tmp_path)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    store = open_analysis(db)
    (resumed_event,) = [e for e in store.events(run.run_id) if e.kind == "resumed"]
    (finished,) = store.runs()
    store.close()
    assert 0 < first < 12.0 and finished.status == "completed"
    # it soaks what was left of the 12 s, not 12 s again
    assert resumed_event.data["duration_left_s"] == pytest.approx(12.0 - first, abs=1e-6)
