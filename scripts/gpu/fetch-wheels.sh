#!/usr/bin/env bash
# Download (here, where PyPI is reachable) the wheels `transformers serve` needs on the GPU
# machine, which reaches no registry and runs Python 3.12 with torch and transformers but
# without fastapi, uvicorn, pydantic, starlette, openai (and tomli-w).
#
# Usage: scripts/gpu/fetch-wheels.sh [DEST]     (default: .whl in the repo root, git-ignored
#        through .git/info/exclude). Then carry DEST to the machine; see transformers_serve_campaign.sh.
#
# Pinned to versions checked together (pip check) with transformers 5.17. accelerate (and its
# psutil) because serve passes --device as a device_map, which needs accelerate. The last line
# holds what soakgate itself needs and the GPU image lacks: its HTTP/1.1 client (httptools),
# compressed answers (brotli, backports-zstd before Python 3.14), the report's column reader (adbc-driver-*), audit's parser and
# preprocessor (tree-sitter*, pcpp) and pandas' time zones (tzdata). openai stays on 2.x:
# 3.x depends on httpx2, which the GPU machine lacks; 2.x uses the httpx it has.
#
# Every runtime dependency of soakgate (pyproject.toml, with what they depend on) is either in
# `wheels` or in `present_on_gpu_image` (the image's own package list, .library/device/KINDS.md,
# read 2026-11-17): tests/realservers/test_gpu_wheels.py checks it, so a new dependency cannot
# again leave the GPU script unable to import soakgate.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dest="${1:-$repo/.whl}"
wheels=(
    fastapi==0.165.0 starlette==1.10.0 uvicorn==0.54.0
    pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
    annotated-doc==0.0.7 opentelemetry-api==1.45.2 typing-extensions==4.16.0
    anyio==4.16.0 sniffio==1.3.1 openai==2.30.0 distro==1.9.0 jiter==0.19.0 tomli-w==1.2.0 orjson==3.11.5
    accelerate==1.15.0 psutil==7.2.2
    httptools==0.9.0 brotli==1.2.1 adbc-driver-manager==1.13.0 adbc-driver-sqlite==1.13.0
    tree-sitter==0.26.1 tree-sitter-cpp==0.23.4 pcpp==1.30 tzdata==2026.6 backports-zstd==1.8.0
    regex==2026.5.9 jsonschema==4.26.0 jsonschema-rs==0.61.2 jsonschema-specifications==2025.9.1
    referencing==0.37.0 rpds-py==0.30.0
)
# shellcheck disable=SC2034  # read by tests/realservers/test_gpu_wheels.py
present_on_gpu_image=(
    aiohappyeyeballs aiohttp aiosignal attrs click contourpy cycler fonttools formulaic frozenlist
    h11 httpcore httpx idna interface-meta jinja2 kiwisolver markdown-it-py markupsafe matplotlib
    mdurl multidict narwhals numpy nvidia-ml-py packaging pandas patsy pillow prometheus-client
    propcache pyarrow pygments pyparsing python-dateutil rich scipy six statsmodels tqdm
    typing-extensions uvloop wrapt yarl
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
