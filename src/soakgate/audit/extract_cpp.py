"""Find op definitions, implementation bindings and function bodies in C++/CUDA/SYCL sources.

Uses tree-sitter's C++ grammar; nothing is compiled or executed. CUDA launch syntax
(`k<<<grid, block>>>(...)`) and `__global__`-style qualifiers are blanked out first (same
length, so offsets hold) because the C++ grammar does not know them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING

from soakgate.audit.model import LiteralPiece, Location
from soakgate.audit.schema import Schema, try_parse_schema

if TYPE_CHECKING:
    from tree_sitter import Node, Parser

CPP_SUFFIXES = frozenset({".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hpp", ".hh", ".sycl"})
_LAUNCH = re.compile(rb"<<<.*?>>>", re.DOTALL)
_CUDA_WORDS = re.compile(rb"\b(?:__global__|__device__|__host__|__forceinline__|__noinline__)\b")
_LAUNCH_BOUNDS = re.compile(rb"__launch_bounds__\s*\([^)]*\)")


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


@dataclass(slots=True)
class RawDef:
    """An `m.def(...)` call before its namespace macro is resolved."""

    schema: Schema
    library: str
    location: Location
    guard: str | None
    pieces: tuple[LiteralPiece, ...]
    inline_impl: str | None


@dataclass(slots=True)
class RawImpl:
    """An `m.impl(...)` call (or a `def` with a function) binding an op to code."""

    op: str
    library: str
    dispatch_key: str | None
    function: str | None
    lambda_fn: FunctionNode | None
    location: Location


@dataclass(slots=True)
class CppFile:
    """Everything extracted from one C++ file."""

    defs: list[RawDef] = field(default_factory=list)
    impls: list[RawImpl] = field(default_factory=list)
    functions: list[FunctionNode] = field(default_factory=list)
    macros: dict[str, str] = field(default_factory=dict)


@cache
def _parser() -> Parser:
    import tree_sitter
    import tree_sitter_cpp

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_cpp.language()))


def _blank(match: re.Match[bytes]) -> bytes:
    return re.sub(rb"[^\n]", b" ", match.group(0))


def preprocess(source: bytes) -> bytes:
    """Blank CUDA-only syntax the C++ grammar cannot parse, keeping every offset."""
    source = _LAUNCH.sub(_blank, source)
    source = _LAUNCH_BOUNDS.sub(_blank, source)
    return _CUDA_WORDS.sub(_blank, source)


def text_of(node: Node) -> str:
    """Source text of a node."""
    return (node.text or b"").decode("utf-8", "replace")


def _string_pieces(node: Node, path: str) -> tuple[str, tuple[LiteralPiece, ...]] | None:
    """Value and literal pieces of a (concatenated) string literal, or None if not one."""
    literals = [node] if node.type == "string_literal" else []
    if node.type == "concatenated_string":
        literals = [c for c in node.children if c.type == "string_literal"]
    if not literals:
        return None
    pieces = []
    for literal in literals:
        raw = text_of(literal)
        if not raw.startswith('"'):
            return None  # prefixed (u8"", R"()") literals are rare in bindings; skip them
        pieces.append(LiteralPiece(path, literal.start_byte + 1, raw[1:-1]))
    value = "".join(p.text for p in pieces)
    fixable = not any("\\" in p.text for p in pieces)
    return value, tuple(pieces) if fixable else ()


def _guard(node: Node) -> str | None:
    """The innermost preprocessor condition around `node`, as written."""
    parent = node.parent
    while parent is not None:
        if parent.type in {"preproc_ifdef", "preproc_if", "preproc_elif", "preproc_else"}:
            header = text_of(parent).splitlines()[0].strip()
            return header if parent.type != "preproc_else" else "#else"
        parent = parent.parent
    return None


def _callee_name(node: Node) -> str:
    """Unqualified name of a called function: `at::mm_out` -> `mm_out`, `k<float>` -> `k`."""
    text = text_of(node)
    text = text.split("<", 1)[0]
    return text.rsplit("::", 1)[-1].strip()


def _function_name(declarator: Node | None) -> str | None:
    while declarator is not None and declarator.type != "function_declarator":
        declarator = declarator.child_by_field_name("declarator")
    if declarator is None:
        return None
    name = declarator.child_by_field_name("declarator")
    return _callee_name(name) if name is not None else None


def _params(declarator: Node) -> list[tuple[str, str]]:
    """(name, full declaration text) for each parameter of a function declarator."""
    plist = declarator.child_by_field_name("parameters")
    result = []
    for param in plist.named_children if plist is not None else []:
        if param.type not in {"parameter_declaration", "optional_parameter_declaration"}:
            continue
        ident = _declared_identifier(param.child_by_field_name("declarator"))
        result.append((ident or "", text_of(param)))
    return result


def _declared_identifier(node: Node | None) -> str | None:
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


def _library_block(node: Node) -> tuple[str, list[str]] | None:
    """(macro name, macro arguments) when `node` is a `TORCH_LIBRARY*(...) { }` block."""
    declarator = node.child_by_field_name("declarator")
    if declarator is None or declarator.type != "function_declarator":
        return None
    name = text_of(declarator.child_by_field_name("declarator") or declarator)
    if not name.startswith("TORCH_LIBRARY"):
        return None
    plist = declarator.child_by_field_name("parameters")
    args = [text_of(p).strip() for p in plist.named_children] if plist is not None else []
    return name, args


def _enclosing_library(node: Node) -> tuple[str, list[str]] | None:
    parent = node.parent
    while parent is not None:
        if parent.type == "function_definition":
            return _library_block(parent)
        parent = parent.parent
    return None


def _dispatch_key(args: list[str]) -> str | None:
    """`torch::kCUDA` / `c10::DispatchKey::Meta` / `"CUDA"` -> `CUDA`; None if no key given."""
    for arg in args:
        word = arg.strip('"').rsplit("::", 1)[-1]
        if word.startswith("k") and word[1:2].isupper():
            return word[1:]
        if "DispatchKey" in arg:
            return word
    return None


def _impl_target(node: Node, path: str) -> tuple[str | None, FunctionNode | None]:
    """Function name or lambda an `impl`/`def` argument refers to (`&f`, `TORCH_FN(f)`, `f`)."""
    if node.type == "lambda_expression":
        declarator = node.child_by_field_name("declarator")
        body = node.child_by_field_name("body")
        params = _params(declarator) if declarator is not None else []
        return None, FunctionNode("<lambda>", params, body, path) if body is not None else None
    text = text_of(node).replace("TORCH_FN", "").replace("&", "").strip("() \n")
    text = re.sub(r"^torch::CppFunction::makeFromUnboxedFunction", "", text).strip("() ")
    return (_callee_name_text(text) or None), None


def _callee_name_text(text: str) -> str:
    return text.split("<", 1)[0].rsplit("::", 1)[-1].strip()


def _handle_call(node: Node, path: str, out: CppFile) -> None:
    function = node.child_by_field_name("function")
    if function is None or function.type != "field_expression":
        return
    method = text_of(function.child_by_field_name("field") or function)
    if method not in {"def", "impl"}:
        return
    library = _enclosing_library(node)
    arguments = node.child_by_field_name("arguments")
    if library is None or arguments is None or not arguments.named_children:
        return
    args = [a for a in arguments.named_children if a.type != "comment"]
    strings = _string_pieces(args[0], path)
    if strings is None:
        return
    value, pieces = strings
    location = Location(path, node.start_point[0] + 1)
    macro, macro_args = library
    namespace = macro_args[0] if macro_args else ""
    if method == "def":
        schema = try_parse_schema(value)
        if schema is None:
            return  # pybind11 `m.def("name", &fn, "doc")` or a non-schema string
        target = next(
            (a for a in args[1:] if a.type not in {"initializer_list", "string_literal"}), None
        )
        fn_name, lambda_fn = _impl_target(target, path) if target is not None else (None, None)
        out.defs.append(RawDef(schema, namespace, location, _guard(node), pieces, fn_name))
        if fn_name or lambda_fn:
            out.impls.append(
                RawImpl(_op_key(schema), namespace, None, fn_name, lambda_fn, location)
            )
        return
    key = macro_args[1] if "IMPL" in macro and len(macro_args) > 2 else None
    key = _dispatch_key([text_of(a) for a in args[1:-1]]) or key
    fn_name, lambda_fn = _impl_target(args[-1], path) if len(args) > 1 else (None, None)
    out.impls.append(RawImpl(value, namespace, key, fn_name, lambda_fn, location))


def _op_key(schema: Schema) -> str:
    return f"{schema.name}.{schema.overload}" if schema.overload else schema.name


def _handle_function(node: Node, path: str, out: CppFile) -> None:
    if _library_block(node) is not None:
        return
    body = node.child_by_field_name("body")
    declarator = node.child_by_field_name("declarator")
    while declarator is not None and declarator.type != "function_declarator":
        declarator = declarator.child_by_field_name("declarator")
    name = _function_name(declarator)
    if body is None or declarator is None or not name:
        return
    out.functions.append(FunctionNode(name, _params(declarator), body, path))


def extract_cpp(source: bytes, path: str) -> CppFile:
    """Op definitions, impl bindings, function bodies and `#define`s of one C++ source."""
    tree = _parser().parse(preprocess(source))
    out = CppFile()
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        kind = node.type
        if kind == "call_expression":
            _handle_call(node, path, out)
        elif kind == "function_definition":
            _handle_function(node, path, out)
        elif kind == "preproc_def":
            name, value = node.child_by_field_name("name"), node.child_by_field_name("value")
            if name is not None and value is not None:
                out.macros[text_of(name)] = text_of(value).strip()
        stack.extend(reversed(node.children))
    return out
