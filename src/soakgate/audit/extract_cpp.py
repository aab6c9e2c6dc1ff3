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

from soakgate.audit.cpp_macros import Expanded
from soakgate.audit.model import LiteralPiece, Location
from soakgate.audit.schema import Schema, try_parse_schema

if TYPE_CHECKING:
    from tree_sitter import Node, Parser

CPP_SUFFIXES = frozenset({".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hpp", ".hh", ".sycl"})
_LAUNCH = re.compile(rb"<<<.*?>>>", re.DOTALL)
_CUDA_WORDS = re.compile(rb"\b(?:__global__|__device__|__host__|__forceinline__|__noinline__)\b")
_LAUNCH_BOUNDS = re.compile(rb"__launch_bounds__\s*\([^)]*\)")
# `typename Traits::BlockStoreT(tmp).Store(...)` is an expression the grammar reads as a
# declaration; without the keyword it parses as the call it is.
_TYPENAME_CALL = re.compile(rb"\btypename(?=\s+[\w:]+\s*\()")


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

    def line(self, node: Node) -> int:
        """Original 1-based line of a node of this function's tree."""
        row = node.start_point[0]
        return self.lines.original_line(row) if self.lines is not None else row + 1


@dataclass(slots=True)
class ClassNode:
    """A class or struct with a call operator: a SYCL functor kernel (or an aggregate)."""

    name: str
    fields: list[tuple[str, str]]
    """(name, declaration text) per data member, in order."""
    ctor_params: list[tuple[str, str]] | None
    """Constructor parameters, None for an aggregate (brace-initialised in field order)."""
    ctor_inits: dict[str, int]
    """Field -> index of the constructor parameter it is initialised from."""
    call: FunctionNode | None
    """`operator()`, analysed with the fields as its parameters."""


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
    classes: list[ClassNode] = field(default_factory=list)
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
    source = _TYPENAME_CALL.sub(_blank, source)
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
    if name is not None and name.type == "attributed_declarator" and name.named_children:
        name = name.named_children[0]  # `operator() [[sycl::reqd_sub_group_size(32)]]`
    if name is not None and name.type == "operator_name":
        return text_of(name).replace(" ", "")
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


def params_of(declarator: Node) -> list[tuple[str, str]]:
    """(name, declaration text) per parameter of a function or lambda declarator."""
    return _params(declarator)


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
    if not name.startswith(("TORCH_LIBRARY", "STABLE_TORCH_LIBRARY")):
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
    text = re.sub(r"\b(?:TORCH_FN|TORCH_BOX)\b", "", text_of(node)).replace("&", "").strip("() \n")
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


def _function_node(node: Node, path: str, lines: Expanded | None) -> FunctionNode | None:
    if _library_block(node) is not None:
        return None
    body = node.child_by_field_name("body")
    declarator = node.child_by_field_name("declarator")
    while declarator is not None and declarator.type != "function_declarator":
        declarator = declarator.child_by_field_name("declarator")
    name = _function_name(declarator)
    if body is None or declarator is None or not name:
        return None
    return FunctionNode(name, _params(declarator), body, path, lines)


def _class_node(node: Node, path: str, lines: Expanded | None) -> ClassNode | None:
    """A class/struct that has an `operator()` (a functor kernel), else None."""
    name_node, body = node.child_by_field_name("name"), node.child_by_field_name("body")
    if name_node is None or body is None:
        return None
    name = _callee_name(name_node)
    fields: list[tuple[str, str]] = []
    ctor: tuple[list[tuple[str, str]], dict[str, int]] | None = None
    call: FunctionNode | None = None
    for member in body.named_children:
        if member.type == "field_declaration":
            declarator = member.child_by_field_name("declarator")
            if declarator is not None and declarator.type != "function_declarator":
                fields.append((_field_name(declarator) or "", text_of(member)))
        elif member.type == "function_definition":
            fn = _function_node(member, path, lines)
            if fn is not None and fn.name == name:
                ctor = (fn.params, _ctor_inits(member, fn.params))
            elif fn is not None and fn.name.replace(" ", "") == "operator()":
                call = fn
    if call is None:
        return None
    params, inits = ctor if ctor is not None else (None, {})
    return ClassNode(
        name, fields, params, inits, FunctionNode(name, fields, call.body, path, lines)
    )


def _field_name(node: Node | None) -> str | None:
    while node is not None and node.type not in {"field_identifier", "identifier"}:
        inner = node.child_by_field_name("declarator")
        node = (
            inner
            if inner is not None
            else next(
                (c for c in node.named_children if c.type in {"field_identifier", "identifier"}),
                None,
            )
        )
    return text_of(node) if node is not None else None


def _ctor_inits(definition: Node, params: list[tuple[str, str]]) -> dict[str, int]:
    """Field -> constructor parameter index, from `: out(out_), input(input_)`."""
    names = [p[0] for p in params]
    inits: dict[str, int] = {}
    for child in definition.named_children:
        if child.type != "field_initializer_list":
            continue
        for init in child.named_children:
            field_node = next(
                (c for c in init.named_children if c.type == "field_identifier"), None
            )
            args = next(
                (c for c in init.named_children if c.type in {"argument_list", "initializer_list"}),
                None,
            )
            if field_node is None or args is None or not args.named_children:
                continue
            value = text_of(args.named_children[0]).strip()
            if value in names:
                inits[text_of(field_node)] = names.index(value)
    return inits


def _walk_tree(source: bytes, path: str, out: CppFile, lines: Expanded | None, defs: bool) -> None:
    tree = _parser().parse(preprocess(source))
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        kind = node.type
        if kind == "call_expression" and defs:
            _handle_call(node, path, out)
        elif kind == "function_definition" and (fn := _function_node(node, path, lines)):
            out.functions.append(fn)
        elif kind in {"class_specifier", "struct_specifier"} and (
            cls := _class_node(node, path, lines)
        ):
            out.classes.append(cls)
        elif kind == "preproc_def" and defs:
            name, value = node.child_by_field_name("name"), node.child_by_field_name("value")
            if name is not None and value is not None:
                out.macros[text_of(name)] = text_of(value).strip()
        stack.extend(reversed(node.children))


def extract_cpp(source: bytes, path: str, expanded: Expanded | None = None) -> CppFile:
    """Op definitions, impl bindings, function bodies, functors and `#define`s of one source.

    Definitions, bindings and guards come from the source as written (so `--fix` edits its
    literals); with `expanded` (the project's macros expanded), bodies come from that copy.
    """
    out = CppFile()
    if expanded is None:
        _walk_tree(source, path, out, None, defs=True)
        return out
    _walk_tree(source, path, out, None, defs=True)
    out.functions.clear()
    out.classes.clear()
    _walk_tree(expanded.text, path, out, expanded, defs=False)
    return out
