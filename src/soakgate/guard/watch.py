"""The guard: watches every instance of a block (exit, health, fatal log lines) and the devices
(telemetry), writes what it sees as events, and restarts dead instances with bounded retries."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from soakgate.errors import ServerError
from soakgate.guard.ledger import FaultLedger
from soakgate.guard.patterns import LogFollower, compile_patterns, fatal_lines
from soakgate.guard.settings import GuardSettings
from soakgate.guard.telemetry import FAULT_COUNTERS, Sampler
from soakgate.records import Event, Run
from soakgate.servers import ServerInstance
from soakgate.store import BatchWriter

Restart = Callable[[ServerInstance], Awaitable[None]]
"""Launch a (stopped) instance, wait until healthy and warm it up; ServerError on failure."""


@dataclass(slots=True)
class _Watch:
    """What the guard knows about one instance."""

    instance: ServerInstance
    follower: LogFollower
    last_alive_at: float
    """Last check that saw the process running with no fatal log line."""
    last_healthy_at: float
    """Last successful health probe (or start-up)."""
    up: asyncio.Event = field(default_factory=asyncio.Event)
    recovering: bool = False
    retired: bool = False
    health_failures: int = 0
    next_health_at: float = 0.0
    fatal: list[str] = field(default_factory=list)


class Guard:
    """One guard per block; `gate`, `incarnation` and `credit` plug into the soak driver."""

    def __init__(
        self, run: Run, instances: Sequence[ServerInstance], settings: GuardSettings,
        writer: BatchWriter, restart: Restart, ledger: FaultLedger,
        samplers: Sequence[Sampler] = (),
    ) -> None:  # fmt: skip
        self.run, self.settings, self.writer = run, settings, writer
        self.ledger, self.samplers, self._restart = ledger, list(samplers), restart
        self._patterns = compile_patterns(settings.fatal_patterns)
        now = time.time()
        self._watches = {
            i.name: _Watch(i, LogFollower(i.log_path), now, now, next_health_at=time.monotonic())
            for i in instances
        }
        for watch in self._watches.values():
            watch.up.set()
        self._closing = asyncio.Event()
        self._recoveries: set[asyncio.Task[None]] = set()
        self._baseline: dict[str, dict[str, Any]] = {}
        self._next_sample = 0.0

    def incarnation(self, target: str) -> int:
        """Incarnation of the target's server right now (stamped on each stored row)."""
        watch = self._watches.get(target)
        return 0 if watch is None else watch.instance.incarnation

    def credit(self, target: str) -> int:
        """Requests the target may add to its budget for fault-window errors."""
        return self.ledger.credit(target)

    async def gate(self, target: str) -> bool:
        """Hold a worker while its target restarts; False once it is retired or the block ends."""
        watch = self._watches.get(target)
        if watch is None:
            return True
        if not watch.up.is_set():
            closing = asyncio.create_task(self._closing.wait())
            upped = asyncio.create_task(watch.up.wait())
            await asyncio.wait({closing, upped}, return_when=asyncio.FIRST_COMPLETED)
            closing.cancel()
            upped.cancel()
        return watch.up.is_set() and not watch.retired and not self._closing.is_set()

    def serving(self) -> list[str]:
        """Targets that are up (not retired, not recovering)."""
        return [n for n, w in self._watches.items() if w.up.is_set() and not w.retired]

    async def watch(self) -> None:
        """Check instances and sample devices until `close()`."""
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s:
            while not self._closing.is_set():
                await self.check_once(s)
                await self._sample()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closing.wait(), self.settings.interval_s)

    async def check_once(self, session: aiohttp.ClientSession) -> None:
        """One pass over the instances: exits, fatal log lines, then due health probes (at once,
        so one hung instance does not delay the checks of the others)."""
        due = []
        for watch in self._watches.values():
            if watch.recovering or watch.retired:
                continue
            matches = fatal_lines(watch.follower.new_lines(), self._patterns)
            watch.fatal.extend(matches)
            if watch.instance.poll() is not None:
                self._fault(watch, "process_exit")
                continue
            if matches and self.settings.restart_on_log:
                self._fault(watch, "log_pattern")
                continue
            if matches:
                self._event("fatal_log", watch, lines=matches[-10:])
            else:
                watch.last_alive_at = time.time()
            if time.monotonic() >= watch.next_health_at:
                due.append(watch)
        await asyncio.gather(*(self._probe(session, watch) for watch in due))

    async def _probe(self, session: aiohttp.ClientSession, watch: _Watch) -> None:
        """One health probe; too many consecutive failures is a fault."""
        watch.next_health_at = time.monotonic() + self.settings.health_interval_s
        if await watch.instance.healthy(session, self.settings.health_timeout_s):
            watch.health_failures = 0
            watch.last_healthy_at = time.time()
            return
        watch.health_failures += 1
        if watch.health_failures >= self.settings.health_failures:
            self._fault(watch, "health")

    def _fault(self, watch: _Watch, cause: str) -> None:
        """Take the instance out of the soak and start its recovery."""
        watch.recovering = True
        watch.up.clear()
        task = asyncio.create_task(self._recover(watch, cause))
        self._recoveries.add(task)
        task.add_done_callback(self._recoveries.discard)

    async def _recover(self, watch: _Watch, cause: str) -> None:
        """Record the fault, stop the instance, restart it with back-off, record the window."""
        instance, detected = watch.instance, time.time()
        watch.fatal.extend(fatal_lines(watch.follower.new_lines(), self._patterns))
        before = instance.incarnation
        # A hung server still has a live process: its window opens at the last good probe.
        start = watch.last_healthy_at if cause == "health" else watch.last_alive_at
        fault = {
            "cause": cause, "window_start": start, "detected_at": detected,
            "incarnation": before, "exit_code": instance.poll(), "pid": instance.pid,
            "fatal_lines": watch.fatal[-10:], "log_path": str(instance.log_path),
            "log_tail": instance.log_tail(self.settings.log_tail_chars),
        }  # fmt: skip
        self._event("engine_fault", watch, **fault)
        await instance.stop()
        self.ledger.declare_dead(instance.name, before, start)
        attempts = await self._restart_with_backoff(watch)
        recovered = attempts > 0
        end = time.time() if recovered else None
        self._event(
            "fault_window", watch, start=fault["window_start"], end=end, cause=cause,
            detected_at=detected, recovered=recovered, attempts=abs(attempts),
            incarnation_before=before,
            incarnation_after=instance.incarnation if recovered else None,
            duration_s=None if end is None else round(end - start, 3),
            fatal_lines=fault["fatal_lines"], log_tail=fault["log_tail"],
        )  # fmt: skip
        watch.fatal, watch.health_failures = [], 0
        if recovered:
            watch.last_alive_at = watch.last_healthy_at = time.time()
        else:
            watch.retired = True
            self._event("instance_retired", watch, after_attempts=abs(attempts))
        watch.recovering = False
        watch.up.set()

    async def _restart_with_backoff(self, watch: _Watch) -> int:
        """Attempt number that brought the instance back, or minus the attempts made."""
        instance, settings = watch.instance, self.settings
        for attempt in range(1, settings.max_restarts + 1):
            delay = settings.restart_backoff_s * 2 ** (attempt - 1)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), delay)
            if self._closing.is_set():
                return -(attempt - 1)
            instance.incarnation += 1
            watch.follower = LogFollower(instance.log_path)
            try:
                await self._restart(instance)
            except ServerError as exc:
                self._event(
                    "restart_failed", watch, attempt=attempt, error=str(exc),
                    incarnation=instance.incarnation,
                    log_tail=instance.log_tail(self.settings.log_tail_chars),
                )  # fmt: skip
                await instance.stop()
                continue
            self._event(
                "restart", watch, attempt=attempt, incarnation=instance.incarnation,
                pid=instance.pid, log_path=str(instance.log_path),
            )  # fmt: skip
            return attempt
        return -settings.max_restarts

    async def settled(self, timeout_s: float) -> None:
        """Wait (bounded) for recoveries in progress to finish."""
        if self._recoveries:
            await asyncio.wait(set(self._recoveries), timeout=timeout_s)

    async def close(self) -> None:
        """Stop watching: release held workers, cancel recoveries, close telemetry."""
        self._closing.set()
        for task in list(self._recoveries):
            task.cancel()
        await asyncio.gather(*self._recoveries, return_exceptions=True)
        for sampler in self.samplers:
            sampler.close()

    async def _sample(self) -> None:
        """Telemetry samples (and device faults) when the interval has passed."""
        if not self.samplers or time.monotonic() < self._next_sample:
            return
        self._next_sample = time.monotonic() + self.settings.telemetry_interval_s
        for sampler in self.samplers:
            samples = await asyncio.to_thread(sampler.sample)
            for target, metrics in samples.items():
                self._write("telemetry", target, source=sampler.source, **metrics)
                self._check_counters(target, sampler.source, metrics)
            for target, data in await asyncio.to_thread(sampler.faults):
                self._write("device_fault", target, **data)

    def _check_counters(self, target: str, source: str, metrics: dict[str, Any]) -> None:
        """A rise of an error counter since the block started is a device fault."""
        base = self._baseline.setdefault(target, dict(metrics))
        for name in FAULT_COUNTERS:
            if name in metrics and name in base and metrics[name] > base[name]:
                self._write("device_fault", target, source=source, counter=name,
                            before=base[name], now=metrics[name])  # fmt: skip
                base[name] = metrics[name]

    def _event(self, kind: str, watch: _Watch, **data: Any) -> None:
        self._write(kind, watch.instance.name, **data)

    def _write(self, kind: str, target: str | None, **data: Any) -> None:
        """Queue an event and commit it at once (faults must survive a crash right after)."""
        self.writer.add_event(Event(self.run.run_id, time.time(), kind, target, data))
        self.writer.flush()
