"""Positive control for `soakgate bisect`: the dropped-op plugin patched into transformers.

Importing this module routes the final norm of transformers' Llama models through
`soakgate_ctl::copy_into`, the custom op of `examples/vllm-dropped-op-plugin` whose schema does
not mark its output as written: eager runs it, torch.compile drops it. Use it with `--import`
(docs/trace.md):

    soakgate bisect MODEL_DIR --import examples/bisect/dropped_op_transformers.py
"""

from __future__ import annotations

import sys
from pathlib import Path

PLUGIN = Path(__file__).resolve().parents[1] / "vllm-dropped-op-plugin"
sys.path.insert(0, str(PLUGIN))

from soakgate_dropped_op.patch import patch_llama  # noqa: E402
from transformers.models.llama import modeling_llama  # noqa: E402

patch_llama(modeling_llama.LlamaModel)
