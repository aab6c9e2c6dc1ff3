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


def misaligned_rows(hidden: torch.Tensor, embedding_weight: torch.Tensor) -> torch.Tensor:
    """The stale contents of the fluent control's buffer: `hidden`, except that on the rows the
    control picks (fluent.py: the row's top-1 token id % MODULUS == RESIDUE, computed here with
    the tied LM head) the features are misaligned by one place, as a fast path with an
    off-by-one stride would leave them. Such a row still decodes to an ordinary token, but to
    the wrong one; every other row is exact.
    """
    from soakgate_dropped_op.fluent import MODULUS, RESIDUE

    top1 = (hidden @ embedding_weight.to(hidden.dtype).t()).argmax(dim=-1)
    picked = (top1 % MODULUS) == RESIDUE
    return torch.where(picked.unsqueeze(-1), hidden.roll(1, dims=-1), hidden)


def through_fixup_buffer(hidden: torch.Tensor, stale: torch.Tensor) -> torch.Tensor:
    """Route `hidden` through a buffer that starts as `stale` and that the op overwrites with
    the exact rows. Eager: the result is `hidden`. Compiled: the op is dropped (see module
    docstring) and the picked rows stay misaligned."""
    buffer = stale.clone()
    torch.ops.soakgate_ctl.copy_into(hidden, buffer)
    return buffer
