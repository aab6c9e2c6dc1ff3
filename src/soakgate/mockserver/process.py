"""Run the mock server as a real subprocess on loopback (for tests, `demo` and benchmarks)."""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from soakgate.errors import ServerError
from soakgate.servers.instance import signal_group

_READY = "soakgate-mock listening on "  # kept equal to serve.READY_PREFIX (no import: no cycle)


class MockProcess:
    """`python -m soakgate.mockserver ARGS` in its own process group, ready when constructed
    via `start()` or `with`; `.url`, `.port`, `.pid`, `.ground_truth()`, `.stop()`."""

    def __init__(
        self,
        args: Sequence[str] = (),
        *,
        ground_truth_path: Path | None = None,
        start_timeout_s: float = 20.0,
        stop_grace_s: float = 5.0,
        env: dict[str, str] | None = None,
    ) -> None:
        self._args = list(args)
        self._workdir = Path(tempfile.mkdtemp(prefix="soakgate-mock-"))
        self.ground_truth_path = ground_truth_path or self._workdir / "ground_truth.jsonl"
        self.stderr_path = self._workdir / "stderr.log"
        self._start_timeout_s = start_timeout_s
        self._stop_grace_s = stop_grace_s
        self._env = env
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self.url = ""
        self.port = 0

    @property
    def pid(self) -> int:
        """Process id (also the process group id)."""
        if self._proc is None:
            raise ServerError("the mock server was not started")
        return self._proc.pid

    def command(self) -> list[str]:
        """The full command line that is (or would be) run."""
        args = list(self._args)
        if not any(a == "--port" or a.startswith("--port=") for a in args):
            args += ["--port", "0"]
        if not any(a == "--ground-truth" or a.startswith("--ground-truth=") for a in args):
            args += ["--ground-truth", str(self.ground_truth_path)]
        return [sys.executable, "-m", "soakgate.mockserver", *args]

    def start(self) -> MockProcess:
        """Start the process and wait (bounded) for its readiness line."""
        self._stderr = self.stderr_path.open("wb")
        self._proc = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            start_new_session=True,
            env=self._env,
        )
        line = self._read_ready_line()
        if not line.startswith(_READY):
            tail = self.stderr_tail()
            self.stop()
            raise ServerError(f"mock server did not start: {line.strip() or 'no output'}; {tail}")
        self.url = line[len(_READY) :].strip()
        self.port = int(self.url.rsplit(":", 1)[1])
        return self

    def _read_ready_line(self) -> str:
        """First stdout line, or what arrived before the deadline or the process exit."""
        assert self._proc is not None and self._proc.stdout is not None
        stdout = self._proc.stdout
        deadline = time.monotonic() + self._start_timeout_s
        buffer = b""
        with selectors.DefaultSelector() as selector:
            selector.register(stdout, selectors.EVENT_READ)
            while b"\n" not in buffer and (left := deadline - time.monotonic()) > 0:
                if not selector.select(min(left, 0.5)):
                    if self._proc.poll() is not None:
                        break
                    continue
                chunk = os.read(stdout.fileno(), 4096)
                if not chunk:
                    break
                buffer += chunk
        return buffer.decode("utf-8", "replace").split("\n", 1)[0] + (
            "\n" if b"\n" in buffer else ""
        )

    def stderr_tail(self, chars: int = 2000) -> str:
        """The last characters the process wrote to stderr."""
        try:
            return self.stderr_path.read_text("utf-8", "replace")[-chars:]
        except OSError:
            return ""

    def poll(self) -> int | None:
        """Exit code, or None while running."""
        return None if self._proc is None else self._proc.poll()

    def wait(self, timeout_s: float) -> int:
        """Wait for the process to exit; raises ServerError when it is still running."""
        assert self._proc is not None
        try:
            return self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise ServerError(f"mock server {self.pid} still running after {timeout_s} s") from None

    def ground_truth(self) -> list[dict[str, Any]]:
        """Parsed ground-truth lines (a partial last line, being written, is skipped)."""
        try:
            lines = self.ground_truth_path.read_text("utf-8").splitlines()
        except FileNotFoundError:
            return []
        records = []
        for line in lines:
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
        return records

    def stop(self) -> int | None:
        """SIGTERM the process group, then SIGKILL after the grace period; returns the exit code."""
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(self._stop_grace_s)
            except subprocess.TimeoutExpired:
                signal_group(proc.pid, signal.SIGKILL)
                proc.wait(self._stop_grace_s)
        if proc.stdout is not None:
            proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
        self._proc = proc  # keep pid/poll usable after stop
        return proc.returncode

    def close(self) -> None:
        """Stop the process and delete its temporary folder."""
        self.stop()
        shutil.rmtree(self._workdir, ignore_errors=True)

    def __enter__(self) -> MockProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
