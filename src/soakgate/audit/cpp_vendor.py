"""Operators a vendor's op framework defines in the tree, and the kernels behind them.

Huawei's CANN (Ascend NPUs) defines an operator as a class deriving from `OpDef` whose
constructor lists its tensors in order (`this->Input("x")`, `this->Output("y")`; an output with
an input's name is that input, updated in place) and registers it with `OP_ADD(Name)`. A binding
calls it through the generated `aclnnName` API (`EXEC_NPU_CMD(aclnnName, inputs..., attributes...,
outputs...)`: the inputs first, in the definition's order, the outputs last), and the framework
launches the AscendC kernel `name` (the type in snake case) with one global-memory address per
input, then per output, then workspace and tiling. That is enough to follow a binding's tensors
into the kernel, and to know which of them the operator declares it writes.

The definitions are read with a regular expression over the class's text (inputs and outputs
in order, up to the next class or `OP_ADD`): no library parses CANN's operator definitions, and
the builder calls are plain string literals.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_CLASS = re.compile(rb"\bclass\s+(\w+)\s*:\s*public\s+(?:\w+::)*OpDef\b")
_TENSOR = re.compile(rb"this\s*->\s*(Input|Output)\s*\(\s*\"(\w+)\"\s*\)")
_END = re.compile(rb"\bclass\s+\w+\s*:|\bOP_ADD\s*\(")
_SNAKE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
COMMANDS = frozenset({"EXEC_NPU_CMD", "EXEC_OPAPI_CMD", "EXEC_NPU_NO_FORMAT_CHECK_CMD"})
"""torch_npu's macros that call an `aclnn` API by name with the tensors and attributes."""


@dataclass(frozen=True, slots=True)
class VendorOp:
    """One operator definition: its tensors in order, and where it is defined."""

    name: str
    """The operator type (`ScatterNdUpdateV2`)."""
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    path: str

    @property
    def kernel(self) -> str:
        """The AscendC kernel entry the framework launches (`scatter_nd_update_v2`)."""
        return _SNAKE.sub("_", self.name).lower()

    def output_argument(self, output: str, count: int) -> int | None:
        """Which of `count` API arguments (`EXEC_NPU_CMD`'s, after the API name) carries
        `output`: the input of that name for an in-place output, else one of the last ones."""
        if output in self.inputs:
            index = self.inputs.index(output)
            return index if index < count else None
        fresh = [o for o in self.outputs if o not in self.inputs]
        index = count - len(fresh) + fresh.index(output)
        return index if len(self.inputs) <= index < count else None

    def kernel_arguments(self, count: int) -> list[int | None]:
        """For each of the kernel's tensor parameters (inputs, then outputs), the API argument
        passed there, if it is among the `count` given."""
        inputs: list[int | None] = [i if i < count else None for i in range(len(self.inputs))]
        return inputs + [self.output_argument(o, count) for o in self.outputs]


def vendor_ops(contents: Mapping[str, bytes]) -> dict[str, VendorOp]:
    """Every `OpDef` operator defined in the tree, by type (the first definition of a name)."""
    found: dict[str, VendorOp] = {}
    for path, data in contents.items():
        if b"OpDef" not in data:
            continue
        for match in _CLASS.finditer(data):
            end = _END.search(data, match.end())
            body = data[match.end() : end.start() if end is not None else len(data)]
            inputs: list[str] = []
            outputs: list[str] = []
            for kind, name in _TENSOR.findall(body):
                (inputs if kind == b"Input" else outputs).append(name.decode())
            name = match.group(1).decode()
            if (inputs or outputs) and name not in found:
                found[name] = VendorOp(name, tuple(inputs), tuple(outputs), path)
    return found


def api_operator(api: str) -> str | None:
    """The operator an `aclnn` API calls (`aclnnScatterNdUpdateV2` -> `ScatterNdUpdateV2`)."""
    return api[len("aclnn") :] if api.startswith("aclnn") and len(api) > len("aclnn") else None
