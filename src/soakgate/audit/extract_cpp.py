"""Find op definitions, implementation bindings and function bodies in C++/CUDA/SYCL sources.

Syntax helpers live in `cpp_syntax`, classes (functors, constructed structs) in `cpp_classes`;
both are re-exported here for the modules that read extraction results.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from soakgate.audit.cpp_classes import ClassNode, class_node
from soakgate.audit.cpp_macros import Expanded
from soakgate.audit.cpp_syntax import (
    CPP_SUFFIXES,
    FunctionNode,
    function_node,
    library_block,
    params_of,
    parser,
    preprocess,
    text_of,
)
from soakgate.audit.model import LiteralPiece, Location
from soakgate.audit.schema import Schema, try_parse_schema

if TYPE_CHECKING:
    from tree_sitter import Node

__all__ = [
    "CPP_SUFFIXES",
    "ClassNode",
    "CppFile",
    "FunctionNode",
    "InferredDef",
    "RawDef",
    "RawImpl",
    "extract_cpp",
    "params_of",
    "preprocess",
    "text_of",
]


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
class InferredDef:
    """`m.def("name", fn)`: a schema torch infers from `fn`'s signature (see `cpp_infer`)."""

    name: str
    library: str
    location: Location
    guard: str | None
    piece: LiteralPiece
    """The literal holding the name, which `--fix` replaces by the whole schema."""
    function: str


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
    inferred: list[InferredDef] = field(default_factory=list)
    pybind: dict[str, str] = field(default_factory=dict)
    """pybind11 binding name -> C++ function (`m.def("fwd", &mha_fwd)`)."""
    impls: list[RawImpl] = field(default_factory=list)
    functions: list[FunctionNode] = field(default_factory=list)
    classes: list[ClassNode] = field(default_factory=list)
    macros: dict[str, str] = field(default_factory=dict)


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


def _enclosing_library(node: Node) -> tuple[str, list[str]] | None:
    parent = node.parent
    while parent is not None:
        if parent.type == "function_definition":
            return library_block(parent)
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
        params = params_of(declarator) if declarator is not None else []
        return None, FunctionNode("<lambda>", params, body, path) if body is not None else None
    text = re.sub(r"\b(?:TORCH_FN|TORCH_BOX)\b", "", text_of(node)).replace("&", "").strip("() \n")
    text = re.sub(r"^torch::CppFunction::makeFromUnboxedFunction", "", text).strip("() ")
    return (_callee_name_text(text) or None), None


def _callee_name_text(text: str) -> str:
    return text.split("<", 1)[0].rsplit("::", 1)[-1].strip()


def _method_call(node: Node) -> tuple[Node, str, list[Node]] | None:
    """(`obj.method`, the method's name, the arguments but comments) of a call on an object;
    None for any other call."""
    function = node.child_by_field_name("function")
    if function is None or function.type != "field_expression":
        return None
    method = text_of(function.child_by_field_name("field") or function)
    arguments = node.child_by_field_name("arguments")
    named = arguments.named_children if arguments is not None else []
    return function, method, [a for a in named if a.type != "comment"]


def _handle_call(node: Node, path: str, out: CppFile) -> None:
    parts = _method_call(node)
    if parts is None:
        return
    function, method, args = parts
    if method == "op":
        _registered_op(node, function, path, out)
        return
    if method not in {"def", "impl"} or not args:
        return
    library = _enclosing_library(node)
    if library is None:
        _pybind_def(node, method, args, path, out)
        return
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
            _inferred_def(value, pieces, args, namespace, location, node, out)
            return
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


def _registers_operators(receiver: Node | None) -> bool:
    """Is `receiver` of `.op(...)` a `torch::RegisterOperators()` chain?"""
    while receiver is not None and receiver.type == "call_expression":
        function = receiver.child_by_field_name("function")
        if function is None:
            return False
        if function.type != "field_expression":
            return _callee_name_text(text_of(function)) == "RegisterOperators"
        receiver = function.child_by_field_name("argument")
    return False


def _registered_op(node: Node, function: Node, path: str, out: CppFile) -> None:
    """`torch::RegisterOperators().op("ns::name", &fn)` (the legacy registration API, as in
    PyG's torch_scatter): the schema string when there is one, else the one torch infers
    from `fn`; the namespace is the string's. `.op(options().schema(...).kernel<...>())`
    forms are not read."""
    if not _registers_operators(function.child_by_field_name("argument")):
        return
    arguments = node.child_by_field_name("arguments")
    args = [a for a in (arguments.named_children if arguments else []) if a.type != "comment"]
    strings = _string_pieces(args[0], path) if len(args) == 2 else None
    if strings is None:
        return
    value, pieces = strings
    namespace, _, rest = value.partition("::")
    if not rest or not namespace.isidentifier():
        return
    location = Location(path, node.start_point[0] + 1)
    fn_name, _ = _impl_target(args[1], path)
    schema = try_parse_schema(rest)
    if schema is None:
        if len(pieces) == 1:  # `--fix` writes the schema after the namespace it keeps
            named = LiteralPiece(pieces[0].path, pieces[0].offset + len(namespace) + 2, rest)
            _inferred_def(rest, (named,), args, namespace, location, node, out)
        return
    shifted = tuple(
        LiteralPiece(p.path, p.offset + len(namespace) + 2, p.text[len(namespace) + 2 :])
        if i == 0
        else p
        for i, p in enumerate(pieces)
    )
    if not shifted[0].text and len(shifted) == 1:
        return
    out.defs.append(RawDef(schema, namespace, location, _guard(node), shifted, fn_name))
    if fn_name:
        out.impls.append(RawImpl(_op_key(schema), namespace, None, fn_name, None, location))


