"""Infer which parameters a C++ op implementation writes, from its tree-sitter syntax tree.

Signals, strongest first: in-place ATen methods (`out.copy_`, `x.add_`), `*_out` calls, a
data pointer stored to inside a kernel it is passed to, a tensor passed to a function that
writes it, and returning a parameter (aliasing). Parameter names are never used here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from soakgate.audit.extract_cpp import FunctionNode, text_of
from soakgate.audit.model import Confidence, Location, WriteEvidence

if TYPE_CHECKING:
    from tree_sitter import Node

Lookup = Callable[[str], list[FunctionNode]]

POINTER_METHODS = frozenset(
    {
        "data_ptr",
        "mutable_data_ptr",
        "data",
        "accessor",
        "packed_accessor32",
        "packed_accessor64",
        "generic_packed_accessor",
        "mutable_data",
    }
)
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
        "index_select_view",
        "chunk",
        "split",
    }
)
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
# Functions that store through their first pointer argument.
POINTER_WRITERS = frozenset(
    {
        "atomicAdd",
        "atomicSub",
        "atomicMax",
        "atomicMin",
        "atomicExch",
        "atomicCAS",
        "atomicAnd",
        "atomicOr",
        "memcpy",
        "memset",
        "memmove",
        "cudaMemcpy",
        "cudaMemcpyAsync",
        "cudaMemset",
        "cudaMemsetAsync",
        "hipMemcpyAsync",
        "hipMemsetAsync",
        "__stcs",
        "__stcg",
        "__stwt",
        "__stcv",
        "copy",
    }
)
_MAX_DEPTH = 4
_CASTS = frozenset({"static_cast", "reinterpret_cast", "const_cast", "dynamic_cast", "bit_cast"})


@dataclass(frozen=True, slots=True)
class Alias:
    """A local name that refers to a parameter's storage."""

    param: int
    kind: str  # "tensor" or "pointer"
    const: bool
    mutable_ptr: bool = False


@dataclass(slots=True)
class FunctionWrites:
    """Result of write inference for one function."""

    writes: dict[int, list[WriteEvidence]] = field(default_factory=dict)
    """Parameter index -> evidence that it is written."""
    returned: dict[int, tuple[int, WriteEvidence]] = field(default_factory=dict)
    """Return position -> (index of the parameter returned there, the return statement)."""

    def add(self, param: int, evidence: WriteEvidence) -> None:
        """Record evidence for a parameter."""
        self.writes.setdefault(param, []).append(evidence)


def _short(text: str, limit: int = 100) -> str:
    one_line = re.sub(r"\s+", " ", text).strip()
    return one_line if len(one_line) <= limit else one_line[: limit - 3] + "..."


