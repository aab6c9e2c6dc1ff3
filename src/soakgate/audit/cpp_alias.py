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
WRAPPERS = frozenset({"from_blob", "make_tensor", "make_gmem_ptr", "make_smem_ptr", "get"})
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

    @property
    def param(self) -> int:
        """The first parameter (most aliases refer to exactly one)."""
        return self.params[0]

    def merged(self, other: Alias) -> Alias:
        """May-alias union of two aliases of a name (assigned on different paths)."""
        params = tuple(dict.fromkeys(self.params + other.params))
        return replace(
            self,
            params=params,
            const=self.const and other.const,
            mutable_ptr=self.mutable_ptr or other.mutable_ptr,
            partial=self.partial or other.partial,
        )


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
        return replace(alias, kind=kind, const=const or (alias.const and kind == alias.kind))
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
