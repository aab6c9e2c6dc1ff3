"""Ctrl-C/SIGTERM is exit 130 for every command that soaks, and nothing after it runs."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from soakgate.mockserver.process import MockProcess
from soakgate.store import open_analysis


def _interrupt_after(
    argv: list[str], seconds: float, cwd: Path
) -> subprocess.CompletedProcess[str]:
    process = subprocess.Popen([sys.executable, "-m", "soakgate", *argv], cwd=cwd, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    time.sleep(seconds)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=90)
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


def test_an_interrupted_sweep_is_130_and_runs_no_further_level(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    mock = start_mock("--tokens-per-s", "300")
    db = tmp_path / "sweep.sqlite"
    done = _interrupt_after(
        ["sweep", "--target", mock.url, "--concurrency", "2,4,8", "--requests-per-level", "400",
         "--max-tokens", "64", "--db", str(db), "--quiet", "--no-watch-metrics"], 8, tmp_path,
    )  # fmt: skip
    assert done.returncode == 130, done.stdout + done.stderr
    assert "interrupted at concurrency 2" in " ".join(done.stdout.split())
    store = open_analysis(db)
    runs = store.runs()
    store.close()
    assert len(runs) == 1 and runs[0].status == "interrupted"


def test_an_interrupted_demo_is_130(tmp_path: Path) -> None:
    done = _interrupt_after(
        ["demo", "--duration", "60s", "--db", str(tmp_path / "demo.sqlite"), "--quiet"], 8, tmp_path
    )
    assert done.returncode == 130, done.stdout + done.stderr
