"""Insert the buggy op after the final norm of vLLM's Llama model."""

from __future__ import annotations

import functools
import logging
from typing import Any

from soakgate_dropped_op.ops import (
    misaligned_rows,
    stale_row,
    through_buffer,
    through_fixup_buffer,
)

logger = logging.getLogger(__name__)
_PATCHED = "_soakgate_dropped_op"


def wrap_norm_forward(forward: Any, embedding: Any) -> Any:
    """The norm's forward, with its output routed through the op's buffer (collapse control:
    stale contents are the embedding row of token id 0)."""

    @functools.wraps(forward)
    def forward_through_op(*args: Any, **kwargs: Any) -> Any:
        out = forward(*args, **kwargs)
        stale = stale_row(embedding.weight)
        if isinstance(out, tuple):  # (hidden, residual) when called with a residual
            return (through_buffer(out[0], stale), *out[1:])
        return through_buffer(out, stale)

    return forward_through_op


def wrap_norm_forward_fluent(forward: Any, embedding: Any) -> Any:
    """The norm's forward, routed through the fix-up buffer of the fluent control (stale
    contents: the picked rows misaligned by one feature)."""

    def fix_up(hidden: Any) -> Any:
        return through_fixup_buffer(hidden, misaligned_rows(hidden, embedding.weight))

    @functools.wraps(forward)
    def forward_through_op(*args: Any, **kwargs: Any) -> Any:
        out = forward(*args, **kwargs)
        if isinstance(out, tuple):  # (hidden, residual) when called with a residual
            return (fix_up(out[0]), *out[1:])
        return fix_up(out)

    return forward_through_op


WRAPPERS = {"collapse": wrap_norm_forward, "fluent": wrap_norm_forward_fluent}


def patch_llama(model_class: Any = None, mode: str = "collapse") -> None:
    """Wrap a Llama model class's __init__ (vLLM's by default) so each new model's final norm
    goes through the op; transformers' LlamaModel has the same `norm`/`embed_tokens` layout.
    `mode` picks the control: "collapse" (token id 0 everywhere) or "fluent" (wrong words)."""
    wrapper = WRAPPERS[mode]
    if model_class is None:
        from vllm.model_executor.models import llama

        model_class = llama.LlamaModel
    if getattr(model_class, _PATCHED, False):
        return
    original_init = model_class.__init__

    @functools.wraps(original_init)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        norm: Any = getattr(self, "norm", None)
        embedding: Any = getattr(self, "embed_tokens", None)
        if callable(getattr(norm, "forward", None)) and hasattr(embedding, "weight"):
            # An instance attribute, so parameter names (and weight loading) are unchanged.
            norm.forward = wrapper(norm.forward, embedding)
            logger.warning(
                "soakgate_dropped_op (%s): final norm routed through soakgate_ctl::copy_into", mode
            )

    model_class.__init__ = init
    setattr(model_class, _PATCHED, True)
