#!/usr/bin/env bash
# Serve a model with vLLM's CPU build (installed by scripts/setup-vllm-cpu.sh), in the foreground.
#
# Usage: scripts/serve-vllm-cpu.sh [--port N] [--host H] [--model PATH] [--run-dir DIR]
#                                  [--eager] [EXTRA VLLM ARGS...]
#   --eager     pass --enforce-eager (no torch.compile); without it vLLM compiles (Inductor)
#   --run-dir   folder for this run's vLLM and Inductor caches (default: a new temp folder)
# The Python is $SOAKGATE_VLLM_PYTHON, else .venv-vllm/bin/python in the repo, else
# /work/venvs/vllm-cpu/bin/python. Stop it with SIGTERM (the script execs the server).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
port=8000
host=127.0.0.1
model="$repo/../shared/models/tiny-llama-8k"
run_dir=""
extra=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --port) port="$2"; shift 2 ;;
        --host) host="$2"; shift 2 ;;
        --model) model="$2"; shift 2 ;;
        --run-dir) run_dir="$2"; shift 2 ;;
        --eager) extra+=(--enforce-eager); shift ;;
        *) extra+=("$1"); shift ;;
    esac
done

python="${SOAKGATE_VLLM_PYTHON:-}"
if [[ -z "$python" ]]; then
    for candidate in "$repo/.venv-vllm/bin/python" /work/venvs/vllm-cpu/bin/python; do
        if [[ -x "$candidate" ]]; then python="$candidate"; break; fi
    done
fi
if [[ -z "$python" || ! -x "$python" ]]; then
    echo "serve-vllm-cpu: no vLLM python; run scripts/setup-vllm-cpu.sh or set SOAKGATE_VLLM_PYTHON" >&2
    exit 2
fi

run_dir="${run_dir:-$(mktemp -d -t vllm-cpu-run.XXXXXX)}"
mkdir -p "$run_dir"
# The KV cache is in GiB of host memory; the default would take most of a small machine.
export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"
# Keep compiled artefacts in the run's folder so runs do not share (or pollute) caches.
export VLLM_CACHE_ROOT="$run_dir/vllm-cache"
export TORCHINDUCTOR_CACHE_DIR="$run_dir/inductor-cache"
export HF_HUB_OFFLINE=1
export TRANSFORMERS_OFFLINE=1
export VLLM_NO_USAGE_STATS=1
export DO_NOT_TRACK=1

# `vllm serve` fails here (its console script looks up a distribution named `vllm`);
# the module entry point works.
exec "$python" -m vllm.entrypoints.openai.api_server \
    --model "$model" --host "$host" --port "$port" \
    --dtype float32 --max-model-len 2048 "${extra[@]}"
