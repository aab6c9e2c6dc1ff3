"""Exercise soakgate's NVML telemetry path for real on an NVIDIA machine.

    PYTHONPATH=src python scripts/gpu_nvml_probe.py [--seconds 15] [--json out.json]

Needs only nvidia-ml-py (and torch with CUDA for the load phase; without it the probe samples
an idle GPU). Reads every metric the guard records, subscribes to XID events, samples the GPUs
idle, under a matmul load on GPU 0, and after; prints a short summary. Exit 0 when the core
readings (temperature, power, utilisation, memory) came back and moved under load as expected.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any

from soakgate.guard.telemetry import NvmlSampler

CORE = ("temperature_c", "power_w", "gpu_util_pct", "memory_used_mib", "memory_total_mib")


def _load(seconds: float, done: threading.Event) -> str:
    """Keep GPU 0 busy with bf16 matmuls; a note when torch or CUDA is absent."""
    try:
        import torch
    except ImportError:
        return "torch not installed: no load phase"
    if not torch.cuda.is_available():
        return "torch has no CUDA device: no load phase"
    a = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
    end = time.monotonic() + seconds
    while time.monotonic() < end and not done.is_set():
        for _ in range(20):
            a = (a @ b).clamp_(-1, 1)
        torch.cuda.synchronize()
    return f"torch {torch.__version__} matmul load on {torch.cuda.get_device_name(0)}"


def _phase(sampler: NvmlSampler, seconds: float, every: float = 1.0) -> list[dict[str, Any]]:
    samples = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        samples.append(sampler.sample())
        time.sleep(every)
    return samples


def _peak(samples: list[dict[str, Any]], target: str, metric: str) -> float | None:
    values = [s[target][metric] for s in samples if metric in s.get(target, {})]
    return max(values) if values else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="length of the load phase")
    parser.add_argument("--json", help="also write every sample to this file")
    args = parser.parse_args()
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
    except Exception as exc:  # no library, no driver: say so and stop
        print(f"NVML unavailable: {type(exc).__name__}: {exc}")
        return 2
    sampler = NvmlSampler({f"cuda:{i}": str(i) for i in range(count)})
    print(f"NVML driver {sampler.driver}, {count} GPU(s), nvidia-ml-py {_version()}")
    for target, info in sampler.device_info().items():
        print(f"  {target}: {info['name']} {info['uuid']}")
    print(f"XID event subscription: {'yes' if sampler.xid_readable else 'no'}")
    idle = _phase(sampler, 3)
    done = threading.Event()
    note: list[str] = []
    worker = threading.Thread(target=lambda: note.append(_load(args.seconds, done)))
    worker.start()
    busy = _phase(sampler, args.seconds)
    done.set()
    worker.join()
    after = _phase(sampler, 2)
    faults = sampler.faults()
    print(note[0] if note else "load thread gave no note")
    _table(sampler, idle, busy, faults)
    sampler.close()
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(
                {
                    "idle": idle,
                    "load": busy,
                    "after": after,
                    "faults": faults,
                    "unreadable": sampler.unreadable,
                },
                handle,
                indent=1,
            )
    target = "cuda:0"
    missing = [m for m in CORE if _peak(busy, target, m) is None]
    util = _peak(busy, target, "gpu_util_pct") or 0
    loaded = bool(note) and note[0].startswith("torch ") and " matmul " in note[0]
    ok = not missing and (util >= 50 or not loaded) and _instance_on_two_gpus(count)
    print(
        f"verdict: {'ok' if ok else 'FAILED'}"
        + (f"; missing {missing}" if missing else "")
        + ("" if not loaded else f"; utilisation under load {util}%")
    )
    return 0 if ok else 1


def _instance_on_two_gpus(count: int) -> bool:
    """With two GPUs or more: one instance on `cuda:0,1` (tensor parallel) is read per GPU."""
    if count < 2:
        print("one GPU: the two-GPU instance (cuda:0,1) is not tried")
        return True
    sampler = NvmlSampler({"cuda:0,1": "0,1"})
    reading = sampler.sample().get("cuda:0,1", {})
    sampler.close()
    per_gpu = reading.get("per_gpu", {})
    readable = {gpu: [m for m in CORE if m in metrics] for gpu, metrics in per_gpu.items()}
    print(f"instance cuda:0,1: GPUs {sorted(per_gpu)}, core readings {readable}, "
          f"hottest {reading.get('temperature_c')} C")  # fmt: skip
    return sorted(per_gpu) == ["0", "1"] and all(len(r) == len(CORE) for r in readable.values())


def _table(
    sampler: NvmlSampler, idle: list[dict[str, Any]], busy: list[dict[str, Any]], faults: Any
) -> None:
    """Idle and loaded peaks of every readable metric of GPU 0, then what was unreadable."""
    target = "cuda:0"
    print(f"{'metric':28} {'idle max':>10} {'load max':>10}")
    for metric in sorted({m for s in idle + busy for m in s.get(target, {})}):
        idle_peak, busy_peak = _peak(idle, target, metric), _peak(busy, target, metric)
        print(f"{metric:28} {_fmt(idle_peak):>10} {_fmt(busy_peak):>10}")
    for metric, why in sorted(sampler.unreadable.items()):
        print(f"unreadable: {metric}: {why}")
    print(f"XID events during the probe: {faults or 'none'}")


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("nvidia-ml-py")
    except Exception:
        return "?"


if __name__ == "__main__":
    sys.exit(main())
