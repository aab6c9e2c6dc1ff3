"""Where the shared model is, why llama.cpp tests skip, and the cached GGUF conversion."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from soakgate.servers.llamacpp import available

REPO = Path(__file__).resolve().parents[2]
CONVERTER = REPO / "scripts" / "make_gguf.py"


def model_dir() -> Path:
    """The shared tiny Llama: ../shared/models/tiny-llama-8k beside the checkout (or $SOAKGATE_MODEL)."""
    return Path(os.environ.get("SOAKGATE_MODEL") or REPO.parent / "shared/models/tiny-llama-8k")


def skip_reason() -> str | None:
    """Why the llama.cpp tests cannot run here, or None when they can."""
    reason = available()
    if reason is None and importlib.util.find_spec("gguf") is None:
        reason = "gguf is not installed (scripts/make_gguf.py needs it); `pip install gguf`"
    if reason is None and not (model_dir() / "config.json").is_file():
        reason = f"the shared model is missing at {model_dir()}"
    return reason


def conversion_key(source: Path) -> str:
    """Fingerprint of the model files (name, size, mtime) and of the converter's own code."""
    digest = hashlib.sha256(CONVERTER.read_bytes())
    for path in sorted(source.iterdir()):
        stat = path.stat()
        digest.update(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def cached_gguf(source: Path, cache: Path) -> Path:
    """The GGUF conversion of `source` under `cache`, converted only when its key is new."""
    out = cache / f"tiny-llama-8k-{conversion_key(source)}.gguf"
    if not out.is_file():
        command = [sys.executable, str(CONVERTER), str(out), "--model", str(source)]
        subprocess.run(command, check=True, capture_output=True, timeout=120)
    return out
