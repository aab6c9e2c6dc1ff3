"""A live HTML report during a soak: an observer of the soak (`on_tick`, `close`) that rewrites
the report every few minutes, so an operator can look in on a days-long run.

Each refresh is `soakgate report DB --html ...` in a child process at lower priority: the
analysis reads the database read-only, as it would from another terminal, and takes no CPU
time or memory from the soak's own process. One refresh at a time; the page is replaced whole
(written beside it, then renamed) only when a refresh succeeds, so it is never half-written.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

FINAL_TIMEOUT_S = 600.0
"""How long the refresh after the soak may take (a 10M-generation report takes about 40 s)."""


class LiveReport:
    """Refreshes `html` from `db` every `every_s` seconds of soak (the first after the first
    interval), and once more when the soak has ended (not after an interrupt)."""

    def __init__(self, db: Path, html: Path, every_s: float | None) -> None:
        self.db, self.html, self.every_s = Path(db), Path(html), every_s
        self.partial = self.html.with_name(f".{self.html.name}.partial")
        self.refreshes = 0
        """Refreshes that succeeded."""
        self.failures: list[str] = []
        """One line per refresh that failed."""
        self._child: subprocess.Popen[bytes] | None = None
        self._due = every_s if every_s is not None else float("inf")

    def _start(self) -> None:
        argv = [sys.executable, "-m", "soakgate", "report", str(self.db), "--html",
                str(self.partial)]  # fmt: skip
        self._child = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
        )
        with contextlib.suppress(OSError):  # lower priority: the soak comes first
            os.setpriority(os.PRIO_PROCESS, self._child.pid, 10)

    def _reap(self) -> None:
        """Take a finished refresh's page, or its one-line failure."""
        child, self._child = self._child, None
        assert child is not None
        error = child.stderr.read().decode(errors="replace") if child.stderr else ""
        if child.stderr:
            child.stderr.close()
        if child.returncode == 0 and self.partial.exists():
            os.replace(self.partial, self.html)
            self.refreshes += 1
            return
        last = next((line for line in reversed(error.splitlines()) if line.strip()), "")
        self.failures.append(f"live report {self.html} not refreshed (exit {child.returncode}): "
                             f"{last}")  # fmt: skip
        print(f"soakgate: warning: {self.failures[-1]}", file=sys.stderr, flush=True)
        self._discard()

    def _discard(self) -> None:
        with contextlib.suppress(OSError):
            self.partial.unlink()

    def on_tick(self, tallies: Any, elapsed_s: float) -> None:
        """Called a few times a second during the soak: reap a finished refresh, start a due
        one. Never raises into the soak."""
        try:
            if self._child is not None and self._child.poll() is not None:
                self._reap()
            if self._child is None and elapsed_s >= self._due:
                assert self.every_s is not None
                self._due = elapsed_s + self.every_s
                self._start()
        except Exception as exc:  # an observer must not stop the soak
            self.failures.append(f"live report: {type(exc).__name__}: {exc}")

    def close(self, stopped_by: str | None) -> None:
        """The soak ended: after a normal end (count, time or verdict) wait for the refresh in
        progress and write the final report; after an interrupt or a failure, stop the refresh
        in progress."""
        try:
            if stopped_by in (None, "stop"):
                self._stop_child()
                return
            if self._child is not None:
                self._child.wait(FINAL_TIMEOUT_S)
                self._reap()
            self._start()
            assert self._child is not None
            self._child.wait(FINAL_TIMEOUT_S)
            self._reap()
        except subprocess.TimeoutExpired:
            self._stop_child()
            self.failures.append(f"live report: the final refresh took over {FINAL_TIMEOUT_S} s")
        except Exception as exc:  # the soak's rows are stored; a report failing costs nothing
            self.failures.append(f"live report: {type(exc).__name__}: {exc}")
        finally:
            self._stop_child()

    def _stop_child(self) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        if child.stderr:
            child.stderr.close()
        self._discard()
