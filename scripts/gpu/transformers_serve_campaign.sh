#!/usr/bin/env bash
# On the GPU machine: serve a model with `transformers serve` eager and compiled, soak both with
# a soakgate campaign (NVML telemetry on), write the HTML report, and copy results to $OUT.
#
# Usage (repo root): scripts/gpu/transformers_serve_campaign.sh MODEL_DIR [options]
#   --minutes M        soak minutes per configuration (default: fit the budget, at most 2.5)
#   --concurrency C    requests in flight (default 32)
#   --serve-flags F    extra `transformers serve` flags for every config (e.g. --continuous-batching)
#   --configs LIST     comma-separated, from eager, compiled, compiled-dropped-op (default
#                      eager,compiled); compiled-dropped-op is the positive control: the buggy
#                      op of examples/vllm-dropped-op-plugin patched into the model, compiled
#   --budget S         seconds the whole script may take (default 530)
#   --device D         transformers serve's --device (default cuda:0; cpu to try it without a GPU)
#   --mock             serve soakgate's mock server instead (tests this script without a GPU)
# Wheels: .whl/*.whl (scripts/gpu/fetch-wheels.sh) are installed into /tmp/site when present.
# Every step is bounded by `timeout`; whatever was collected is copied to $OUT at the end.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
model_src="${1:?usage: $0 MODEL_DIR [--minutes M] [--concurrency C] [--configs LIST] [--mock]}"
shift
minutes="" concurrency=32 config_list=eager,compiled budget=530 mock=0 device=cuda:0 serve_flags=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --minutes) minutes="$2"; shift 2 ;;
        --concurrency) concurrency="$2"; shift 2 ;;
        --configs) config_list="$2"; shift 2 ;;
        --serve-flags) serve_flags="$2"; shift 2 ;;
        --budget) budget="$2"; shift 2 ;;
        --mock) mock=1; shift ;;
        --device) device="$2"; shift 2 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
out="${OUT:-$repo/gpu-out}"
work="$(mktemp -d -t tfserve-campaign.XXXXXX)"
db="$work/tfserve.sqlite"
mkdir -p "$out"
summary="$out/summary.txt"
: > "$summary"
say() { echo "[$(date +%H:%M:%S) +${SECONDS}s] $*" | tee -a "$summary"; }
left() { echo $(( budget - SECONDS )); }

