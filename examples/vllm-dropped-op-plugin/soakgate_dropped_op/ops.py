"""A custom op with a deliberate schema bug: it writes into `output`, but the schema says
`Tensor output` instead of `Tensor(a!) output`.

To torch.compile the op therefore looks pure, and since it returns nothing its call has no
users: dead-code elimination removes it. Eager execution runs it and is correct; compiled
execution never writes the buffer. `soakgate audit` reports this schema.
"""

from __future__ import annotations

import math

import torch

# The bug under test: `Tensor output` should be `Tensor(a!) output`.
_lib = torch.library.Library("soakgate_ctl", "FRAGMENT")  # type: ignore[no-untyped-call]
_lib.define("copy_into(Tensor src, Tensor output) -> ()")  # type: ignore[no-untyped-call]


def copy_into_impl(src: torch.Tensor, output: torch.Tensor) -> None:
    """Write `src` into the caller's buffer (what a fused kernel's out-variant does)."""
    output.copy_(src)


_lib.impl("copy_into", copy_into_impl, "CompositeExplicitAutograd")  # type: ignore[no-untyped-call]


@torch.library.register_fake("soakgate_ctl::copy_into", lib=_lib)  # type: ignore[untyped-decorator]
def copy_into_fake(src: torch.Tensor, output: torch.Tensor) -> None:
    """Shape function for tracing: the op returns nothing."""
    return None


def stale_row(embedding_weight: torch.Tensor) -> torch.Tensor:
    """Embedding row of token id 0, scaled to a hidden state's magnitude (sqrt(hidden size))."""
    row: torch.Tensor = embedding_weight[0]
    scale: torch.Tensor = math.sqrt(row.numel()) / row.norm().clamp_min(1e-6)
    return row * scale


def through_buffer(hidden: torch.Tensor, stale: torch.Tensor) -> torch.Tensor:
    """Route `hidden` through a buffer that the op fills.

    The buffer starts with stale contents: `stale` (the embedding of token id 0, as if the
    buffer were reused from an earlier embedding lookup of a padded position). When the op is
    dropped every position keeps that row, and with tied embeddings the logits then pick
    token id 0 (`!` in the shared model) with probability ~1 even at temperature 0.8: the
    `!!!!` collapse seen in the field, without NaNs that would crash the sampler instead.
    """
    buffer = stale.to(hidden.dtype).expand_as(hidden).clone()
    torch.ops.soakgate_ctl.copy_into(hidden, buffer)
    return buffer
