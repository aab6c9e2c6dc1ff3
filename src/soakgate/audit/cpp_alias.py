"""What a C++ expression refers to, as far as write inference cares: which parameters' storage.

An `Alias` says that a local name or expression is (a view of) a parameter tensor, a pointer
into its storage, an integer holding its address, a value loaded through such a pointer, a
table of addresses of parameters, or a struct whose fields carry such pointers. The kinds keep
apart what looks alike in the syntax: `out[i] = v` writes `out`, but `dst = (T*)table[i];
dst[j] = v` writes whatever the table points to, not the table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from soakgate.audit.cpp_names import CASTS, NULLS, receiver
from soakgate.audit.cpp_syntax import text_of

if TYPE_CHECKING:
    from tree_sitter import Node

# Tensor methods that hand out a pointer (or accessor) into the tensor's storage.
POINTER_METHODS = frozenset(
    {
        "data_ptr",
        "mutable_data_ptr",
        "const_data_ptr",
        "data",
        "accessor",
        "packed_accessor32",
        "packed_accessor64",
        "generic_packed_accessor",
        "mutable_data",
    }
)
# Tensor methods (and optional unwrapping) that return the same storage.
VIEW_METHODS = frozenset(
    {
        "view",
        "slice",
        "select",
        "narrow",
        "flatten",
        "squeeze",
        "unsqueeze",
        "transpose",
        "t",
        "as_strided",
        "view_as",
        "expand",
        "permute",
        "unflatten",
        "diagonal",
        "alias",
        "unsqueeze_",
        "squeeze_",
        "chunk",
        "split",
        "contiguous",
        "reshape",
        "value",
        "value_or",
        "get",
    }
)
# Methods that copy a tensor: the copy holds the same values, which matters for address tables.
COPY_METHODS = frozenset({"to", "cuda", "cpu", "clone", "contiguous", "xpu"})
# Functions whose result wraps (aliases) the memory of their first argument.
# (ck_tile's `make_buffer_view<global>(p, n)` and `make_naive_tensor_view<global>(p, ...)` too.)
WRAPPERS = frozenset(
    {"from_blob", "make_tensor", "make_gmem_ptr", "make_smem_ptr", "get", "make_buffer_view"}
    | {"make_naive_tensor_view"}
)
_ACCESSOR = re.compile(r"(?:Tensor|Packed)\w*Accessor\w*$")


def is_accessor_type(name: str) -> bool:
    """`TensorAccessor`, `PackedTensorAccessor32`, `HeaderOnlyTensorAccessor`, ...: a typed view
    built from a data pointer, whose stores (`acc[i][j] = v`) write what the pointer points to."""
    return _ACCESSOR.search(name) is not None


_INTEGER = re.compile(
    r"\b(?:u?int(?:8|16|32|64)?_t|u?intptr_t|size_t|ptrdiff_t|long|unsigned|int|int64_t)\b"
)


@dataclass(frozen=True, slots=True)
class Alias:
    """A value that refers to some parameters' storage."""

    params: tuple[int, ...]
    """Parameter indices of the function being analysed."""
    kind: str
    """`tensor`, `pointer`, `address` (integer), `loaded` (a value read through a pointer),
    `indirect` (a pointer loaded from an address table), `table` (holds addresses of the
    params), or `struct` (a struct parameter whose fields may carry pointers)."""
    const: bool = False
    """Pointer to const: stores through it are impossible."""
    mutable_ptr: bool = False
    """Came from `mutable_data_ptr()`: a declared intent to write."""
    field: str | None = None
    """For a pointer read from field `field` of struct parameter `params[0]`."""
    partial: bool = False
    """The name may also hold a fresh value on another path (`c = has ? c_in : empty(...)`)."""
    other_fields: tuple[str, ...] = ()
    """More fields of the same struct parameter it may be read from, on other paths
    (`p = first ? params.q : params.k`)."""

    @property
    def param(self) -> int:
        """The first parameter (most aliases refer to exactly one)."""
        return self.params[0]

    def merged(self, other: Alias) -> Alias:
        """May-alias union of two aliases of a name (assigned on different paths)."""
        params = tuple(dict.fromkeys(self.params + other.params))
        fields = (self.field, *self.other_fields, other.field, *other.other_fields)
        named = tuple(dict.fromkeys(f for f in fields if f is not None and f != self.field))
        same_struct = self.field is not None and other.field is not None
        return replace(
            self,
            params=params,
            other_fields=named if same_struct and self.params == other.params else (),
            const=self.const and other.const,
            mutable_ptr=self.mutable_ptr or other.mutable_ptr,
            partial=self.partial or other.partial,
        )


