"""Ctrl-C/SIGTERM is exit 130 for every command that soaks, and nothing after it runs."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from soakgate.mockserver.process import MockProcess
from soakgate.store import open_analysis


def _rows(db: Path) -> int:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as check:
            return int(check.execute("SELECT COUNT(*) FROM generations").fetchone()[0])
    except sqlite3.Error:  # not created, or its schema not committed yet
        return 0


def _interrupt_once_stored(
    argv: list[str], db: Path, cwd: Path
) -> subprocess.CompletedProcess[str]:
    """Start a command and Ctrl-C it once it has stored rows (not after a fixed wait: a loaded
    machine can take longer than the wait just to start it)."""
    process = subprocess.Popen([sys.executable, "-m", "soakgate", *argv], cwd=cwd, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.monotonic() + 300
    while process.poll() is None and _rows(db) == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=300)
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


def test_an_interrupted_sweep_is_130_and_runs_no_further_level(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    mock = start_mock("--tokens-per-s", "300")
    db = tmp_path / "sweep.sqlite"
    done = _interrupt_once_stored(
        ["sweep", "--target", mock.url, "--concurrency", "2,4,8", "--requests-per-level", "400",
         "--max-tokens", "64", "--db", str(db), "--quiet", "--no-watch-metrics"], db, tmp_path,
    )  # fmt: skip
    assert done.returncode == 130, done.stdout + done.stderr
    assert "interrupted at concurrency 2" in " ".join(done.stdout.split())
    store = open_analysis(db)
    runs = store.runs()
    store.close()
    assert len(runs) == 1 and runs[0].status == "interrupted"


def test_an_interrupted_demo_is_130(tmp_path: Path) -> None:
    db = tmp_path / "demo.sqlite"
    done = _interrupt_once_stored(["demo", "--duration", "60s", "--db", str(db), "--quiet"], db,
                                  tmp_path)  # fmt: skip
    assert done.returncode == 130, done.stdout + done.stderr
