"""Telemetry sources: xpu-smi output parsing and notes for absent tools."""

from __future__ import annotations

import pytest

from soakgate.guard.telemetry import open_samplers, parse_xpu_dump

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
