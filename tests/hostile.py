"""Start `tests.hostile_server` as a real process on loopback, and run the real CLI against it."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Hostile:
    """A running hostile server: its URL and the requests it received."""

    url: str
    log: Path
    process: subprocess.Popen[bytes]

    def received(self) -> list[str]:
        """Request ids of the generation requests the server received, in order."""
        if not self.log.exists():
            return []
        return [line.split(" ", 1)[1] for line in self.log.read_text().splitlines()]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_hostile(tmp_path: Path, scenario: str) -> Hostile:
    """A hostile server process playing `scenario` (see tests/hostile_server.py)."""
    port_file, log = tmp_path / f"{scenario}.port", tmp_path / f"{scenario}.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.hostile_server", "--scenario", scenario,
         "--port-file", str(port_file), "--log", str(log)], cwd=ROOT,
    )  # fmt: skip
    deadline = time.monotonic() + 20
    while not port_file.exists() or not port_file.read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"hostile server {scenario} did not start")
        time.sleep(0.05)
    return Hostile(f"http://127.0.0.1:{port_file.read_text()}", log, process)


def soakgate(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The real `soakgate` command line, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "soakgate", *args], capture_output=True, text=True,
        timeout=timeout, cwd=cwd,
    )  # fmt: skip
