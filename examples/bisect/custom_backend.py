r"""Custom-backend control for `soakgate bisect --backend`: a compiler backend that, as vLLM's
does, hands the graph to inductor with passes of its own, one of them wrong (it drops an add).

Plain `torch.compile` (inductor without the pass) is correct, so bisecting it finds nothing;
with the backend kept at the inductor stage (`--backend`, torch's
`bisect_keep_custom_backend_for_inductor`), the bisector disables inductor's subsystems inside
it and names the wrong pass:

    soakgate bisect examples/bisect/custom_backend.py:model \
        --backend examples/bisect/custom_backend.py:backend
"""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor.compile_fx import compile_fx
from wrong_post_grad_pass import Residual, drop_one_add  # the same block, the same wrong pass


def backend(graph: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    """Inductor with the backend's own post-grad pass (it drops an add), as a serving stack's
    backend passes its own."""
    return compile_fx(graph, example_inputs,
                      config_patches={"post_grad_custom_post_pass": drop_one_add})  # fmt: skip


def model() -> tuple[torch.nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(0)
    return Residual(), (torch.randn(8, 32),)
