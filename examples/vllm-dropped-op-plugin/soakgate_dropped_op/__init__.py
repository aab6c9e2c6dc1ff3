"""vLLM general plugin: a positive control for soakgate (see README.md beside this package).

Active only when SOAKGATE_DROPPED_OP=1, so installing it changes nothing by itself.
"""

from __future__ import annotations

import os

ENABLE_VARIABLE = "SOAKGATE_DROPPED_OP"


def register() -> None:
    """Entry point vLLM calls in each of its processes; patches Llama when enabled."""
    if os.environ.get(ENABLE_VARIABLE) != "1":
        return
    from soakgate_dropped_op.patch import patch_llama

    patch_llama()
