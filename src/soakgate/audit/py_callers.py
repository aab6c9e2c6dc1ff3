"""What the tree's own Python callers show about an op: fresh, uninitialised buffers handed to it.

A caller that allocates `out = torch.empty(...)` (or `empty_like`, `empty_strided`,
`x.new_empty(...)`) and hands it to `torch.ops.ns.op(..., out, ...)` before anything reads it
relies on the op to fill it: an op that only read it would read uninitialised memory. That is
evidence about the op's writes which needs neither its implementation (a closed vendor binary,
a kernel the analysis cannot follow) nor any name. An initialised buffer (`torch.zeros` / `ones`
/ `full`) may be an input: it is evidence only when the caller then returns it with nothing else
touching it first (the op's result). A zero-element allocation is a placeholder, not a buffer;
`scan` lets an implementation that never reads the parameter override its callers.

Source order stands in for control flow, conservatively: the allocation must be the name's last
binding before the call, and nothing may touch the name in between except its metadata
(`out.shape`, `out.size(0)`, `out.dtype`, ...). Scopes are functions and the module body; a
nested function or class is a scope of its own. Hand-written: no library answers "is this
argument freshly allocated and untouched at this call" for Python source.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from soakgate.audit.model import Location
from soakgate.audit.py_fakes import dotted

_ALLOCATORS = frozenset({"torch.empty", "torch.empty_like", "torch.empty_strided"})
_ALLOCATING_METHODS = frozenset({"new_empty", "new_empty_strided"})
_FILLERS = frozenset(
    {"torch.zeros", "torch.zeros_like", "torch.ones", "torch.ones_like", "torch.full",
     "torch.full_like"}
)  # fmt: skip
_FILLING_METHODS = frozenset({"new_zeros", "new_ones", "new_full"})
_METADATA = frozenset(
    {"shape", "dtype", "device", "size", "stride", "numel", "dim", "ndim", "is_contiguous",
     "element_size", "nelement", "layout", "is_cuda", "requires_grad"}
)  # fmt: skip
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
Position = tuple[int, int]


@dataclass(frozen=True, slots=True)
class FreshBuffer:
    """One argument of an op call that a fresh, untouched buffer fills."""

    op: str
    """The called op, `namespace::name` or `namespace::name.overload`."""
    slot: int | str
    """Positional index, or the keyword it was passed by."""
    expression: str
    """The call, one line, shortened."""
    location: Location
    allocated: str
    """`empty` (uninitialised, untouched) or `filled` (initialised, untouched, then returned)."""


def allocation(node: ast.AST) -> str | None:
    """`empty` for a `torch.empty(...)`-like call (a new tensor whose contents are undefined),
    `filled` for `torch.zeros(...)`-like ones, None otherwise or when the shape is written as
    holding no element (`torch.empty(0)`: a placeholder for an absent output, not a buffer)."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else ""
    if name in _ALLOCATING_METHODS or dotted(func) in _ALLOCATORS:
        kind = "empty"
    elif name in _FILLING_METHODS or dotted(func) in _FILLERS:
        kind = "filled"
    else:
        return None
    # `full(size, value)` takes one size; the others take sizes as separate arguments too
    sized = node.args[:1] if "full" in dotted(func).rsplit(".", 1)[-1] else node.args
    shape = sized[0] if len(sized) == 1 and isinstance(sized[0], ast.Tuple | ast.List) else None
    dims = shape.elts if shape is not None else sized
    return None if any(isinstance(d, ast.Constant) and d.value == 0 for d in dims) else kind


def fresh_buffers(
    tree: ast.Module, path: str, resolve: Callable[[ast.Call], str | None]
) -> list[FreshBuffer]:
    """Every argument of an op call (`resolve` names the op a call reaches, None if it is not
    one) that is a fresh allocation, inline or through a name nothing touched since."""
    found: list[FreshBuffer] = []
    for scope, calls in _op_calls(tree, resolve).items():
        found.extend(_in_scope(scope, path, calls))
    return found


