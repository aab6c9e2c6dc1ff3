"""Classes and structs with code: SYCL functor kernels and structs built by a constructor.

A functor's `operator()` is analysed with its fields as parameters; a struct's constructor
says which of its arguments each field holds (init list or `this->f = arg;` in the body), and
its methods say which field a returned pointer comes from (`T* get_k_ptr() { return k_data +
...; }`), so pointers carried in such structs reach the kernels they are passed to.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from soakgate.audit.cpp_launch import strip_casts
from soakgate.audit.cpp_macros import Expanded
from soakgate.audit.cpp_syntax import (
    FunctionNode,
    callee_name,
    function_declarator,
    function_name,
    function_node,
    params_of,
    text_of,
    walk,
)

if TYPE_CHECKING:
    from tree_sitter import Node


Ctor = tuple[list[tuple[str, str]], dict[str, int]]


@dataclass(slots=True)
class ClassNode:
    """A class or struct with code: a functor kernel, or a struct built by a constructor."""

    name: str
    fields: list[tuple[str, str]]
    """(name, declaration text) per data member, in order."""
    ctor_params: list[tuple[str, str]] | None
    """Constructor parameters, None for an aggregate (brace-initialised in field order)."""
    ctor_inits: dict[str, int]
    """Field -> index of the constructor parameter it is initialised from."""
    call: FunctionNode | None
    """`operator()`, analysed with the fields as its parameters."""
    ctors: list[Ctor] = field(default_factory=list)
    """Every constructor: (parameters, field -> parameter index)."""
    methods: dict[str, FunctionNode] = field(default_factory=dict)
    """Member functions defined in the class body, by name."""
    bases: tuple[str, ...] = ()
    """The classes it derives from, by name (`class K : public Base<T>` -> `Base`)."""

    def ctor_for(self, arity: int) -> Ctor | None:
        """The constructor a call with `arity` arguments most likely picks."""
        fitting = [c for c in self.ctors if len(c[0]) >= arity]
        exact = [c for c in fitting if len(c[0]) == arity]
        chosen = exact or fitting
        return chosen[0] if chosen else None


def class_node(node: Node, path: str, lines: Expanded | None) -> ClassNode | None:
    """A class/struct with an `operator()`, a constructor or methods; None for plain data."""
    name_node, body = node.child_by_field_name("name"), node.child_by_field_name("body")
    if name_node is None or body is None:
        return None
    name = callee_name(name_node)
    fields: list[tuple[str, str]] = []
    ctors: list[Ctor] = []
    methods: dict[str, FunctionNode] = {}
    call: FunctionNode | None = None
    declares_methods = False
    for member in body.named_children:
        if member.type == "field_declaration":
            declarator = member.child_by_field_name("declarator")
            if declarator is not None and declarator.type != "function_declarator":
                fields.append((_field_name(declarator) or "", text_of(member)))
            declares_methods |= declarator is not None and declarator.type == "function_declarator"
        elif member.type == "function_definition":
            fn = function_node(member, path, lines)
            if fn is not None and fn.name == name:
                ctors.append((fn.params, _ctor_inits(member, fn.params)))
            elif fn is not None and fn.name.replace(" ", "") == "operator()":
                call = fn
            elif fn is not None:
                methods[fn.name] = fn
    plain = call is None and not ctors and not methods and not declares_methods
    if plain and not _bases(node) and not fields:
        return None  # nothing to follow (the fields of a class with methods defined out of
        # line are what those methods see as `this->field`; a plain struct's fields, in order,
        # are what an aggregate or structured binding of it names)
    params, inits = ctors[-1] if ctors else (None, {})
    for ctor_params, ctor_inits in ctors:
        _body_inits(ctor_params, ctor_inits, {f for f, _ in fields}, body, name)
    functor = FunctionNode(name, fields, call.body, path, lines) if call is not None else None
    return ClassNode(name, fields, params, inits, functor, ctors, methods, _bases(node))


def _bases(node: Node) -> tuple[str, ...]:
    """The names of the classes a class specifier derives from."""
    clause = next((c for c in node.named_children if c.type == "base_class_clause"), None)
    if clause is None:
        return ()
    kinds = {"type_identifier", "template_type", "qualified_identifier"}
    return tuple(
        text_of(c).split("<", 1)[0].rsplit("::", 1)[-1].strip()
        for c in clause.named_children
        if c.type in kinds
    )


def returned_field(method: FunctionNode, fields: set[str]) -> str | None:
    """The field a method's returned pointer comes from: `return k_data + offset;` -> k_data."""
    for node in walk(method.body):
        if node.type != "return_statement":
            continue
        value = next((c for c in node.named_children if c.type != "comment"), None)
        while value is not None:
            if value.type in {"parenthesized_expression", "cast_expression"}:
                value = value.child_by_field_name("value") or (
                    value.named_children[-1] if value.named_children else None
                )
            elif value.type == "binary_expression":
                value = value.child_by_field_name("left")
            elif value.type in {"pointer_expression", "subscript_expression"}:
                value = value.child_by_field_name("argument")
            elif value.type == "field_expression" and text_of(
                value.child_by_field_name("argument") or value
            ) in {"this", "(*this)"}:
                name = text_of(value.child_by_field_name("field") or value)
                return name if name in fields else None
            elif value.type == "identifier":
                return text_of(value) if text_of(value) in fields else None
            else:
                value = None
    return None


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


def _body_inits(
    params: list[tuple[str, str]], inits: dict[str, int], fields: set[str], body: Node, name: str
) -> None:
    """Add `this->f = arg;` / `f = arg;` assignments in the constructor bodies to `inits`."""
    names = [p[0] for p in params]
    for member in body.named_children:
        if member.type != "function_definition":
            continue
        fn_body = member.child_by_field_name("body")
        declarator = function_declarator(member.child_by_field_name("declarator"))
        if fn_body is None or declarator is None or params_of(declarator) != params:
            continue
        if function_name(declarator) != name:
            continue
        for node in walk(fn_body):
            if node.type == "call_expression":
                _global_buffer_init(node, names, inits, fields)
            if node.type != "assignment_expression":
                continue
            left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
            if left is None or right is None or text_of(right).strip() not in names:
                continue
            target = text_of(left).replace("this->", "").strip()
            if target in fields and target not in inits:
                inits[target] = names.index(text_of(right).strip())


def _global_buffer_init(
    call: Node, names: list[str], inits: dict[str, int], fields: set[str]
) -> None:
    """AscendC: `xGm_.SetGlobalBuffer((__gm__ T*)x, n);` in a constructor binds member `xGm_`
    to parameter `x`, as `xGm_ = x` would."""
    function, arguments = (
        call.child_by_field_name("function"),
        call.child_by_field_name("arguments"),
    )
    if function is None or arguments is None or function.type != "field_expression":
        return
    if text_of(function.child_by_field_name("field") or function) != "SetGlobalBuffer":
        return
    holder = text_of(function.child_by_field_name("argument") or function).replace("this->", "")
    args = [a for a in arguments.named_children if a.type != "comment"]
    value = strip_casts(args[0]) if args else None
    name = text_of(value).strip() if value is not None else ""
    if holder in fields and holder not in inits and name in names:
        inits[holder] = names.index(name)


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