say "repo $repo, work $work, out $out"
if compgen -G ".whl/*.whl" >/dev/null; then
    timeout 120 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --upgrade --target /tmp/site .whl/*.whl && say "wheels installed into /tmp/site" \
        || say "WARNING: wheel install failed"
fi
export PYTHONPATH="/tmp/site:$repo/src${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR="$work/inductor-cache"

check='import soakgate, aiohttp, rich, tomllib; print("soakgate", soakgate.__version__)'
if [[ $mock == 0 ]]; then
    check+='
import torch, transformers
from transformers.utils.import_utils import is_serve_available
print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.is_available())
print("transformers", transformers.__version__, "serve deps", is_serve_available())
assert is_serve_available(), "transformers serve dependencies missing"'
fi
if ! timeout 120 python3 -c "$check" 2>&1 | tee -a "$summary"; then
    say "FATAL: preflight imports failed"; exit 1
fi
timeout 20 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 \
    | tee -a "$summary" || true

# transformers serve samples only when the model's generation config says do_sample=true (a
# request's temperature alone does not turn sampling on), so serve a copy that says so.
model="$work/model"
if [[ $mock == 0 ]]; then
    cp -r "$model_src" "$model" || { say "FATAL: cannot copy $model_src"; exit 1; }
    timeout 30 python3 - "$model/generation_config.json" <<'EOF'
import json, sys
path = sys.argv[1]
try:
    config = json.load(open(path))
except FileNotFoundError:
    config = {}
config.update(do_sample=True, temperature=0.8, top_k=0, top_p=1.0)
json.dump(config, open(path, "w"), indent=2)
EOF
fi

IFS=, read -r -a configs <<< "$config_list"
for label in "${configs[@]}"; do
    case "$label" in
        eager|compiled|compiled-dropped-op) ;;
        *) say "FATAL: unknown config $label"; exit 2 ;;
    esac
done
n=${#configs[@]}
# Per block: ~130 s for start-up, warm-up (compiling) and the end grace, plus the soak; keep
# ~60 s for the report and copies.
if [[ -z "$minutes" ]]; then
    soak_s=$(( ( $(left) - 60 - n * 130 ) / n ))
    (( soak_s > 150 )) && soak_s=150
    (( soak_s < 30 )) && soak_s=30
else
    soak_s=$(python3 -c "print(int(float('$minutes') * 60))")
fi
say "configs: ${configs[*]}; ${soak_s}s soak each at concurrency $concurrency"

if [[ $mock == 1 ]]; then
    command='{python} -m soakgate.mockserver --host {host} --port {port} {flags}'
    declare -A flags=([eager]="--tokens-per-s 3000" [compiled]="--tokens-per-s 4000"
                      [compiled-dropped-op]="--tokens-per-s 4000 --collapse-rate 0.5")
    declare -A envs=([eager]="" [compiled]="" [compiled-dropped-op]="")
    health=/health model_name=""
else
    command="{python} scripts/gpu/serve_transformers.py {model} --host {host} --port {port} --device $device $serve_flags {flags}"
    declare -A flags=([eager]="--no-compile" [compiled]="--compile"
                      [compiled-dropped-op]="--compile")
    declare -A envs=([eager]="" [compiled]="" [compiled-dropped-op]='SOAKGATE_DROPPED_OP = "1"')
    health=/health model_name="$model"
fi

toml="$work/campaign.toml"
{
    echo 'name = "transformers-serve"'
    echo 'order = "sequential"'
    echo 'devices = ["cuda:0"]'
    echo '[server]'
    echo "command = '$command'"
    echo "model = '$model_name'"
    echo "health = '$health'"
    echo 'startup_timeout = "4m"'
    echo 'warmup_requests = 2'
    echo 'stop_grace = "10s"'
    for label in "${configs[@]}"; do
        echo '[[configs]]'
        echo "label = '$label'"
        echo "flags = '${flags[$label]}'"
        echo "env = { ${envs[$label]} }"
    done
    echo '[load]'
    echo "concurrency = $concurrency"
    echo 'max_tokens = 128'
    echo 'temperature = 0.8'
    echo 'timeout = "240s"'
    echo 'grace = "15s"'
    echo "duration = \"${soak_s}s\""
    echo '[guard]'
    echo 'health_interval = 10'
    echo 'health_timeout = 20'
    echo 'max_restarts = 1'
    echo 'telemetry = true'
    echo 'telemetry_interval = 5'
} > "$toml"
cp "$toml" "$out/campaign.toml"

# Leave ~50 s after the campaign for the report and the copies.
campaign_s=$(( $(left) - 50 ))
say "campaign (bounded to ${campaign_s}s)"
timeout -s TERM -k 20 "$campaign_s" python3 -m soakgate campaign "$toml" --db "$db" \
    > "$work/campaign.out" 2>&1
campaign_rc=$?
say "campaign exit code $campaign_rc"
tail -n 40 "$work/campaign.out" | tee -a "$summary"

report_s=$(( $(left) - 15 ))
(( report_s < 10 )) && report_s=10
timeout "$report_s" python3 -m soakgate report "$db" --html "$out/report.html" \
    --hmm-replicates 0 --gap-permutations 0 > "$work/report.txt" 2>&1
report_rc=$?
say "report exit code $report_rc"
cat "$work/report.txt" >> "$summary"

timeout 60 python3 - "$db" <<'EOF' 2>&1 | tee -a "$summary"
import sys
from soakgate.store import open_analysis

store = open_analysis(sys.argv[1])  # read-only: never creates a database that is not there
arms: dict = {}
for g in store.generations():
    arm = arms.setdefault(g.label, {"n": 0, "errors": 0, "cancelled": 0, "collapses": 0, "tokens": 0,
                                    "start": g.started_at, "end": g.ended_at, "flagged": None})
    arm["n"] += 1
    arm["start"], arm["end"] = min(arm["start"], g.started_at), max(arm["end"], g.ended_at)
    if not g.ok:  # requests still queued when a duration ends are `cancelled`, not faults
        arm["cancelled" if g.error_class == "cancelled" else "errors"] += 1
        continue
    arm["tokens"] += g.completion_tokens or 0
    if g.collapsed:
        arm["collapses"] += 1
        arm["flagged"] = arm["flagged"] or (g.text or "")[:40]
print(f"{'label':<20} {'n':>5} {'errors':>7} {'cancelled':>9} {'collapses':>9} {'tok/s':>8}"
      "  first flagged text")
for label, a in arms.items():
    rate = a["tokens"] / max(a["end"] - a["start"], 1e-9)
    print(f"{label:<20} {a['n']:>5} {a['errors']:>7} {a['cancelled']:>9} {a['collapses']:>9} {rate:>8.1f}  "
          f"{a['flagged']!r}")
store.close()
EOF
table_rc=${PIPESTATUS[0]}

cp "$db" "$out/" 2>/dev/null
logs=$(ls -1 "$work"/tfserve.logs/*/*/*.log 2>/dev/null | head -n 4)
for log in $logs; do
    block=$(basename "$(dirname "$log")")
    tail -c 4000000 "$log" > "$out/server-$block.log"
done
say "done in ${SECONDS}s; files in $out: $(ls "$out" | tr '\n' ' ')"
# A pipeline gates on this: the campaign's own code first (1: a block failed, 2: it could not
# run, 124/137: out of time), then the report's, then the summary table's.
for rc in "$campaign_rc" "$report_rc" "$table_rc"; do
    if [[ "$rc" != 0 ]]; then
        say "FAILED (exit $rc)"
        exit "$rc"
    fi
done
