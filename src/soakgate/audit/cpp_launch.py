"""Kernel launches through the CUDA/HIP runtime API rather than `kernel<<<grid, block>>>(...)`.

`cudaLaunchKernelEx(&config, kernel, a, b)` passes the kernel's arguments directly;
`cudaLaunchKernel((void*)kernel, grid, block, args, smem, stream)` passes `void* args[] =
{&a, &b}`, a table of their addresses. Either way the kernel is often named through a local
(`auto kernel = K<T>;`). Write inference treats such a call as a call of the kernel with those
arguments.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from soakgate.audit.cpp_names import CASTS, callee
from soakgate.audit.cpp_syntax import text_of

if TYPE_CHECKING:
    from tree_sitter import Node

# name -> (position of the kernel, "direct" or "table", position of the first argument or of
# the `void**` table of argument addresses)
LAUNCHERS: dict[str, tuple[int, str, int]] = {
    "cudaLaunchKernel": (0, "table", 3),
    "cudaLaunchCooperativeKernel": (0, "table", 3),
    "hipLaunchKernel": (0, "table", 3),
    "hipLaunchCooperativeKernel": (0, "table", 3),
    "cudaLaunchKernelExC": (1, "table", 2),
    "cudaLaunchKernelEx": (1, "direct", 2),
    "hipLaunchKernelGGL": (0, "direct", 5),
}
_NAMES = {"identifier", "template_function", "qualified_identifier"}


def strip_casts(node: Node | None) -> Node | None:
    """`(void*)x`, `reinterpret_cast<void*>(x)`, `&x`, `(x)` -> `x`."""
    while node is not None:
        if node.type == "cast_expression":
            node = node.child_by_field_name("value")
        elif node.type == "parenthesized_expression" and node.named_children:
            node = node.named_children[-1]
        elif node.type == "pointer_expression" and text_of(node).lstrip().startswith("&"):
            node = node.child_by_field_name("argument")
        elif node.type == "call_expression" and _cast_call(node):
            arguments = node.child_by_field_name("arguments")
            node = arguments.named_children[0] if arguments and arguments.named_children else None
        else:
            return node
    return None


def _cast_call(node: Node) -> bool:
    function = node.child_by_field_name("function")
    return function is not None and callee(function) in CASTS


def kernel_of(node: Node | None) -> str | None:
    """The function a launch's kernel argument names (through casts and `&`)."""
    bare = strip_casts(node)
    return callee(bare) if bare is not None and bare.type in _NAMES else None


def address_table(value: Node) -> list[Node] | None:
    """`{&a, &b, (void*)&c}`: the variables whose addresses it lists, None if not such a list."""
    if value.type != "initializer_list" or not value.named_children:
        return None
    items = []
    for item in value.named_children:
        if item.type == "comment":
            continue
        if "&" not in text_of(item):
            return None
        bare = strip_casts(item)
        if bare is None or bare.type != "identifier":
            return None
        items.append(bare)
    return items


def launch_arguments(
    name: str, args: list[Node], tables: dict[str, list[Node]]
) -> tuple[str, list[Node]] | None:
    """(kernel, the expressions it receives) for a runtime launch call, None if not readable."""
    position, mode, first = LAUNCHERS[name]
    if len(args) <= max(position, first if mode == "table" else position):
        return None
    kernel = kernel_of(args[position])
    if kernel is None:
        return None
    if mode == "direct":
        return kernel, args[first:]
    table = strip_casts(args[first])
    if table is None or table.type != "identifier" or text_of(table) not in tables:
        return None
    return kernel, tables[text_of(table)]
