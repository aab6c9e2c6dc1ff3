"""A stand-in for the `pynvml` module (nvidia-ml-py) with GPUs whose readings a test sets: what
soakgate's NVML sampler calls, answering as the real library does (an `NVMLError` for an index
that does not exist, for an unsupported reading, and from an event set with nothing pending)."""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_VOLATILE_ECC = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
nvmlEventTypeXidCriticalError = 8


class NVMLError(Exception):
    """What every failing call of the real library raises."""


@dataclass
class FakeGpu:
    """One GPU's readings (a test changes them between samples)."""

    index: int
    temperature_c: int = 50
    power_mw: int = 300_000
    ecc_uncorrected: int = 0
    uuid: str = ""
    registered: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def make(gpus: int) -> tuple[types.ModuleType, list[FakeGpu]]:
    """A fresh `pynvml` module with `gpus` GPUs (index i at 50 + i degrees)."""
    devices = [FakeGpu(i, temperature_c=50 + i, uuid=f"GPU-fake-{i}") for i in range(gpus)]
    module = types.ModuleType("pynvml")
    for name, value in globals().items():
        if name.startswith(("NVML_", "nvmlEvent")) or name == "NVMLError":
            setattr(module, name, value)

    def by_index(index: int) -> FakeGpu:
        if not 0 <= index < len(devices):
            raise NVMLError("Invalid Argument")
        return devices[index]

    def by_uuid(uuid: str) -> FakeGpu:
        for device in devices:
            if device.uuid == uuid:
                return device
        raise NVMLError("Not Found")

    def unsupported(*_: Any) -> Any:
        raise NVMLError("Not Supported")

    def register(device: FakeGpu, kind: int, events: object) -> None:
        device.registered = True

    def wait(events: object, timeout_ms: int) -> Any:
        raise NVMLError("Timeout")

    utilisation = types.SimpleNamespace(gpu=90, memory=40)
    memory = types.SimpleNamespace(used=2**30, total=80 * 2**30)
    calls = {
        "nvmlInit": lambda: None, "nvmlShutdown": lambda: None,
        "nvmlSystemGetDriverVersion": lambda: b"580.0-fake",
        "nvmlDeviceGetHandleByIndex": by_index, "nvmlDeviceGetHandleByUUID": by_uuid,
        "nvmlDeviceGetName": lambda d: b"Fake H200", "nvmlDeviceGetUUID": lambda d: d.uuid,
        "nvmlDeviceGetTemperature": lambda d, kind: d.temperature_c,
        "nvmlDeviceGetPowerUsage": lambda d: d.power_mw,
        "nvmlDeviceGetUtilizationRates": lambda d: utilisation,
        "nvmlDeviceGetMemoryInfo": lambda d: memory,
        "nvmlDeviceGetClockInfo": lambda d, kind: 1980,
        "nvmlDeviceGetTotalEccErrors": lambda d, kind, counter: (
            d.ecc_uncorrected if kind == NVML_MEMORY_ERROR_TYPE_UNCORRECTED else 0
        ),
        "nvmlDeviceGetRemappedRows": unsupported, "nvmlDeviceGetRetiredPages": unsupported,
        "nvmlEventSetCreate": lambda: object(), "nvmlEventSetFree": lambda events: None,
        "nvmlDeviceRegisterEvents": register, "nvmlEventSetWait_v2": wait,
    }  # fmt: skip
    for name, call in calls.items():
        setattr(module, name, call)
    return module, devices
