"""Device telemetry: NVIDIA through NVML (nvidia-ml-py), Intel through `xpu-smi`; absent tools
are reported as notes, never as errors. Imports only the standard library at module level so the
GPU probe script runs where only torch and nvidia-ml-py are installed."""

from __future__ import annotations

import csv
import ctypes
import io
import shutil
import subprocess
from collections.abc import Callable, Mapping
from typing import Any, Protocol

# Counters whose increase is a device fault worth its own event (not only a telemetry sample).
FAULT_COUNTERS = ("ecc_uncorrected_volatile", "remapped_rows_uncorrectable", "retired_pages")


class Sampler(Protocol):
    """One telemetry source covering some targets."""

    source: str

    def sample(self) -> dict[str, dict[str, Any]]:
        """Target name -> metrics right now (unreadable metrics are left out)."""

    def faults(self) -> list[tuple[str, dict[str, Any]]]:
        """Device fault events since the last call (e.g. XID errors), as (target, data)."""

    def close(self) -> None:
        """Release the tool."""


class NvmlSampler:
    """NVML readings of NVIDIA devices; the index is NVML's (set CUDA_DEVICE_ORDER=PCI_BUS_ID so
    CUDA_VISIBLE_DEVICES numbers agree), or a `GPU-...` UUID."""

    source = "nvml"

    def __init__(self, indices: Mapping[str, str]) -> None:
        import pynvml  # nvidia-ml-py; ImportError is handled by open_samplers

        self._nvml: Any = pynvml
        pynvml.nvmlInit()
        self.driver = _text(pynvml.nvmlSystemGetDriverVersion())
        self.gpus: dict[str, dict[str, Any]] = {}
        """Target -> {GPU as written in its device spec: NVML handle}; an instance on `cuda:0,1`
        (tensor parallel) has two."""
        self.unresolved: dict[str, str] = {}
        """Target -> why none of its GPUs could be found (it is sampled no further)."""
        for target, index in indices.items():
            try:
                self.gpus[target] = {gpu: self._handle(gpu) for gpu in _gpus(index)}
            except (ValueError, pynvml.NVMLError) as exc:
                self.unresolved[target] = f"{index!r}: {exc}"
        self.unreadable: dict[str, str] = {}
        self._events: Any = None
        self.xid_readable = self._register_xid()

    def _handle(self, index: str) -> Any:
        nvml = self._nvml
        if index.startswith("GPU-"):
            return nvml.nvmlDeviceGetHandleByUUID(index)
        return nvml.nvmlDeviceGetHandleByIndex(int(index))

    def _handles(self) -> list[tuple[str, Any]]:
        """(target, handle) of every GPU sampled."""
        return [(target, h) for target, gpus in self.gpus.items() for h in gpus.values()]

    def _register_xid(self) -> bool:
        """Subscribe to critical XID events; False when the driver or permissions refuse."""
        nvml = self._nvml
        try:
            self._events = nvml.nvmlEventSetCreate()
            for _, handle in self._handles():
                nvml.nvmlDeviceRegisterEvents(
                    handle, nvml.nvmlEventTypeXidCriticalError, self._events
                )
        except nvml.NVMLError as exc:
            self.unreadable["xid_events"] = str(exc)
            return False
        return True

    def device_info(self) -> dict[str, dict[str, Any]]:
        """Static facts per target: name, UUID and driver (per GPU for several)."""
        nvml = self._nvml
        info: dict[str, dict[str, Any]] = {}
        for target, gpus in self.gpus.items():
            each = {
                gpu: {"name": _text(nvml.nvmlDeviceGetName(handle)),
                      "uuid": _text(nvml.nvmlDeviceGetUUID(handle)), "driver": self.driver}
                for gpu, handle in gpus.items()
            }  # fmt: skip
            info[target] = next(iter(each.values())) if len(each) == 1 else {"per_gpu": each}
        return info

    def sample(self) -> dict[str, dict[str, Any]]:
        """Temperature, power, utilisation, memory, clocks, ECC and remapped/retired pages.

        A target on several GPUs gets each GPU's readings under `per_gpu`, and at its top level
        the sum of each fault counter over its GPUs (so a rise on any of them is a device fault
        of the instance) and the hottest GPU's temperature."""
        samples = {}
        for target, gpus in self.gpus.items():
            readings = {gpu: self._read(handle) for gpu, handle in gpus.items()}
            samples[target] = (
                next(iter(readings.values())) if len(readings) == 1 else _combined(readings)
            )
        return samples

    def _read(self, handle: Any) -> dict[str, Any]:
        nvml = self._nvml
        readers: dict[str, Callable[[], Any]] = {
            "temperature_c": lambda: nvml.nvmlDeviceGetTemperature(
                handle, nvml.NVML_TEMPERATURE_GPU
            ),
            "power_w": lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
            "gpu_util_pct": lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu,
            "mem_util_pct": lambda: nvml.nvmlDeviceGetUtilizationRates(handle).memory,
            "memory_used_mib": lambda: nvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20,
            "memory_total_mib": lambda: nvml.nvmlDeviceGetMemoryInfo(handle).total / 2**20,
            "sm_clock_mhz": lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
            "ecc_uncorrected_volatile": lambda: nvml.nvmlDeviceGetTotalEccErrors(
                handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
            ),
            "ecc_corrected_volatile": lambda: nvml.nvmlDeviceGetTotalEccErrors(
                handle, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_VOLATILE_ECC
            ),
            "remapped_rows_uncorrectable": lambda: nvml.nvmlDeviceGetRemappedRows(handle)[1],
            "retired_pages": lambda: len(
                nvml.nvmlDeviceGetRetiredPages(
                    handle, nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
                )
            ),
        }
        metrics: dict[str, Any] = {}
        for name, read in readers.items():
            if name in self.unreadable:
                continue
            try:
                value = read()
            except nvml.NVMLError as exc:
                self.unreadable[name] = str(exc)  # e.g. Not Supported: stop asking
                continue
            metrics[name] = round(value, 1) if isinstance(value, float) else value
        return metrics

    def faults(self) -> list[tuple[str, dict[str, Any]]]:
        """XID critical errors that arrived since the last call."""
        if self._events is None:
            return []
        nvml = self._nvml
        by_handle = {_key(h): target for target, h in self._handles()}
        found: list[tuple[str, dict[str, Any]]] = []
        for _ in range(64):  # bounded drain
            try:
                event = nvml.nvmlEventSetWait_v2(self._events, 0)
            except nvml.NVMLError:
                break  # NVML_ERROR_TIMEOUT: nothing pending
            target = by_handle.get(_key(event.device), "unknown")
            found.append((target, {"source": "nvml", "xid": int(event.eventData)}))
        return found

    def close(self) -> None:
        """Free the event set and shut NVML down."""
        nvml = self._nvml
        try:
            if self._events is not None:
                nvml.nvmlEventSetFree(self._events)
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass


