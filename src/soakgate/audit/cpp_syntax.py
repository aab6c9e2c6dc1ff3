"""C++ syntax shared by extraction and write inference: the parser, functions and their parts.

Uses tree-sitter's C++ grammar; nothing is compiled or executed. CUDA launch syntax
(`k<<<grid, block>>>(...)`) and `__global__`-style qualifiers are blanked out first (same
length, so offsets hold) because the C++ grammar does not know them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from soakgate.audit.cpp_macros import Expanded

if TYPE_CHECKING:
    from tree_sitter import Node, Parser

CPP_SUFFIXES = frozenset({".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hpp", ".hh", ".sycl"})
_LAUNCH = re.compile(rb"<<<.*?>>>", re.DOTALL)
_CUDA_WORDS = re.compile(
    rb"\b(?:__global__|__device__|__host__|__forceinline__|__noinline__|__grid_constant__)\b"
)  # `__grid_constant__`: a kernel parameter's qualifier (`const __grid_constant__ P params`)
_LAUNCH_BOUNDS = re.compile(rb"__launch_bounds__\s*\([^)]*\)")
# `typename Traits::BlockStoreT(tmp).Store(...)` is an expression the grammar reads as a
# declaration; without the keyword it parses as the call it is.
_TYPENAME_CALL = re.compile(rb"\btypename(?=\s+[\w:]+\s*\()")
# `buf.template set(i, 0, true, v)`, `p->template get<T>()`: the disambiguator before a member
# template's name, which the grammar's error recovery turns into a call of `buf` itself.
_MEMBER_TEMPLATE = re.compile(rb"(?:(?<=\.)|(?<=->))\s*\btemplate\b(?=\s+[A-Za-z_])")


@dataclass(slots=True)
class FunctionNode:
    """A function (or lambda) with a body, ready for write inference."""

    name: str
    """Unqualified name, `<lambda>` for lambdas."""
    params: list[tuple[str, str]]
    """(name, type text) per parameter, in order."""
    body: Node
    """The compound statement."""
    path: str
    """File it is in."""
    lines: Expanded | None = None
    """Line map when the body comes from a macro-expanded copy of the file."""
    returns: str = ""
    """Return type as written (`void`, `at::Tensor&`), empty for lambdas and functors."""
    owner: str = ""
    """The class of a member function defined out of line (`QMatrix` for `QMatrix::run`)."""

    def line(self, node: Node) -> int:
        """Original 1-based line of a node of this function's tree."""
        row = node.start_point[0]
        return self.lines.original_line(row) if self.lines is not None else row + 1


@cache
def parser() -> Parser:
    import tree_sitter
    import tree_sitter_cpp

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_cpp.language()))


def _blank(match: re.Match[bytes]) -> bytes:
    return re.sub(rb"[^\n]", b" ", match.group(0))


def preprocess(source: bytes) -> bytes:
    """Blank CUDA-only syntax the C++ grammar cannot parse, keeping every offset."""
    source = _LAUNCH.sub(_blank, source)
    source = _LAUNCH_BOUNDS.sub(_blank, source)
    source = _TYPENAME_CALL.sub(_blank, source)
    if b"template" in source:
        source = _MEMBER_TEMPLATE.sub(_blank, source)
    return _CUDA_WORDS.sub(_blank, source)


def walk(node: Node) -> Iterator[Node]:
    """Descendants in document order."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


def text_of(node: Node) -> str:
    """Source text of a node."""
    return (node.text or b"").decode("utf-8", "replace")


def callee_name(node: Node) -> str:
    """Unqualified name of a called function: `at::mm_out` -> `mm_out`, `k<float>` -> `k`."""
    text = text_of(node)
    text = text.split("<", 1)[0]
    return text.rsplit("::", 1)[-1].strip()


def function_declarator(declarator: Node | None) -> Node | None:
    """The `function_declarator` under pointer/reference declarators (`T& f(...)`, `T* f()`)."""
    while declarator is not None and declarator.type != "function_declarator":
        inner = declarator.child_by_field_name("declarator")
        if inner is None and declarator.type == "reference_declarator":
            inner = next((c for c in declarator.named_children if "declarator" in c.type), None)
        declarator = inner
    return declarator


def function_name(declarator: Node | None) -> str | None:
    declarator = function_declarator(declarator)
    if declarator is None:
        return None
    name = declarator.child_by_field_name("declarator")
    if name is not None and name.type == "attributed_declarator" and name.named_children:
        name = name.named_children[0]  # `operator() [[sycl::reqd_sub_group_size(32)]]`
    if name is not None and name.type == "operator_name":
        return text_of(name).replace(" ", "")
    return callee_name(name) if name is not None else None


def params_of(declarator: Node) -> list[tuple[str, str]]:
    """(name, full declaration text) for each parameter of a function declarator."""
    plist = declarator.child_by_field_name("parameters")
    result = []
    for param in plist.named_children if plist is not None else []:
        if param.type not in {"parameter_declaration", "optional_parameter_declaration"}:
            continue
        ident = declared_identifier(param.child_by_field_name("declarator"))
        result.append((ident or "", text_of(param)))
    return result


def declared_identifier(node: Node | None) -> str | None:
    while node is not None and node.type != "identifier":
        inner = node.child_by_field_name("declarator")
        if inner is None:
            inner = next(
                (
                    c
                    for c in node.named_children
                    if "declarator" in c.type or c.type == "identifier"
                ),
                None,
            )
        node = inner
    return text_of(node) if node is not None else None


def library_block(node: Node) -> tuple[str, list[str]] | None:
    """(macro name, macro arguments) when `node` is a `TORCH_LIBRARY*(...) { }` block."""
    declarator = node.child_by_field_name("declarator")
    if declarator is None or declarator.type != "function_declarator":
        return None
    name = text_of(declarator.child_by_field_name("declarator") or declarator)
    if not name.startswith(("TORCH_LIBRARY", "STABLE_TORCH_LIBRARY")):
        return None
    plist = declarator.child_by_field_name("parameters")
    args = [text_of(p).strip() for p in plist.named_children] if plist is not None else []
    return name, args


def _enclosing_class(node: Node) -> str:
    """The class a member function is defined in the body of (`class K { void m() {...} }`)."""
    body = node.parent
    holder = body.parent if body is not None and body.type == "field_declaration_list" else None
    if holder is None or holder.type not in {"class_specifier", "struct_specifier"}:
        return ""
    name = holder.child_by_field_name("name")
    return text_of(name).split("<", 1)[0].strip() if name is not None else ""


def function_node(node: Node, path: str, lines: Expanded | None) -> FunctionNode | None:
    if library_block(node) is not None:
        return None
    body = node.child_by_field_name("body")
    declarator = function_declarator(node.child_by_field_name("declarator"))
    name = function_name(declarator)
    if body is None or declarator is None or not name:
        return None
    kind = node.child_by_field_name("type")
    top = node.child_by_field_name("declarator")
    returns = text_of(kind) if kind is not None else ""
    if top is not None and top.type in {"reference_declarator", "pointer_declarator"}:
        returns += text_of(top).split(name, 1)[0].strip()  # the `&`/`*` before the name
    qualified = declarator.child_by_field_name("declarator")
    owner = _enclosing_class(node)
    while qualified is not None and qualified.type == "qualified_identifier":
        scope = qualified.child_by_field_name("scope")  # `ns::C::m`: the innermost scope
        owner = text_of(scope).split("<", 1)[0].strip() if scope is not None else owner
        qualified = qualified.child_by_field_name("name")
    return FunctionNode(name, params_of(declarator), body, path, lines, returns, owner)
