"""One managed server process: start in its own process group, health-check, warm up, stop."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from soakgate.errors import ServerError

DEFAULT_HEALTH_PATHS = ("/health", "/v1/models")
"""Tried in order when the campaign names no `server.health` path."""
_POLL_S = 0.2


@dataclass(slots=True)
class LaunchSpec:
    """Everything needed to (re)start one instance; the same spec serves every incarnation."""

    name: str
    """Target name (the device's name)."""
    argv: list[str]
    """Rendered command line."""
    env: dict[str, str]
    """Extra environment (device pinning, the config's env, the server's env)."""
    url: str
    """Base URL the instance will answer on."""
    log_dir: Path
    """Folder for one log file per incarnation (stdout and stderr together)."""
    health_paths: tuple[str, ...] = DEFAULT_HEALTH_PATHS
    """Health paths, tried in order; the first answering 200 is used from then on."""
    stop_grace_s: float = 30.0
    """Seconds between SIGTERM and SIGKILL when stopping."""
    log_stem: str = field(default="")
    """File name stem of the logs (default: the name with unsafe characters replaced)."""
    die_with_parent: bool = False
    """Linux: the server is killed when the process that started it dies (a Ray actor lost with
    its node must not leave its server running)."""


class ServerInstance:
    """A server under test; `incarnation` counts restarts and is stamped on every row it serves."""

    def __init__(self, spec: LaunchSpec, incarnation: int = 0) -> None:
        self.spec = spec
        self.incarnation = incarnation
        self.health_path: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0

    @property
    def name(self) -> str:
        """Target name."""
        return self.spec.name

    @property
    def pid(self) -> int | None:
        """Process id (also its process group id) of the current incarnation."""
        return None if self._proc is None else self._proc.pid

    @property
    def log_path(self) -> Path:
        """Log file of the current incarnation."""
        stem = self.spec.log_stem or "".join(c if c.isalnum() else "_" for c in self.name)
        return self.spec.log_dir / f"{stem}.inc{self.incarnation}.log"

    def launch(self) -> None:
        """Start the process (own session, so it and its children stop as a group)."""
        self.spec.log_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.spec.env}
        with self.log_path.open("ab") as log:
            try:
                self._proc = subprocess.Popen(
                    self.spec.argv, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, start_new_session=True, env=env,
                    preexec_fn=_die_with_parent if self.spec.die_with_parent else None,
                )  # fmt: skip
            except OSError as exc:
                raise ServerError(f"{self.name}: cannot run {self.spec.argv[0]!r}: {exc}") from None
        self.started_at = time.time()
        self.health_path = None

    def poll(self) -> int | None:
        """Exit code, or None while running (or never started)."""
        return None if self._proc is None else self._proc.poll()

    def log_tail(self, chars: int = 4000) -> str:
        """The last characters of the current incarnation's log."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(max(0, log.seek(0, os.SEEK_END) - chars))
                return log.read().decode("utf-8", "replace")
        except OSError:
            return ""

    async def wait_healthy(self, timeout_s: float) -> None:
        """Poll the health path(s) until one answers 200; ServerError (with log tail) when the
        process exits or the timeout passes first."""
        deadline = time.monotonic() + timeout_s
        async with _session() as session:
            while True:
                if (code := self.poll()) is not None:
                    raise ServerError(f"{self.name}: exited with code {code} while starting")
                path = await probe_health(session, self.spec.url, self._paths(), 2.0)
                if path is not None:
                    self.health_path = path
                    return
                if time.monotonic() >= deadline:
                    raise ServerError(f"{self.name}: not healthy after {timeout_s:g} s")
                await asyncio.sleep(_POLL_S)

    def _paths(self) -> Sequence[str]:
        return (self.health_path,) if self.health_path else self.spec.health_paths

    async def healthy(self, session: aiohttp.ClientSession, timeout_s: float) -> bool:
        """One health probe of the running instance."""
        return await probe_health(session, self.spec.url, self._paths(), timeout_s) is not None

    async def stop(self) -> int | None:
        """SIGTERM the process group, SIGKILL it after the grace period; returns the exit code."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            signal_group(proc.pid, signal.SIGTERM)
            if not await _wait_exit(proc, self.spec.stop_grace_s):
                signal_group(proc.pid, signal.SIGKILL)
                await _wait_exit(proc, 10.0)
        # Children the server left behind in its group die with it (e.g. engine core workers).
        signal_group(proc.pid, signal.SIGKILL)
        return proc.poll()


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the parent dies (prctl PR_SET_PDEATHSIG; no
    library wraps this one call)."""
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGKILL))


async def probe_health(
    session: aiohttp.ClientSession, url: str, paths: Sequence[str], timeout_s: float
) -> str | None:
    """The first path answering HTTP 200, or None."""
    for path in paths:
        try:
            timeout = aiohttp.ClientTimeout(total=timeout_s)
            async with session.get(url + path, timeout=timeout) as response:
                if response.status == 200:
                    await response.read()
                    return path
        except (aiohttp.ClientError, TimeoutError, OSError):
            continue
    return None


def _session() -> aiohttp.ClientSession:
    """A small session for health probes."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=4, force_close=True))


async def _wait_exit(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Wait (without blocking the loop) until the process exits; True when it did."""
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None:
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.05)
    return True


def signal_group(pgid: int, signum: signal.Signals) -> None:
    """Signal a process group we started; a group that is already gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def process_matches(pid: int, argv: Sequence[str]) -> bool:
    """True when process `pid` is alive and runs exactly `argv` (Linux /proc); guards against
    signalling a recycled pid when cleaning up after a killed campaign."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return raw.rstrip(b"\0").split(b"\0") == [a.encode() for a in argv]


def environment_for(*layers: Mapping[str, str]) -> dict[str, str]:
    """Merge environment layers, later ones winning."""
    merged: dict[str, str] = {}
    for layer in layers:
        merged.update(layer)
    return merged
