"""vLLM general plugin: positive controls for soakgate (see README.md beside this package).

SOAKGATE_DROPPED_OP selects the control; unset (or any other value), installing it changes
nothing:
- `1` (or `collapse`): the final norm goes through a buffer whose stale contents are the
  embedding of token id 0; compiled, every token is `!` (degenerate).
- `fluent`: the final norm goes through a buffer whose stale contents are the hidden state
  misaligned by one feature, on the rows that `fluent.selected` picks (about 1% of decoding
  steps); compiled, the model writes an ordinary but wrong word there and goes on fluently.
Eager (`--enforce-eager`) runs the op and is correct in both.
"""

from __future__ import annotations

import os

ENABLE_VARIABLE = "SOAKGATE_DROPPED_OP"
MODES = {"1": "collapse", "collapse": "collapse", "fluent": "fluent"}


def mode() -> str | None:
    """The control SOAKGATE_DROPPED_OP asks for, or None (the plugin stays inert)."""
    return MODES.get(os.environ.get(ENABLE_VARIABLE, ""))


def register() -> None:
    """Entry point vLLM calls in each of its processes; patches Llama when enabled."""
    chosen = mode()
    if chosen is None:
        return
    from soakgate_dropped_op.patch import patch_llama

    patch_llama(mode=chosen)
