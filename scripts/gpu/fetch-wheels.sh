#!/usr/bin/env bash
# Download (here, where PyPI is reachable) the wheels `transformers serve` needs on the GPU
# machine, which reaches no registry and runs Python 3.12 with torch and transformers but
# without fastapi, uvicorn, pydantic, starlette, openai (and tomli-w).
#
# Usage: scripts/gpu/fetch-wheels.sh [DEST]     (default: .whl in the repo root, git-ignored
#        through .git/info/exclude). Then carry DEST to the machine; see transformers_serve_campaign.sh.
#
# Pinned to versions checked together (pip check) with transformers 5.17. accelerate (and its
# psutil) because serve passes --device as a device_map, which needs accelerate. httptools and
# brotli because soakgate itself needs them (its HTTP/1.1 client; compressed answers) and the GPU
# machine lacks them (seen 2026-12-01: neither imported there). openai stays on 2.x:
# 3.x depends on httpx2, which the GPU machine lacks; 2.x uses the httpx it has. Left out
# because the GPU machine has them: click, h11, httpx, httpcore, idna, tqdm, uvloop.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dest="${1:-$repo/.whl}"
wheels=(
    fastapi==0.165.0 starlette==1.10.0 uvicorn==0.54.0
    pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
    annotated-doc==0.0.7 opentelemetry-api==1.45.2 typing-extensions==4.16.0
    anyio==4.16.0 sniffio==1.3.1 openai==2.30.0 distro==1.9.0 jiter==0.19.0 tomli-w==1.2.0 orjson==3.11.5
    accelerate==1.15.0 psutil==7.2.2
    httptools==0.9.0 brotli==1.2.1
)

mkdir -p "$dest"
if [[ "$dest" == "$repo/.whl" && -d "$repo/.git" ]]; then
    grep -qxF '/.whl/' "$repo/.git/info/exclude" 2>/dev/null || echo '/.whl/' >> "$repo/.git/info/exclude"
fi
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 -d "$dest" "${wheels[@]}" 2>&1 | grep -v 'is ignored' || true
count=$(ls "$dest"/*.whl | wc -l)
if [[ "$count" -lt "${#wheels[@]}" ]]; then
    echo "fetch-wheels: expected ${#wheels[@]} wheels in $dest, found $count" >&2
    exit 1
fi
echo "fetch-wheels: $count wheels, $(du -sh "$dest" | cut -f1) in $dest"
