"""A control for `soakgate bisect`: a code path only the compiled program takes, which skips a
module (a norm) that eager runs. Bisect should say the norm is not called in the compiled
program, and which module around it diverges, rather than blame the norm's output.

    soakgate bisect examples/bisect/compile_only_path.py:model
"""

from __future__ import annotations

import torch


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(16, 16)
        self.norm = torch.nn.LayerNorm(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.proj(x)
        if torch.compiler.is_compiling():  # the compile-only path: the norm is skipped
            return hidden
        return self.norm(hidden)


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = Block()
        self.head = torch.nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.block(x)))


def model() -> tuple[torch.nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(0)
    return Net().eval(), (torch.randn(2, 5, 16),)
