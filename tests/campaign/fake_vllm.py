"""A stand-in for `vllm serve` on a GPU machine without GPUs: it keeps vLLM's memory rules.

Run as `vllm` (a shim on PATH execs this file). Like vLLM it takes one GPU from
`CUDA_VISIBLE_DEVICES`, claims `--gpu-memory-utilization` of it (default 0.9), refuses to start
when the GPU's free share is below that claim (vLLM's start-up check), and fails when another
instance on the same GPU is sizing its memory at the same moment (vLLM measures the whole
device's free memory while it profiles, so a neighbour loading then is charged to it:
vllm-project/vllm#55827). Each GPU's ledger lives in `$FAKE_VLLM_STATE/gpuN/`; every start is
appended to `$FAKE_VLLM_STATE/starts.jsonl` (argv, pinning, cache variables) for the test to
read. Once admitted it execs the mock server on the given host and port, keeping its pid, so
the ledger entry lives exactly as long as the server.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import sys
import time
from pathlib import Path

PROFILE_S = 1.0
"""How long an instance sizes its memory (holds the GPU's profiling lock)."""
CACHE_VARIABLES = ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


def main() -> int:
    parser = argparse.ArgumentParser(prog="vllm")
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("model")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--enforce-eager", action="store_true")
    args, _ = parser.parse_known_args()
    state = Path(os.environ["FAKE_VLLM_STATE"])
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    record = {
        "argv": sys.argv[1:], "pid": os.getpid(), "gpu": gpus, "port": args.port,
        "utilization": args.gpu_memory_utilization, "eager": args.enforce_eager,
        **{name: os.environ.get(name) for name in CACHE_VARIABLES},
    }  # fmt: skip
    with (state / "starts.jsonl").open("a") as log:
        log.write(json.dumps(record) + "\n")
    if not gpus.isdigit():
        print(f"RuntimeError: expected one GPU in CUDA_VISIBLE_DEVICES, got {gpus!r}")
        return 1
    admit(state / f"gpu{gpus}", args.gpu_memory_utilization)
    mock = [sys.executable, "-m", "soakgate.mockserver", "--host", args.host,
            "--port", str(args.port), "--model-name", args.model, "--tokens-per-s", "4000",
            "--seed", gpus]  # fmt: skip
    os.execv(sys.executable, mock)
    return 1  # not reached


def admit(ledger: Path, share: float) -> None:
    """Claim `share` of the GPU or exit 1 with the error vLLM prints."""
    ledger.mkdir(parents=True, exist_ok=True)
    with (ledger / "profiling.lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print("ValueError: No available memory for the cache blocks. Try increasing "
                  "`gpu_memory_utilization` when initializing the engine. (another instance "
                  "was loading on this GPU while this one profiled)", flush=True)  # fmt: skip
            sys.exit(1)
        used = sum(float(entry.read_text()) for entry in _live(ledger))
        if 1.0 - used < share - 1e-9:
            total = 80.0
            print(f"ValueError: Free memory on device ({(1 - used) * total:.1f}/{total} GiB) on "
                  f"startup is less than desired GPU memory utilization ({share}, "
                  f"{share * total:.1f} GiB). Decrease GPU memory utilization or reduce GPU "
                  "memory used by other processes.", flush=True)  # fmt: skip
            sys.exit(1)
        (ledger / f"{os.getpid()}.share").write_text(str(share))
        time.sleep(PROFILE_S)


def _live(ledger: Path) -> list[Path]:
    """Ledger entries of instances still running (a stopped server's entry is stale)."""
    live = []
    for entry in ledger.glob("*.share"):
        try:
            os.kill(int(entry.stem), 0)
        except ProcessLookupError:
            continue
        live.append(entry)
    return live


if __name__ == "__main__":
    sys.exit(main())