class XpuSmiSampler:
    """Intel GPU readings through `xpu-smi dump` (one sample per call)."""

    source = "xpu-smi"
    METRICS = "0,1,2,3,5,18"
    """xpu-smi metric ids: utilisation, power, frequency, core temperature, memory util, used."""

    def __init__(self, indices: Mapping[str, str], executable: str) -> None:
        self.indices = dict(indices)
        self.executable = executable

    def sample(self) -> dict[str, dict[str, Any]]:
        """One `xpu-smi dump -n 1` per device."""
        samples = {}
        for target, index in self.indices.items():
            argv = [self.executable, "dump", "-d", index, "-m", self.METRICS, "-n", "1"]
            try:
                done = subprocess.run(argv, capture_output=True, text=True, timeout=15, check=False)
            except (OSError, subprocess.TimeoutExpired) as exc:
                samples[target] = {"error": str(exc)[:200]}
                continue
            samples[target] = parse_xpu_dump(done.stdout)
        return samples

    def faults(self) -> list[tuple[str, dict[str, Any]]]:
        """xpu-smi dump reports no fault events."""
        return []

    def close(self) -> None:
        """Nothing to release."""


def parse_xpu_dump(text: str) -> dict[str, Any]:
    """Metrics from `xpu-smi dump` CSV output (header line, then one line of values)."""
    rows = [r for r in csv.reader(io.StringIO(text)) if r and any(c.strip() for c in r)]
    if len(rows) < 2:
        return {}
    metrics: dict[str, Any] = {}
    for header, value in zip(rows[0], rows[-1], strict=False):
        key = _snake(header)
        if key in ("timestamp", "deviceid"):
            continue
        try:
            metrics[key] = float(value)
        except ValueError:
            if value.strip() not in ("", "N/A"):
                metrics[key] = value.strip()
    return metrics


def _gpus(index: str) -> list[str]:
    """The GPUs of a device spec's index: `0`, `0,1` (tensor parallel) or `GPU-<uuid>`s."""
    gpus = [part.strip() for part in index.split(",")]
    if not all(gpus):
        raise ValueError("an empty GPU in the list")
    return gpus


def _combined(readings: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """One instance's telemetry over its GPUs: each GPU's own, fault counters summed."""
    combined: dict[str, Any] = {"per_gpu": dict(readings)}
    for name in FAULT_COUNTERS:
        values = [r[name] for r in readings.values() if name in r]
        if values:
            combined[name] = sum(values)
    temperatures = [r["temperature_c"] for r in readings.values() if "temperature_c" in r]
    if temperatures:
        combined["temperature_c"] = max(temperatures)
    return combined


def open_samplers(by_vendor: Mapping[str, Mapping[str, str]]) -> tuple[list[Sampler], list[str]]:
    """Samplers for the devices in use ({vendor: {target: index}}) and notes on what is absent."""
    samplers: list[Sampler] = []
    notes: list[str] = []
    cuda = by_vendor.get("cuda") or {}
    if cuda:
        try:
            nvml = NvmlSampler(cuda)
            samplers.append(nvml)
            notes += [f"NVML telemetry skipped for {target}: no such GPU {why}"
                      for target, why in nvml.unresolved.items()]  # fmt: skip
        except ImportError:
            notes.append(
                "NVML telemetry skipped: nvidia-ml-py is not installed (pip install nvidia-ml-py)"
            )
        except Exception as exc:  # pynvml.NVMLError and friends: no driver, no device
            notes.append(f"NVML telemetry skipped: {type(exc).__name__}: {exc}")
    xpu = by_vendor.get("xpu") or {}
    if xpu:
        executable = shutil.which("xpu-smi")
        if executable:
            samplers.append(XpuSmiSampler(xpu, executable))
        else:
            notes.append("Intel telemetry skipped: xpu-smi is not on PATH")
    if by_vendor.get("rocm"):
        notes.append("ROCm telemetry is not implemented; engine faults are still watched")
    return samplers, notes


def _snake(header: str) -> str:
    out = "".join(c.lower() if c.isalnum() else "_" for c in header.strip())
    return "_".join(filter(None, out.split("_")))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _key(handle: Any) -> Any:
    """A hashable identity of an NVML handle (ctypes pointers compare by address)."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return id(handle)