def _expanded_binding(node: Node, path: str, out: CppFile) -> None:
    """`m.def(...)` that only the project's macros expanded show (AITER's `PYBIND11_MODULE(...)
    { ACTIVATION_PYBIND; }`, its `m.def`s in a header's `#define`): pybind11 bindings are read
    from the expanded copy too (nothing `--fix` edits; TORCH_LIBRARY blocks are kept
    unexpanded and read from the source as written)."""
    parts = _method_call(node)
    if parts is not None and parts[1] == "def" and parts[2] and _enclosing_library(node) is None:
        _pybind_def(node, "def", parts[2], path, out)


def _pybind_def(node: Node, method: str, args: list[Node], path: str, out: CppFile) -> None:
    """`m.def("fwd", &mha_fwd, "doc")` in `PYBIND11_MODULE(...)`: Python's `_ext.fwd` is C++'s
    `mha_fwd` (custom ops that call it are followed into it)."""
    parent = node.parent
    while parent is not None and parent.type != "function_definition":
        parent = parent.parent
    declarator = parent.child_by_field_name("declarator") if parent is not None else None
    name = text_of(declarator.child_by_field_name("declarator") or declarator) if declarator else ""
    strings = _string_pieces(args[0], path)
    if method != "def" or name != "PYBIND11_MODULE" or strings is None or len(args) < 2:
        return
    fn_name, _ = _impl_target(args[1], path)
    if fn_name:
        out.pybind[strings[0]] = fn_name


def _inferred_def(
    name: str,
    pieces: tuple[LiteralPiece, ...],
    args: list[Node],
    namespace: str,
    location: Location,
    node: Node,
    out: CppFile,
) -> None:
    """`m.def("name", fn)` in a TORCH_LIBRARY block: the schema comes from `fn` (not a doc)."""
    if len(args) != 2 or len(pieces) != 1 or not re.fullmatch(r"\w+(?:\.\w+)?", name):
        return
    fn_name, _ = _impl_target(args[1], location.path)
    if fn_name:
        out.inferred.append(
            InferredDef(name, namespace, location, _guard(node), pieces[0], fn_name)
        )
        out.impls.append(RawImpl(name, namespace, None, fn_name, None, location))


def _op_key(schema: Schema) -> str:
    return f"{schema.name}.{schema.overload}" if schema.overload else schema.name


def _walk_tree(source: bytes, path: str, out: CppFile, lines: Expanded | None, defs: bool) -> None:
    tree = parser().parse(preprocess(source))
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        kind = node.type
        if kind == "call_expression" and defs:
            _handle_call(node, path, out)
        elif kind == "call_expression" and lines is not None:
            _expanded_binding(node, path, out)
        elif kind == "function_definition" and (fn := function_node(node, path, lines)):
            out.functions.append(fn)
        elif kind in {"class_specifier", "struct_specifier"} and (
            cls := class_node(node, path, lines)
        ):
            out.classes.append(cls)
        elif kind == "preproc_def" and defs:
            name, value = node.child_by_field_name("name"), node.child_by_field_name("value")
            if name is not None and value is not None:
                out.macros[text_of(name)] = text_of(value).strip()
        stack.extend(reversed(node.children))


_LITERALS = re.compile(rb'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|/\*.*?\*/')
_TOP_LEVEL = re.compile(rb"[A-Za-z_}]")
_DIRECTIVE = re.compile(rb"^[ \t]*#[ \t]*(if|ifdef|ifndef|elif|else|endif)\b")


def first_alternatives(source: bytes) -> bytes:
    """`#if`/`#else` alternatives inside parentheses (a parameter or argument list written
    twice, once per platform) reduced to the first one, the others blanked: tree-sitter cannot
    parse a list that holds both. Every byte keeps its offset (blanked text becomes spaces),
    so locations and `--fix`'s edits are unchanged. Directives outside parentheses are left to
    the grammar, which parses them."""
    if b"#" not in source or b"(" not in source:
        return source
    lines = source.split(b"\n")
    depth = 0
    stack: list[bool] = []  # per open #if inside parentheses: are we past its first branch?
    changed = False
    for number, line in enumerate(lines):
        directive = _DIRECTIVE.match(line)
        if directive is not None and (depth > 0 or stack):
            word = directive.group(1)
            if word.startswith(b"if"):
                stack.append(False)
            elif word in (b"elif", b"else") and stack:
                stack[-1] = True
            elif word == b"endif" and stack:
                stack.pop()
            lines[number] = b" " * len(line)
            changed = True
            continue
        if any(stack):
            lines[number] = b" " * len(line)
            changed = True
            continue
        if _TOP_LEVEL.match(line):
            depth = 0  # a new declaration at column 0: an unbalanced line above is forgotten
        code = _LITERALS.sub(b"", line).split(b"//", 1)[0]
        depth = max(0, depth + code.count(b"(") - code.count(b")"))
    return b"\n".join(lines) if changed else source


def extract_cpp(source: bytes, path: str, expanded: Expanded | None = None) -> CppFile:
    """Op definitions, impl bindings, function bodies, functors and `#define`s of one source.

    Definitions, bindings and guards come from the source as written (so `--fix` edits its
    literals); with `expanded` (the project's macros expanded), bodies come from that copy.
    """
    out = CppFile()
    source = first_alternatives(source)
    if expanded is None:
        _walk_tree(source, path, out, None, defs=True)
        return out
    _walk_tree(source, path, out, None, defs=True)
    out.functions.clear()
    out.classes.clear()
    _walk_tree(expanded.text, path, out, expanded, defs=False)
    return out
