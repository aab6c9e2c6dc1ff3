"""Names of C++ calls and methods that write or only read through a pointer argument, and
small syntax helpers shared by the write analysis (`writes`) and alias resolution (`cpp_alias`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from soakgate.audit.cpp_syntax import text_of, walk

if TYPE_CHECKING:
    from tree_sitter import Node

__all__ = ["walk"]  # re-exported for the write analysis

# Methods ending in `_` that change metadata or autograd state, not tensor data.
NON_WRITING_INPLACE = frozenset(
    {
        "requires_grad_",
        "retain_grad_",
        "unsqueeze_",
        "squeeze_",
        "transpose_",
        "t_",
        "as_strided_",
        "set_requires_grad_",
    }
)
# Free functions that store through a pointer argument: name -> written argument (-1: last).
POINTER_WRITERS = {
    **dict.fromkeys(
        [
            "atomicAdd",
            "atomicSub",
            "atomicMax",
            "atomicMin",
            "atomicExch",
            "atomicCAS",
            "atomicAnd",
            "atomicOr",
            "atomicXor",
            "atomicInc",
            "atomicDec",
            "memcpy",
            "memset",
            "memmove",
            "cudaMemcpy",
            "cudaMemcpyAsync",
            "cudaMemset",
            "cudaMemsetAsync",
            "cudaMemcpy2D",
            "cudaMemcpy2DAsync",
            "hipMemcpy",
            "hipMemcpyAsync",
            "hipMemset",
            "hipMemsetAsync",
            "__stcs",
            "__stcg",
            "__stwt",
            "__stcv",
            "__stwb",
            "st_global",
            "store_global",
            "block_store",
            "lsc_block_store",
            "scatter",
            "lsc_scatter",
            "atomic_update",
            "lsc_atomic_update",
            "fill",
            "fill_n",
            "aclrtMemcpy",
            "aclrtMemcpyAsync",
            "aclrtMemset",
            "aclrtMemsetAsync",
            "DataCopy",  # AscendC: DataCopy(dst, src, ...), global or local memory either way
            "DataCopyPad",
        ],
        0,
    ),
    "copy": -1,  # cute::copy(src, dst), std::copy(first, last, dst)
    "copy_n": -1,
    "copy_async": -1,
}
# BLAS library calls, documented to write their output matrix or vector (and cuBLASLt its
# workspace) and only read the others: name -> the written arguments' positions.
_GEMM = ("cublas{}gemm", "hipblas{}gemm")
LIBRARY_WRITERS: dict[str, tuple[int, ...]] = {
    **{g.format(t): (12,) for g in _GEMM for t in "HSDCZ"},
    **{g.format(t) + "StridedBatched": (14,) for g in _GEMM for t in "HSDCZ"},
    **{g.format(t): (10,) for g in ("cublas{}gemv", "hipblas{}gemv") for t in "SDCZ"},
    **{p + "GemmEx": (14,) for p in ("cublas", "hipblas")},
    **{p + "SgemmEx": (14,) for p in ("cublas", "hipblas")},
    **{p + "GemmStridedBatchedEx": (16,) for p in ("cublas", "hipblas")},
    "cublasLtMatmul": (10, 13),  # D, workspace (C is read, and is D when in place)
    "hipblasLtMatmul": (10, 13),
}
# Methods of any object that store through their first argument (cub BlockStore::Store,
# at::vec::Vectorized::store, esimd::simd::copy_to, vLLM/SGLang CPU vec_op `v.save(ptr)`).
METHOD_WRITERS = frozenset(
    {"Store", "store", "copy_to", "store_aligned", "save", "cast_store", "store_global"}
)
# Methods of an object wrapping a pointer that store through it (ck_tile's buffer view:
# `buf.template set(i, 0, true, v)`, `buf.update(...)`; its `get` reads).
VIEW_WRITERS = frozenset({"set", "update", "atomic_add", "atomic_max"})
# Calls that only read through a pointer, or only look at it: never evidence of a write.
READERS = frozenset(
    [
        "__ldg",
        "__ldcs",
        "__ldcg",
        "__ldca",
        "__ldlu",
        "__ldcv",
        "ld_global",
        "load_global",
        "block_load",
        "lsc_block_load",
        "gather",
        "lsc_gather",
        "prefetch",
        "lsc_prefetch",
        "Load",
        "load",
        "cast_load",
        "load_global",
        "copy_from",
        "VLLM_LDG",
        "TORCH_CHECK",
        "STD_TORCH_CHECK",
        "TORCH_INTERNAL_ASSERT",
        "TORCH_CHECK_NOT_IMPLEMENTED",
        "AT_ASSERT",
        "CHECK",
        "assert",
        "static_assert",
        "sizeof",
        "alignof",
        "decltype",
        "printf",
        "memcmp",
        "is_aligned",
        "cudaFuncSetAttribute",
        "cudaPointerGetAttributes",
        "cudaStreamSynchronize",
    ]
)
CASTS = frozenset({"static_cast", "reinterpret_cast", "const_cast", "dynamic_cast", "bit_cast"})
NULLS = frozenset({"nullptr", "NULL", "0"})


def short(text: str, limit: int = 100) -> str:
    one_line = re.sub(r"\s+", " ", text).strip()
    return one_line if len(one_line) <= limit else one_line[: limit - 3] + "..."


def callee(node: Node) -> str:
    """Unqualified name of a called function: `at::mm_out` -> `mm_out`, `k<float>` -> `k`."""
    return text_of(node).split("<", 1)[0].rsplit("::", 1)[-1].strip().lstrip("&").strip()


def receiver(function: Node) -> Node | None:
    """The object of `obj.method`; for `MACRO(x)\n obj.method` glued by the grammar's error
    recovery (a macro call lacking `;`), the `obj` it put in an ERROR node, not `MACRO(x)`."""
    errors = [c for c in function.named_children if c.type == "ERROR"]
    if errors:
        names = [n for n in walk(errors[-1]) if n.type == "identifier"]
        if names:
            return names[-1]
    return function.child_by_field_name("argument")


def exclusive(first: Node, second: Node) -> bool:
    """Whether two nodes sit in different branches of one `if` (never run on the same path)."""
    branches = _branches(first)
    return any(branches.get(key, side) != side for key, side in _branches(second).items())


def _branches(node: Node) -> dict[int, str]:
    """`if` statement id -> `then` or `else`, for every `if` the node sits under."""
    found: dict[int, str] = {}
    child, parent = node, node.parent
    while parent is not None:
        if parent.type == "if_statement":
            alternative = parent.child_by_field_name("alternative")
            consequence = parent.child_by_field_name("consequence")
            if alternative is not None and child.id == alternative.id:
                found[parent.id] = "else"
            elif consequence is not None and child.id == consequence.id:
                found[parent.id] = "then"
        child, parent = parent, parent.parent
    return found


def assignment_target(node: Node) -> Node | None:
    """The left side of an assignment; for `MACRO(x)\n y = v;` glued by error recovery (a
    macro call lacking `;` read as the left side), the `y` the grammar put in an ERROR node."""
    left = node.child_by_field_name("left")
    errors = [c for c in node.children if c.type == "ERROR"]
    if left is None or left.type != "call_expression" or not errors:
        return left
    kept = [c for c in errors[-1].named_children if c.type != "comment"]
    return kept[-1] if kept else left


def declared_name(node: Node | None) -> str | None:
    while node is not None and node.type not in {"identifier", "field_identifier"}:
        inner = node.child_by_field_name("declarator")
        node = (
            inner
            if inner is not None
            else (node.named_children[-1] if node.named_children else None)
        )
    return text_of(node) if node is not None else None