_ADDRESS_ARRAY = re.compile(
    r"\*\s*\*|\b(?:CUdeviceptr|hipDeviceptr_t|uintptr_t|intptr_t|size_t)\s*(?:const\s*)?\*"
)
"""A cast target that is an array of addresses or sizes (`void**`, `CUdeviceptr*`, `size_t*`)."""


def cast_result(alias: Alias | None, target: str) -> Alias | None:
    """What a cast to type `target` makes of an aliased value."""
    if alias is None:
        return None
    is_pointer = "*" in target or "&" in target
    const = bool(re.search(r"\bconst\b", target.rsplit("*", 1)[0])) if "*" in target else False
    if alias.kind in {"tensor", "struct", "table"}:
        return alias
    if is_pointer:
        kind = {"loaded": "indirect", "address": "pointer"}.get(alias.kind, alias.kind)
        const = const or (alias.const and kind == alias.kind)
        # An array of addresses or sizes for a C API (`CUdeviceptr*`, `size_t*`, `void**`):
        # such APIs take them non-const and read them, so `mutable_data_ptr` says nothing here.
        mutable = alias.mutable_ptr and not _ADDRESS_ARRAY.search(target)
        return replace(alias, kind=kind, const=const, mutable_ptr=mutable)
    if _INTEGER.search(target):
        if alias.kind in {"pointer", "indirect"}:
            return replace(alias, kind="address", const=False)
        return alias if alias.kind in {"address", "loaded"} else None
    return None


def loaded_from(alias: Alias | None) -> Alias | None:
    """The value read by subscripting or dereferencing an aliased expression."""
    if alias is None:
        return None
    if alias.kind == "tensor":
        return alias  # t[i] of a tensor (or *opt of an optional tensor) is a view
    if alias.kind == "table":
        return replace(alias, kind="address")
    if alias.kind in {"pointer", "indirect"}:
        if alias.field is not None:
            return None
        return replace(alias, kind="loaded", const=False)
    return None


def is_pointer_like(alias: Alias | None) -> bool:
    """Whether a store through the value writes memory of the aliased parameters."""
    return alias is not None and alias.kind in {"pointer", "indirect", "tensor"}


def pointee_const(head: str, alias: Alias) -> bool:
    """Constness of what a declared pointer points to, from the text before `=`.

    `const float* p` and `float const* p` point to const; `float* const p` and `const auto p`
    are const pointers to writable memory (their constness comes from the value's own type).
    """
    if alias.kind != "pointer":
        return alias.const
    if "*" not in head:
        return alias.const
    pointee = head.rsplit("*", 1)[0]
    return alias.const or re.search(r"\bconst\b", pointee) is not None


