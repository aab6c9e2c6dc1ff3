"""The guard against real server processes: a hung server (health), a fatal log line, retirement."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

from soakgate.guard.ledger import FaultLedger
from soakgate.guard.settings import GuardSettings
from soakgate.guard.watch import Guard
from soakgate.records import Event, Run
from soakgate.servers import LaunchSpec, ServerInstance, free_port
from soakgate.store import BatchWriter, open_store

FAST = GuardSettings(
    interval_s=0.1, health_interval_s=0.2, health_timeout_s=0.5, health_failures=2,
    max_restarts=2, restart_backoff_s=0.05, telemetry=False,
)  # fmt: skip


def _instance(tmp_path: Path, argv: list[str], port: int) -> ServerInstance:
    spec = LaunchSpec("cpu:0", argv, {}, f"http://127.0.0.1:{port}", tmp_path / "logs",
                      stop_grace_s=1.0)  # fmt: skip
    return ServerInstance(spec)


async def _bring_up(instance: ServerInstance) -> None:
    instance.launch()
    await instance.wait_healthy(30)


def _guarded(
    tmp_path: Path, instance: ServerInstance, settings: GuardSettings, poke: Any, until: str
) -> list[Event]:
    """Start the instance, let `poke(instance)` break it, run the guard until an event `until`."""
    store = open_store(tmp_path / "runs.sqlite")
    run = Run("run1", "x", [instance.name], 0.0)
    writer = BatchWriter(store, interval_s=0)

    async def scenario() -> None:
        await _bring_up(instance)
        guard = Guard(run, [instance], settings, writer, _bring_up, FaultLedger())
        watcher = asyncio.create_task(guard.watch())
        poke(instance)
        for _ in range(600):
            if any(e.kind == until for e in store.events("run1")):
                break
            await asyncio.sleep(0.05)
        assert await guard.gate(instance.name) is (until != "instance_retired")
        await guard.close()
        watcher.cancel()
        await instance.stop()

    try:
        asyncio.run(scenario())
        return store.events("run1")
    finally:
        store.close()


def _mock_argv(port: int) -> list[str]:
    return [sys.executable, "-m", "soakgate.mockserver", "--port", str(port)]


def test_a_hung_server_fails_health_and_is_restarted_as_a_new_incarnation(tmp_path: Path) -> None:
    port = free_port()
    instance = _instance(tmp_path, _mock_argv(port), port)
    events = _guarded(tmp_path, instance, FAST, lambda i: os.kill(i.pid, signal.SIGSTOP), "restart")
    kinds = [e.kind for e in events]
    assert kinds[:2] == ["engine_fault", "restart"]
    assert events[0].data["cause"] == "health" and events[0].data["incarnation"] == 0
    window = next(e for e in events if e.kind == "fault_window")
    assert window.data["recovered"] and window.data["incarnation_after"] == 1
    assert window.data["start"] <= window.data["detected_at"] <= window.data["end"]
    assert instance.incarnation == 1


def test_fatal_log_line_with_the_process_alive_is_a_fault(tmp_path: Path) -> None:
    port = free_port()
    marker = tmp_path / "printed"
    # The server logs a CUDA error once (first incarnation only) a moment after start-up.
    shell = (
        f"if [ ! -e {marker} ]; then touch {marker}; "
        f'(sleep 0.5; echo "CUDA error: an illegal memory access was encountered") & fi; '
        f"exec {' '.join(_mock_argv(port))}"
    )
    instance = _instance(tmp_path, ["sh", "-c", shell], port)
    events = _guarded(tmp_path, instance, FAST, lambda i: None, "fault_window")
    fault = next(e for e in events if e.kind == "engine_fault")
    assert fault.data["cause"] == "log_pattern" and fault.data["exit_code"] is None
    assert fault.data["fatal_lines"] == ["CUDA error: an illegal memory access was encountered"]
    assert "CUDA error" in fault.data["log_tail"]


def test_an_instance_that_cannot_come_back_is_retired(tmp_path: Path) -> None:
    port = free_port()
    marker = tmp_path / "started-once"
    # Starts fine once; every restart exits at once with a message in its log.
    shell = (
        f'if [ -e {marker} ]; then echo "no device found" >&2; exit 3; fi; touch {marker}; '
        f"exec {' '.join(_mock_argv(port))}"
    )
    instance = _instance(tmp_path, ["sh", "-c", shell], port)
    events = _guarded(
        tmp_path, instance, FAST, lambda i: os.kill(i.pid, signal.SIGKILL), "instance_retired"
    )
    failed = [e for e in events if e.kind == "restart_failed"]
    assert len(failed) == FAST.max_restarts
    assert all("no device found" in e.data["log_tail"] for e in failed)
    window = next(e for e in events if e.kind == "fault_window")
    assert window.data["recovered"] is False and window.data["end"] is None


class _ScriptedSampler:
    """A telemetry source replaying readings (NVML itself is exercised by the GPU probe)."""

    source = "scripted"

    def __init__(self, readings: list[dict[str, Any]]) -> None:
        self.readings = readings
        self.closed = False

    def sample(self) -> dict[str, dict[str, Any]]:
        return {"cuda:0": self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]}

    def faults(self) -> list[tuple[str, dict[str, Any]]]:
        return [("cuda:0", {"source": "scripted", "xid": 79})] if not self.readings[1:] else []

    def close(self) -> None:
        self.closed = True


def test_telemetry_is_stored_and_a_rising_error_counter_is_a_device_fault(tmp_path: Path) -> None:
    store = open_store(tmp_path / "runs.sqlite")
    readings = [
        {"temperature_c": 60, "ecc_uncorrected_volatile": 0},
        {"temperature_c": 61, "ecc_uncorrected_volatile": 2},
        {"temperature_c": 61, "ecc_uncorrected_volatile": 2},
    ]
    sampler = _ScriptedSampler(readings)
    settings = GuardSettings(interval_s=0.02, telemetry_interval_s=0.02)
    writer = BatchWriter(store, interval_s=0)
    guard = Guard(Run("run1", "x", [], 0.0), [], settings, writer, _bring_up, FaultLedger(),
                  [sampler])  # fmt: skip

    async def scenario() -> None:
        watcher = asyncio.create_task(guard.watch())
        for _ in range(200):
            if sum(e.kind == "device_fault" for e in store.events("run1")) >= 2:
                break
            await asyncio.sleep(0.02)
        await guard.close()
        await watcher

    try:
        asyncio.run(scenario())
        events = store.events("run1")
    finally:
        store.close()
    telemetry = [e for e in events if e.kind == "telemetry"]
    assert telemetry[0].target == "cuda:0" and telemetry[0].data["temperature_c"] == 60
    faults = [e.data for e in events if e.kind == "device_fault"]
    assert {"source": "scripted", "counter": "ecc_uncorrected_volatile", "before": 0,
            "now": 2} in faults  # fmt: skip
    assert {"source": "scripted", "xid": 79} in faults
    assert sampler.closed