def _walk(node: Node) -> Iterator[Node]:
    """Descendants in document order, skipping nested lambdas' captures of nothing."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


def _is_const_pointer(type_text: str) -> bool:
    """`const T* p` / `T const* p` -> True; `T* const p` / `T* p` -> False."""
    head = type_text.rsplit("*", 1)[0] if "*" in type_text else type_text.split("&")[0]
    return re.search(r"\bconst\b", head) is not None and (
        "*" in type_text or "Accessor" not in type_text
    )


def initial_aliases(params: list[tuple[str, str]]) -> dict[str, Alias]:
    """Aliases for the parameters themselves: tensors and non-const pointers/accessors."""
    aliases: dict[str, Alias] = {}
    for index, (name, type_text) in enumerate(params):
        if not name:
            continue
        if re.search(r"\bTensor\b", type_text) and "*" not in type_text:
            aliases[name] = Alias(index, "tensor", False)
        elif "*" in type_text or "Accessor" in type_text or "&" in type_text:
            aliases[name] = Alias(index, "pointer", _is_const_pointer(type_text))
    return aliases


class _Analyzer:
    """Walks one function body, tracking local aliases of its parameters."""

    def __init__(self, fn: FunctionNode, lookup: Lookup, depth: int) -> None:
        self.fn = fn
        self.lookup = lookup
        self.depth = depth
        self.aliases = initial_aliases(fn.params)
        self.result = FunctionWrites()

    def evidence(self, alias: Alias, kind: str, node: Node, conf: Confidence) -> None:
        location = Location(self.fn.path, node.start_point[0] + 1)
        name = self.fn.params[alias.param][0]
        self.result.add(
            alias.param, WriteEvidence(name, kind, _short(text_of(node)), location, conf)
        )

    def alias_of(self, node: Node | None) -> Alias | None:
        """The alias an argument expression refers to (`out`, `out.data_ptr<T>()`, `p + i`)."""
        while node is not None:
            kind = node.type
            if kind == "identifier":
                return self.aliases.get(text_of(node))
            if kind == "call_expression":
                return self._method_alias(node)
            if kind in {"cast_expression", "parenthesized_expression", "pointer_expression"}:
                node = (
                    node.child_by_field_name("value")
                    or node.child_by_field_name("argument")
                    or (node.named_children[-1] if node.named_children else None)
                )
                continue
            if kind == "binary_expression":
                node = node.child_by_field_name("left")
                continue
            if kind == "subscript_expression":
                # p[i] of a pointer is storage; t[i] of a tensor (or list) is a view of it
                return self.alias_of(node.child_by_field_name("argument"))
            if kind in {"static_cast_expression", "reinterpret_cast_expression"}:
                node = node.named_children[-1] if node.named_children else None
                continue
            return self._template_cast_alias(node)
        return None

    def _template_cast_alias(self, node: Node) -> Alias | None:
        if node.type == "call_expression":
            return self._method_alias(node)
        return None

    def _method_alias(self, call: Node) -> Alias | None:
        function = call.child_by_field_name("function")
        if function is None:
            return None
        if function.type != "field_expression":
            # reinterpret_cast<T*>(x) and friends parse as calls of a template function
            name = text_of(function)
            args = call.child_by_field_name("arguments")
            if (
                re.match(r"(static|reinterpret|const)_cast\b", name)
                and args
                and args.named_children
            ):
                inner = self.alias_of(args.named_children[0])
                if inner is not None and inner.kind == "pointer":
                    return Alias(
                        inner.param, "pointer", inner.const or "const" in name, inner.mutable_ptr
                    )
            return None
        target = self.alias_of(function.child_by_field_name("argument"))
        method = text_of(function.child_by_field_name("field") or function).split("<", 1)[0]
        if target is None or target.kind != "tensor":
            return None
        if method in POINTER_METHODS:
            const = "const" in text_of(function)
            return Alias(target.param, "pointer", const, method.startswith("mutable"))
        if method in VIEW_METHODS:
            return target
        return None

    def run(self) -> FunctionWrites:
        """Visit the body once, in document order, so aliases are known before their uses."""
        for node in _walk(self.fn.body):
            kind = node.type
            if kind == "init_declarator":
                self._declare(node)
            elif kind in {"assignment_expression", "update_expression"}:
                self._store(node)
            elif kind == "call_expression":
                self._call(node)
            elif kind == "return_statement":
                self._return(node)
        return self.result

    def _declare(self, node: Node) -> None:
        value = node.child_by_field_name("value")
        name = _declared_name(node.child_by_field_name("declarator"))
        if value is None or name is None:
            return
        if value.type == "initializer_list" and value.named_children:
            value = value.named_children[0]
        alias = self.alias_of(value)
        if alias is None:
            self.aliases.pop(name, None)
            return
        declaration = node.parent if node.parent is not None else node
        head = (declaration.text or b"")[: value.start_byte - declaration.start_byte].decode()
        const = alias.const or (alias.kind == "pointer" and _is_const_pointer(head))
        self.aliases[name] = Alias(alias.param, alias.kind, const, alias.mutable_ptr)

    def _store(self, node: Node) -> None:
        target = node.child_by_field_name("left") or node.child_by_field_name("argument")
        if target is None or target.type == "identifier":
            return  # rebinding a local pointer or tensor handle writes no memory
        for inner in _walk(target):
            if inner.type == "identifier" and inner.text is not None:
                alias = self.aliases.get(text_of(inner))
                if alias is not None and not alias.const:
                    self.evidence(alias, "store", node, Confidence.HIGH)
                    return

    def _call(self, node: Node) -> None:
        function = node.child_by_field_name("function")
        arguments = node.child_by_field_name("arguments")
        if function is None or arguments is None:
            return
        args = [a for a in arguments.named_children if a.type != "comment"]
        if function.type == "field_expression":
            receiver = self.alias_of(function.child_by_field_name("argument"))
            method = text_of(function.child_by_field_name("field") or function).split("<", 1)[0]
            if receiver is not None and receiver.kind == "tensor":
                if method.endswith("_") and method not in NON_WRITING_INPLACE:
                    self.evidence(receiver, "inplace-method", node, Confidence.HIGH)
                return
        name = text_of(function).split("<", 1)[0].rsplit("::", 1)[-1].strip()
        if name in _CASTS:
            return  # a cast is not a use; the expression around it is judged instead
        aliases = [self.alias_of(arg) for arg in args]
        first = aliases[0] if aliases else None
        if (
            first is not None
            and first.kind == "tensor"
            and (
                name.endswith("_out")
                or (
                    name.endswith("_")
                    and "::" in text_of(function)
                    and name not in NON_WRITING_INPLACE
                )
            )
        ):
            self.evidence(first, "out-call", node, Confidence.HIGH)
            return
        if first is not None and first.kind == "pointer" and name in POINTER_WRITERS:
            if not first.const:
                self.evidence(first, "pointer-write", node, Confidence.HIGH)
            return
        if any(a is not None for a in aliases):
            self._pass_to(name, node, aliases)

    def _pass_to(self, name: str, node: Node, aliases: list[Alias | None]) -> None:
        """Arguments handed to another function: look into it, or judge from constness."""
        callees = [c for c in self.lookup(name) if len(c.params) >= len(aliases)]
        callee = next((c for c in callees if len(c.params) == len(aliases)), None) or (
            callees[0] if callees else None
        )
        if callee is not None and self.depth < _MAX_DEPTH and callee.body is not self.fn.body:
            inner = _Analyzer(callee, self.lookup, self.depth + 1).run()
            for position, alias in enumerate(aliases):
                if alias is None or alias.const or position not in inner.writes:
                    continue
                proof = inner.writes[position][0]
                kind = "kernel-store" if alias.kind == "pointer" else "mutating-call"
                expression = f"{_short(text_of(node), 60)} -> {proof.expression}"
                location = Location(self.fn.path, node.start_point[0] + 1)
                pname = self.fn.params[alias.param][0]
                self.result.add(
                    alias.param, WriteEvidence(pname, kind, expression, location, proof.confidence)
                )
            return
        for alias in aliases:
            if alias is not None and alias.kind == "pointer" and not alias.const:
                confidence = Confidence.MEDIUM if alias.mutable_ptr else Confidence.LOW
                self.evidence(alias, "pointer-to-unresolved-call", node, confidence)

    def _return(self, node: Node) -> None:
        value = next((c for c in node.named_children if c.type != "comment"), None)
        if value is None:
            return
        items = [value]
        if value.type in {"initializer_list", "call_expression"} and (
            value.type == "initializer_list"
            or "make_tuple" in text_of(value)
            or "tuple" in text_of(value)
        ):
            holder = (
                value
                if value.type == "initializer_list"
                else value.child_by_field_name("arguments")
            )
            items = list(holder.named_children) if holder is not None else []
        for position, item in enumerate(items):
            alias = self.alias_of(item)
            if alias is not None and alias.kind == "tensor":
                location = Location(self.fn.path, node.start_point[0] + 1)
                name = self.fn.params[alias.param][0]
                proof = WriteEvidence(
                    name, "returns-param", _short(text_of(node)), location, Confidence.HIGH
                )
                self.result.returned[position] = (alias.param, proof)


def _declared_name(node: Node | None) -> str | None:
    while node is not None and node.type not in {"identifier", "field_identifier"}:
        inner = node.child_by_field_name("declarator")
        node = (
            inner
            if inner is not None
            else (node.named_children[-1] if node.named_children else None)
        )
    return text_of(node) if node is not None else None


def infer_writes(fn: FunctionNode, lookup: Lookup) -> FunctionWrites:
    """Parameters `fn` writes (with evidence) and parameters it returns."""
    return _Analyzer(fn, lookup, 0).run()
