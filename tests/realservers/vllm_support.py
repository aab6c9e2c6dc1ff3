"""Where vLLM's CPU build is, why its tests skip, and campaign files adapted for a test run."""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from soakgate.records import Generation
from soakgate.store import open_store

REPO = Path(__file__).resolve().parents[2]
SERVE_SCRIPT = REPO / "scripts" / "serve-vllm-cpu.sh"
PLUGIN_DIST = "soakgate-dropped-op-plugin"
DEFAULT_PYTHONS = (REPO / ".venv-vllm" / "bin" / "python", Path("/work/venvs/vllm-cpu/bin/python"))


def model_dir() -> Path:
    """The shared tiny Llama beside the checkout (or $SOAKGATE_MODEL)."""
    return Path(os.environ.get("SOAKGATE_MODEL") or REPO.parent / "shared/models/tiny-llama-8k")


def wrong_norm_copy(folder: Path, scale: float = 1.3) -> Path:
    """A copy of the shared model whose layer 1 post-attention RMSNorm weight is `scale` times
    too large (a norm kernel with a wrong constant: every token's distribution shifts a little,
    the text stays fluent; BENCHMARKS.md section 17's held-out `wrong-norm` control, here as
    weights a server loads). Every other file is the shared model's, copied."""
    import shutil

    from safetensors.torch import load_file, save_file

    name = "model.layers.1.post_attention_layernorm.weight"
    folder.mkdir(parents=True)
    for path in model_dir().iterdir():
        if path.suffix != ".safetensors":
            shutil.copy(path, folder / path.name)
            continue
        tensors = load_file(path)
        if name in tensors:
            tensors[name] = (tensors[name].float() * scale).to(tensors[name].dtype)
        save_file(tensors, folder / path.name, metadata={"format": "pt"})
    return folder


def vllm_python() -> Path | None:
    """$SOAKGATE_VLLM_PYTHON, else the first default venv (scripts/setup-vllm-cpu.sh) present."""
    given = os.environ.get("SOAKGATE_VLLM_PYTHON")
    if given:
        return Path(given)
    return next((p for p in DEFAULT_PYTHONS if p.is_file()), None)


def skip_reason() -> str | None:
    """Why the vLLM tests cannot run here, or None when they can."""
    if os.environ.get("CI") == "true" and not os.environ.get("SOAKGATE_VLLM_PYTHON"):
        # Measured: the install takes minutes and 3.4 GB, and these tests ~10 min more; CI runs
        # them only when told where the venv is, never because one happens to be on the machine.
        return (
            "CI runs the vLLM tests only with SOAKGATE_VLLM_PYTHON set (docs/real-servers-vllm.md)"
        )
    python = vllm_python()
    if python is None or not python.is_file():
        where = (
            f"$SOAKGATE_VLLM_PYTHON={python}" if python else " or ".join(map(str, DEFAULT_PYTHONS))
        )
        return f"no vLLM CPU venv at {where}; run scripts/setup-vllm-cpu.sh (~3.5 GB, minutes)"
    if not (model_dir() / "config.json").is_file():
        return f"the shared model is missing at {model_dir()}"
    return None


def plugin_installed(python: Path) -> bool:
    """True when the positive-control plugin is installed in the vLLM venv."""
    code = f"import importlib.metadata as m; m.distribution({PLUGIN_DIST!r})"
    return (
        subprocess.run([str(python), "-c", code], capture_output=True, timeout=60).returncode == 0
    )


def campaign_for_test(
    example: Path, out_dir: Path, python: Path, requests: int, concurrency: int = 8,
    max_tokens: int = 64,
) -> Path:  # fmt: skip
    """The example campaign, made runnable from any folder: absolute script and model paths,
    the venv's Python in the server environment, and a smaller request count."""
    data: dict[str, Any] = tomllib.loads(example.read_text())
    server = data["server"]
    server["command"] = server["command"].replace("scripts/serve-vllm-cpu.sh", str(SERVE_SCRIPT))
    server["model"] = str(model_dir())
    server["env"] = {**server.get("env", {}), "SOAKGATE_VLLM_PYTHON": str(python)}
    data["load"].update(requests=requests, concurrency=concurrency, max_tokens=max_tokens)
    path = out_dir / example.name
    path.write_text(tomli_w.dumps(data))
    return path


def stored(db: Path) -> tuple[list[Generation], list[Any]]:
    """Every generation and event in the database."""
    store = open_store(db)
    try:
        generations = list(store.generations())
        events = [e for run in store.runs() for e in store.events(run.run_id)]
        return generations, events
    finally:
        store.close()