def _op_calls(
    tree: ast.Module, resolve: Callable[[ast.Call], str | None]
) -> dict[ast.AST, list[tuple[ast.Call, str]]]:
    """The op calls of each scope that holds one (the only scopes worth analysing)."""
    calls: dict[ast.AST, list[tuple[ast.Call, str]]] = {}
    stack: list[tuple[ast.AST, ast.AST]] = [(child, tree) for child in ast.iter_child_nodes(tree)]
    while stack:
        node, scope = stack.pop()
        if isinstance(node, ast.Call) and (op := resolve(node)) is not None:
            calls.setdefault(scope, []).append((node, op))
        inner = node if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else scope
        if isinstance(node, ast.Lambda | ast.ClassDef):
            inner = node  # a scope of its own, not analysed (no statements to order)
        stack.extend((child, inner) for child in ast.iter_child_nodes(node))
    return {scope: found for scope, found in calls.items() if not isinstance(scope, ast.Lambda)}


def _own_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of one scope, not those of the functions and classes nested in it."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        if isinstance(node, _SCOPES):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _start(node: ast.AST) -> Position:
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))


def _end(node: ast.AST) -> Position:
    return (getattr(node, "end_lineno", 0) or 0, getattr(node, "end_col_offset", 0) or 0)


def _in_scope(scope: ast.AST, path: str, calls: list[tuple[ast.Call, str]]) -> list[FreshBuffer]:
    nodes = list(_own_nodes(scope))
    parents = {id(child): node for node in nodes for child in ast.iter_child_nodes(node)}
    bindings: dict[str, list[tuple[Position, str | None]]] = {}
    """Name -> (where the binding takes effect, the allocation it binds: `allocation`)."""
    touches: dict[str, list[Position]] = {}
    returned: dict[str, list[Position]] = {}
    for node in nodes:
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            kind = None
            if isinstance(node, ast.Assign) and len(targets) == 1:
                kind = allocation(node.value) if isinstance(targets[0], ast.Name) else None
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                kind = allocation(node.value)
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        bindings.setdefault(name.id, []).append((_end(node), kind))
        elif isinstance(node, ast.Return) and node.value is not None:
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            for value in values:
                if isinstance(value, ast.Name):
                    returned.setdefault(value.id, []).append(_start(value))
        if not isinstance(node, ast.Name):
            continue
        if not isinstance(node.ctx, ast.Load):
            if not isinstance(parents.get(id(node)), ast.Assign | ast.AnnAssign | ast.AugAssign):
                bindings.setdefault(node.id, []).append((_start(node), None))  # for, with, del
        elif not _metadata_use(node, parents):
            touches.setdefault(node.id, []).append(_start(node))
    found = []
    for node, op in calls:
        slots: list[tuple[int | str, ast.expr]] = []
        for index, arg in enumerate(node.args):
            if isinstance(arg, ast.Starred):
                break
            slots.append((index, arg))
        slots.extend((k.arg, k.value) for k in node.keywords if k.arg is not None)
        for slot, arg in slots:
            kind = allocation(arg)
            if isinstance(arg, ast.Name):
                kind = _untouched(arg, _start(node), bindings, touches, returned)
            if kind == "empty" or (kind == "filled" and isinstance(arg, ast.Name)):
                text = " ".join(ast.unparse(node).split())
                text = text if len(text) <= 80 else text[:77] + "..."
                found.append(FreshBuffer(op, slot, text, Location(path, node.lineno), kind))
    return found


def _metadata_use(name: ast.Name, parents: dict[int, ast.AST]) -> bool:
    parent = parents.get(id(name))
    return isinstance(parent, ast.Attribute) and parent.attr in _METADATA


def _untouched(
    arg: ast.Name,
    call: Position,
    bindings: dict[str, list[tuple[Position, str | None]]],
    touches: dict[str, list[Position]],
    returned: dict[str, list[Position]],
) -> str | None:
    """The allocation `arg` holds if nothing read or handed it on between its binding and the
    argument: `empty` for an uninitialised one; `filled` for an initialised one that the
    scope then returns with nothing else touching it first (the op's result); else None."""
    before = [b for b in bindings.get(arg.id, []) if b[0] <= call]
    if not before:
        return None
    where, kind = max(before)
    here = _start(arg)
    used = touches.get(arg.id, [])
    if kind is None or any(where < t < here for t in used):
        return None
    if kind == "empty":
        return kind
    later = [b[0] for b in bindings.get(arg.id, []) if b[0] > here]
    for end in returned.get(arg.id, []):
        if end > here and not any(here < t < end for t in used + later):
            return kind
    return None
