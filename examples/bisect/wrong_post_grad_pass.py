"""Inductor-stage control for `soakgate bisect`: a custom post-grad pass that drops one add.

`model()` installs the pass as `torch._inductor.config.post_grad_custom_post_pass` and returns a
small residual block with one input: eager computes `relu(linear(x) + x) * 2`; under inductor
the pass deletes the `+ x`, so only inductor's post-grad passes can be to blame:

    soakgate bisect examples/bisect/wrong_post_grad_pass.py:model
"""

from __future__ import annotations

import torch
import torch._inductor.config


class Residual(torch.nn.Module):
    """`relu(linear(x) + x) * 2`."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.proj(x) + x) * 2


def drop_one_add(graph: torch.fx.Graph) -> None:
    """The deliberate bug: the first `aten.add.Tensor` is replaced by its first operand."""
    for node in graph.nodes:
        if node.op == "call_function" and node.target is torch.ops.aten.add.Tensor:
            node.replace_all_uses_with(node.args[0])
            graph.erase_node(node)
            return


def model() -> tuple[torch.nn.Module, tuple[torch.Tensor]]:
    """The block and its example input, with the wrong pass installed."""
    torch._inductor.config.post_grad_custom_post_pass = drop_one_add
    torch.manual_seed(0)
    return Residual(), (torch.randn(8, 32),)
