"""Run `transformers serve`, optionally with soakgate's dropped-op positive control patched in.

    python3 scripts/gpu/serve_transformers.py MODEL --port N [--compile] ...   (serve's flags)

With SOAKGATE_DROPPED_OP=1 the Llama model's final norm is routed through a custom op whose
schema omits `(a!)` on its output (examples/vllm-dropped-op-plugin): eager generation is
unaffected, while torch.compile (`--compile`) drops the op and the model emits `!!!!`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

PLUGIN = Path(__file__).resolve().parents[2] / "examples" / "vllm-dropped-op-plugin"


def patch_if_asked() -> None:
    """Apply the positive-control patch to transformers' LlamaModel when enabled."""
    if os.environ.get("SOAKGATE_DROPPED_OP") != "1":
        return
    sys.path.insert(0, str(PLUGIN))
    from soakgate_dropped_op.patch import patch_llama
    from transformers.models.llama import modeling_llama

    patch_llama(modeling_llama.LlamaModel)
    print("serve_transformers: dropped-op positive control is ON", file=sys.stderr, flush=True)


def main() -> None:
    """Patch (maybe), then hand over to the transformers CLI as `transformers serve ARGS`."""
    patch_if_asked()
    # The typer app itself: the CLI's main() would first look for a newer release online.
    from transformers.cli.transformers import app

    sys.argv = ["transformers", "serve", *sys.argv[1:]]
    app()


if __name__ == "__main__":
    main()
