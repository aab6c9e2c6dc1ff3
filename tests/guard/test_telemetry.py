"""Telemetry sources: xpu-smi output parsing and notes for absent tools."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from soakgate.guard.ledger import FaultLedger
from soakgate.guard.settings import GuardSettings
from soakgate.guard.telemetry import open_samplers, parse_xpu_dump
from soakgate.guard.watch import Guard
from soakgate.records import Run
from soakgate.store import BatchWriter, open_store
from tests.guard import fakenvml

XPU_DUMP = """Timestamp, DeviceId, GPU Utilization (%), GPU Power (W), GPU Frequency (MHz), GPU Core Temperature (Celsius Degree), GPU Memory Utilization (%), GPU Memory Used (MiB)
06:12:01.000,    0, 97.31, 287.02, 1550, 71.00, 43.10, 40960.50
"""


def test_xpu_dump_is_parsed_into_named_numbers() -> None:
    metrics = parse_xpu_dump(XPU_DUMP)
    assert metrics == {
        "gpu_utilization": 97.31, "gpu_power_w": 287.02, "gpu_frequency_mhz": 1550.0,
        "gpu_core_temperature_celsius_degree": 71.0, "gpu_memory_utilization": 43.1,
        "gpu_memory_used_mib": 40960.5,
    }  # fmt: skip
    assert parse_xpu_dump("") == {}
    assert parse_xpu_dump("Timestamp, DeviceId, GPU Power (W)\n06:12, 0, N/A\n") == {}


def test_cpu_devices_need_no_telemetry() -> None:
    assert open_samplers({"cpu": {"cpu:0": "0"}}) == ([], [])


def test_absent_tools_become_notes_not_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    samplers, notes = open_samplers({"xpu": {"xpu:0": "0"}, "rocm": {"rocm:0": "0"}})
    assert samplers == []
    assert any("xpu-smi is not on PATH" in n for n in notes)
    assert any("ROCm" in n for n in notes)


def test_nvml_without_a_driver_is_a_note() -> None:
    pytest.importorskip("pynvml")
    samplers, notes = open_samplers({"cuda": {"cuda:0": "0"}})
    if samplers:  # a machine with an NVIDIA driver: the sampler must read something
        reading = samplers[0].sample()
        samplers[0].close()
        assert reading.get("cuda:0")
    else:
        assert len(notes) == 1 and notes[0].startswith("NVML telemetry skipped")


def _fake_nvml(monkeypatch: pytest.MonkeyPatch, gpus: int) -> list[fakenvml.FakeGpu]:
    module, devices = fakenvml.make(gpus)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    return devices


def test_an_instance_on_two_gpus_is_sampled_per_gpu_and_a_missing_gpu_spares_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`cuda:0,1` (a tensor-parallel instance) once made every GPU's telemetry be skipped:
    int("0,1") raised inside the sampler, which open_samplers turned into one note."""
    devices = _fake_nvml(monkeypatch, 4)
    devices[1].ecc_uncorrected = 3
    samplers, notes = open_samplers({"cuda": {"cuda:0,1": "0,1", "cuda:2": "2", "cuda:9": "9",
                                              "cuda:3": "GPU-fake-3"}})  # fmt: skip
    assert len(samplers) == 1
    assert notes == ["NVML telemetry skipped for cuda:9: no such GPU '9': Invalid Argument"]
    sample = samplers[0].sample()
    assert set(sample) == {"cuda:0,1", "cuda:2", "cuda:3"}
    pair = sample["cuda:0,1"]
    assert set(pair["per_gpu"]) == {"0", "1"}
    assert pair["per_gpu"]["0"]["temperature_c"] == 50
    assert pair["per_gpu"]["1"]["temperature_c"] == 51
    assert pair["ecc_uncorrected_volatile"] == 3  # summed over the instance's GPUs
    assert pair["temperature_c"] == 51  # the hottest
    assert sample["cuda:2"]["temperature_c"] == 52 and "per_gpu" not in sample["cuda:2"]
    assert sample["cuda:3"]["temperature_c"] == 53
    assert all(d.registered for d in devices)  # XID events watched on every GPU in use
    info = samplers[0].device_info()  # type: ignore[attr-defined]
    assert info["cuda:0,1"]["per_gpu"]["1"]["uuid"] == "GPU-fake-1"
    samplers[0].close()


def test_an_error_counter_rising_on_the_second_gpu_is_a_fault_of_the_instance(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Through the guard, as a campaign block runs it: real sampler, NVML replaced."""
    devices = _fake_nvml(monkeypatch, 2)
    samplers, notes = open_samplers({"cuda": {"cuda:0,1": "0,1"}})
    assert notes == [] and samplers
    store = open_store(tmp_path / "runs.sqlite")
    settings = GuardSettings(interval_s=0.02, telemetry_interval_s=0.02)
    guard = Guard(Run("run1", "x", [], 0.0), [], settings, BatchWriter(store, interval_s=0),
                  None, FaultLedger(), samplers)  # type: ignore[arg-type]  # fmt: skip

    async def scenario() -> None:
        watcher = asyncio.create_task(guard.watch())
        for _ in range(200):
            if any(e.kind == "telemetry" for e in store.events("run1")):
                break
            await asyncio.sleep(0.02)
        devices[1].ecc_uncorrected = 2
        for _ in range(200):
            if any(e.kind == "device_fault" for e in store.events("run1")):
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
    assert telemetry[0].target == "cuda:0,1"
    assert telemetry[0].data["per_gpu"]["1"]["temperature_c"] == 51
    faults = [e for e in events if e.kind == "device_fault"]
    assert [(f.target, f.data["counter"], f.data["before"], f.data["now"]) for f in faults] == [
        ("cuda:0,1", "ecc_uncorrected_volatile", 0, 2)
    ]