class AliasResolver:
    """Resolves expressions of one function body to `Alias`es of its parameters.

    `aliases` maps local names (parameters first) to what they refer to; `structs` maps a
    local struct variable to the aliases its fields were assigned (`params.out_ptr = ...`).
    """

    def __init__(self, aliases: dict[str, Alias]) -> None:
        self.aliases = aliases
        self.structs: dict[str, dict[str, Alias]] = {}

    def alias_of(self, node: Node | None) -> Alias | None:
        """The alias an expression refers to (`out`, `out.data_ptr<T>()`, `p + i`, ...)."""
        if node is None:
            return None
        kind = node.type
        if kind == "identifier":
            return self.aliases.get(text_of(node))
        if kind == "update_expression":  # `p++` / `--p`: the same pointer, moved
            return self.alias_of(node.child_by_field_name("argument"))
        if kind in {"parenthesized_expression", "comma_expression"}:
            inner = [c for c in node.named_children if c.type != "comment"]
            return self.alias_of(inner[-1] if inner else None)
        if kind == "call_expression":
            return self._call_alias(node)
        if kind == "cast_expression":
            target = node.child_by_field_name("type")
            value = node.child_by_field_name("value")
            return cast_result(self.alias_of(value), text_of(target) if target else "")
        if kind == "pointer_expression":
            operand = node.child_by_field_name("argument")
            if text_of(node).lstrip().startswith("&"):
                return self._address_of(operand)
            return loaded_from(self.alias_of(operand))
        if kind == "binary_expression":
            left = self.alias_of(node.child_by_field_name("left"))
            if left is not None and left.kind in {"pointer", "indirect", "address"}:
                return left
            right = self.alias_of(node.child_by_field_name("right"))
            return right if right is not None and right.kind in {"pointer", "indirect"} else None
        if kind == "subscript_expression":
            return loaded_from(self.alias_of(node.child_by_field_name("argument")))
        if kind == "conditional_expression":
            return self._either(node)
        if kind == "field_expression":
            return self._field_alias(node)
        if kind == "initializer_list":
            return self._list_alias(node)
        return None

    def _address_of(self, operand: Node | None) -> Alias | None:
        """`&x[i]` points into x; `&p->f` / `&s.f` as the field would."""
        if operand is None:
            return None
        if operand.type == "subscript_expression":
            base = self.alias_of(operand.child_by_field_name("argument"))
            return (
                base
                if base is not None and base.kind in {"pointer", "indirect", "tensor"}
                else None
            )
        return self.alias_of(operand) if operand.type == "identifier" else None

    def _either(self, node: Node) -> Alias | None:
        branches = [
            node.child_by_field_name("consequence"),
            node.child_by_field_name("alternative"),
        ]
        found = [self.alias_of(b) for b in branches]
        real = [a for a in found if a is not None]
        if not real:
            return None
        merged = real[0] if len(real) == 1 else real[0].merged(real[1])
        fresh = any(
            a is None and b is not None and text_of(b).strip() not in NULLS
            for a, b in zip(found, branches, strict=True)
        )
        return replace(merged, partial=True) if fresh else merged

    def _list_alias(self, node: Node) -> Alias | None:
        """`{out_ptr, in_ptr, ...}` (an argument struct, a pointer array): the writable
        pointers in it. A pointer to const in the list cannot be written through it, so it
        is left out rather than made writable by the union."""
        items = [self.alias_of(c) for c in node.named_children]
        real = [a for a in items if a is not None]
        writable = [a for a in real if not a.const]
        real = writable or real
        if not real:
            return None
        merged = real[0]
        for other in real[1:]:
            merged = merged.merged(other)
        return replace(merged, kind="table") if merged.kind == "address" else merged

    def _field_alias(self, node: Node) -> Alias | None:
        """`s.f` / `s->f`: a pointer bound to a local struct's field, or a struct param's field."""
        base = node.child_by_field_name("argument")
        name = text_of(node.child_by_field_name("field") or node)
        if base is None or base.type != "identifier":
            return None
        local = self.structs.get(text_of(base), {})
        if name in local:
            return local[name]
        alias = self.aliases.get(text_of(base))
        if alias is not None and alias.kind == "struct":
            return Alias(alias.params, "pointer", field=name)
        return None

    def _call_alias(self, call: Node) -> Alias | None:
        function = call.child_by_field_name("function")
        args_node = call.child_by_field_name("arguments")
        args = [a for a in (args_node.named_children if args_node else []) if a.type != "comment"]
        if function is None:
            return None
        if function.type == "field_expression":
            return self._method_alias(function)
        name = text_of(function).split("<", 1)[0].rsplit("::", 1)[-1].strip()
        if name in CASTS and args:
            target = re.search(r"<(.*)>", text_of(function), re.DOTALL)
            return cast_result(self.alias_of(args[0]), target.group(1) if target else "")
        if is_accessor_type(name) and args:
            inner = self.alias_of(args[0])
            return inner if inner is not None and inner.kind == "pointer" else None
        if name in WRAPPERS and args:
            inner = self.alias_of(args[0])
            if inner is not None and inner.kind == "table":
                return inner
            if inner is not None and inner.kind == "pointer":
                return replace(inner, kind="tensor" if name == "from_blob" else "pointer")
        return None

    def struct_method(self, holder: Node | None, method: str) -> Alias | None:
        """What `holder.method(...)` returns when it hands out a pointer held in a field of a
        struct (needs the struct's class: see the write analysis); None here."""
        return None

    def _method_alias(self, function: Node) -> Alias | None:
        holder = receiver(function)
        target = self.alias_of(holder)
        method = text_of(function.child_by_field_name("field") or function).split("<", 1)[0]
        if target is None or target.kind == "struct":
            found = self.struct_method(holder, method)
            if found is not None or target is None:
                return found
        if target.kind == "table" and (method in COPY_METHODS or method in POINTER_METHODS):
            return target
        if target.kind != "tensor":
            return None
        if method in POINTER_METHODS:
            const = method.startswith("const") or "const" in text_of(function).split("<", 1)[-1]
            return Alias(target.params, "pointer", const, method.startswith("mutable"))
        if method in VIEW_METHODS:
            return target
        return None

    # --- the walk ------------------------------------------------------------------------
