"""Infer which parameters a C++ op implementation writes, from its tree-sitter syntax tree.

Signals, strongest first: in-place ATen methods (`out.copy_`, `x.add_`), `*_out` calls, stores
through a pointer derived from a tensor (directly, in a kernel or helper it is passed to, in a
SYCL functor built from it, through a struct field or an address table), vector-store
intrinsics, a tensor passed to a function that writes it, and returning a parameter (aliasing).
Parameter names are never used here. What an expression refers to is decided in `cpp_alias`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from soakgate.audit.cpp_alias import (
    WRAPPERS,
    Alias,
    AliasResolver,
    is_accessor_type,
    is_pointer_like,
    pointee_const,
)
from soakgate.audit.cpp_classes import returned_field
from soakgate.audit.cpp_launch import LAUNCHERS, address_table, launch_arguments
from soakgate.audit.cpp_names import (
    CASTS,
    METHOD_WRITERS,
    NON_WRITING_INPLACE,
    POINTER_WRITERS,
    READERS,
    assignment_target,
    callee,
    declared_name,
    exclusive,
    receiver,
    short,
    walk,
)
from soakgate.audit.extract_cpp import ClassNode, FunctionNode, params_of, text_of
from soakgate.audit.model import Confidence, Location, WriteEvidence

if TYPE_CHECKING:
    from tree_sitter import Node

Lookup = Callable[[str], list[FunctionNode]]
ClassLookup = Callable[[str], list[ClassNode]]

_MAX_DEPTH = 6


@dataclass(slots=True)
class FunctionWrites:
    """Result of write inference for one function."""

    writes: dict[int, list[WriteEvidence]] = field(default_factory=dict)
    """Parameter index -> evidence that it is written."""
    returned: dict[int, tuple[int, WriteEvidence]] = field(default_factory=dict)
    """Return position -> (index of the parameter returned there, the return statement)."""
    fresh_returns: set[int] = field(default_factory=set)
    """Return positions where some path returns a value that is not a parameter."""
    indirect: dict[int, list[WriteEvidence]] = field(default_factory=dict)
    """Parameter index -> stores through addresses loaded from it (it is an address table)."""
    field_writes: dict[tuple[int, str], list[WriteEvidence]] = field(default_factory=dict)
    """(struct parameter, field) -> stores through the pointer held in that field."""
    field_binds: dict[tuple[int, str], tuple[int, ...]] = field(default_factory=dict)
    """(struct parameter, field) -> parameters whose pointer the function stores there."""

    def add(self, param: int, evidence: WriteEvidence) -> None:
        """Record evidence for a parameter."""
        self.writes.setdefault(param, []).append(evidence)


def _is_const_pointer(type_text: str) -> bool:
    """`const T* p` / `T const* p` -> True; `T* const p` / `T* p` -> False."""
    head = type_text.rsplit("*", 1)[0] if "*" in type_text else type_text.split("&")[0]
    return re.search(r"\bconst\b", head) is not None and (
        "*" in type_text or "ccessor" not in type_text
    )


def _type_name(declaration: str, name: str) -> str:
    """`const paged_kv_t<T, I>& kv` -> `paged_kv_t`."""
    head = declaration.rsplit(name, 1)[0] if name else declaration
    head = re.sub(r"\b(?:const|volatile|struct|class)\b|[&*]", " ", head).strip()
    return head.split("<", 1)[0].rsplit("::", 1)[-1].strip()


def initial_aliases(params: list[tuple[str, str]]) -> dict[str, Alias]:
    """Aliases for the parameters themselves: tensors, pointers/accessors and structs."""
    aliases: dict[str, Alias] = {}
    for index, (name, type_text) in enumerate(params):
        if not name:
            continue
        if re.search(r"\bTensor\b", type_text) and "*" not in type_text:
            aliases[name] = Alias((index,), "tensor")
        elif "*" in type_text or "ccessor" in type_text:
            aliases[name] = Alias((index,), "pointer", _is_const_pointer(type_text))
        elif not re.match(
            r"\s*(?:const\s+)?(?:unsigned\s+)?(?:bool|int|float|double|char|"
            r"long|short|u?int\d*_t|size_t|auto)\b",
            type_text,
        ):
            aliases[name] = Alias((index,), "struct")
    return aliases


@dataclass(slots=True)
class _Context:
    """What every analysis of one implementation shares: lookups and a cache of callees."""

    functions: Lookup
    classes: ClassLookup
    cache: dict[int, FunctionWrites] = field(default_factory=dict)
    active: set[int] = field(default_factory=set)


class _Analyzer(AliasResolver):
    """Walks one function body, tracking local aliases of its parameters."""

    def __init__(self, fn: FunctionNode, context: _Context, depth: int) -> None:
        self.fn = fn
        self.context = context
        self.depth = depth
        super().__init__(initial_aliases(fn.params))
        self.fn_aliases: dict[str, str] = {}
        self.local_fns: dict[str, FunctionNode] = {}
        self.arg_tables: dict[str, list[Node]] = {}
        self.bound_at: dict[tuple[str, str], Node] = {}
        """(local struct, field) -> where the field was bound to a parameter's pointer."""
        self.struct_types: dict[str, str] = {
            name: _type_name(declaration, name)
            for name, declaration in fn.params
            if name and self.aliases.get(name, Alias((), "")).kind == "struct"
        }
        """Struct-typed locals and parameters -> their class name (for their methods)."""
        """`void* args[] = {&a, &b}` for `cudaLaunchKernel(kernel, grid, block, args, ...)`."""
        self.result = FunctionWrites()

    def location(self, node: Node) -> Location:
        return Location(self.fn.path, self.fn.line(node))

    def evidence(
        self, alias: Alias, kind: str, node: Node, conf: Confidence, text: str = ""
    ) -> None:
        """Record a write through `alias`, routed by what it refers to."""
        expression = text or short(text_of(node))
        for param in alias.params:
            name = self.fn.params[param][0] if param < len(self.fn.params) else "?"
            proof = WriteEvidence(name, kind, expression, self.location(node), conf)
            if alias.field is not None:
                self.result.field_writes.setdefault((param, alias.field), []).append(proof)
            elif alias.kind == "indirect":
                self.result.indirect.setdefault(param, []).append(proof)
            elif alias.kind in {"tensor", "pointer"}:
                self.result.add(param, proof)

    # --- what expressions refer to -------------------------------------------------------

    def run(self) -> FunctionWrites:
        """Visit the body once, in document order, so aliases are known before their uses."""
        for node in walk(self.fn.body):
            kind = node.type
            if kind == "init_declarator":
                self._declare(node)
            elif kind == "assignment_expression":
                self._assign(node)
            elif kind == "update_expression":
                self._store(node, node.child_by_field_name("argument"))
            elif kind == "call_expression":
                self._call(node)
            elif kind == "compound_literal_expression":
                self._aggregate(node)
            elif kind == "gnu_asm_expression":
                self._inline_asm(node)
            elif kind == "return_statement":
                self._return(node)
        return self.result

    def _declare(self, node: Node) -> None:
        value = node.child_by_field_name("value")
        name = declared_name(node.child_by_field_name("declarator"))
        if value is None or name is None:
            return
        if value.type == "lambda_expression":
            self._note_lambda(name, value)
            return
        if value.type in {"argument_list", "initializer_list"} and self._construct(node, value):
            return
        table = address_table(value)
        if table is not None:
            self.arg_tables[name] = table
            self.aliases.pop(name, None)
            return
        self._note_function_pointer(name, value)
        if value.type == "initializer_list" and len(value.named_children) == 1:
            value = value.named_children[0]
        alias = self.alias_of(value)
        if alias is None:
            self.aliases.pop(name, None)
            return
        declaration = node.parent if node.parent is not None else node
        head = (declaration.text or b"")[: value.start_byte - declaration.start_byte].decode()
        if alias.kind == "address" and "*" in head.split("=")[0]:
            alias = replace(alias, kind="pointer")
        self.aliases[name] = replace(alias, const=pointee_const(head, alias))

    def _construct(self, node: Node, value: Node) -> bool:
        """`Functor<T> kfn(out_ptr, in_ptr);` builds a functor: follow it like `Functor(...)`."""
        declaration = node.parent
        kind = declaration.child_by_field_name("type") if declaration is not None else None
        if kind is None:
            return False
        name = callee(kind)
        classes = self.context.classes(name)
        args = [a for a in value.named_children if a.type != "comment"]
        if not any(c.call is not None for c in classes):
            return self._build_struct(node, classes, args)
        aliases = [self.alias_of(arg) for arg in args]
        if any(a is not None for a in aliases):
            self._pass_to(name, node, args, aliases)
        return True

    def _build_struct(self, node: Node, classes: list[ClassNode], args: list[Node]) -> bool:
        """`paged_kv_t<T> kv(n, k_ptr, v_ptr);`: the fields its constructor sets carry the
        pointers, like `params.k_ptr = ...` on a local struct."""
        built = next((c for c in classes if c.ctors), None)
        var = declared_name(node.child_by_field_name("declarator"))
        ctor = built.ctor_for(len(args)) if built is not None else None
        if built is None or ctor is None or var is None:
            return False
        self.struct_types[var] = built.name
        carried = {f: self.alias_of(args[i]) for f, i in ctor[1].items() if i < len(args)}
        self.structs[var] = {f: a for f, a in carried.items() if a is not None}
        return True

    def struct_method(self, holder: Node | None, method: str) -> Alias | None:
        """`kv.get_k_ptr(...)` on a struct whose method returns a field's pointer."""
        if holder is None or holder.type != "identifier":
            return None
        var = text_of(holder)
        found = next(
            (
                c
                for c in self.context.classes(self.struct_types.get(var, ""))
                if method in c.methods
            ),
            None,
        )
        if found is None:
            return None
        field_name = returned_field(found.methods[method], {f for f, _ in found.fields})
        owner = self.aliases.get(var)
        if field_name is None:
            return None
        if var in self.structs:
            return self.structs[var].get(field_name)
        if owner is not None and owner.kind == "struct":
            return Alias(owner.params, "pointer", field=field_name)
        return None

    def _note_lambda(self, name: str, value: Node) -> None:
        """`auto copy = [&](const T* src, T* dst) {...};`: calls of `copy` run this body."""
        declarator = value.child_by_field_name("declarator")
        body = value.child_by_field_name("body")
        if body is not None:
            params = params_of(declarator) if declarator is not None else []
            self.local_fns[name] = FunctionNode(name, params, body, self.fn.path, self.fn.lines)

    def _note_function_pointer(self, name: str, value: Node) -> None:
        """`auto kernel = &k<T>;` / `= k<T>;` (or a choice of two): `kernel(...)` calls `k`."""
        if value.type == "template_function" or (
            value.type in {"identifier", "qualified_identifier"}
            and self.alias_of(value) is None
            and self.context.functions(callee(value))
        ):
            self.fn_aliases[name] = callee(value)
            return
        for node in walk(value):
            if node.type == "pointer_expression" and text_of(node).lstrip().startswith("&"):
                operand = node.child_by_field_name("argument")
                if operand is not None and operand.type in {
                    "identifier",
                    "template_function",
                    "qualified_identifier",
                }:
                    self.fn_aliases[name] = callee(operand)
                    return

    def _assign(self, node: Node) -> None:
        left = assignment_target(node)
        right = node.child_by_field_name("right")
        if left is None:
            return
        if left.type == "identifier":
            self._rebind(text_of(left), right)
            return
        if left.type == "field_expression" and self._bind_field(left, right):
            return
        if left.type == "subscript_expression" and self._fill_table(left, right):
            return
        self._store(node, left)

    def _rebind(self, name: str, right: Node | None) -> None:
        """`c = c_or_none.value();` after the declaration: a may-alias, kept on every path."""
        alias = self.alias_of(right)
        previous = self.aliases.get(name)
        if alias is not None:
            self.aliases[name] = previous.merged(alias) if previous is not None else alias
        elif previous is not None and previous.kind == "tensor":
            self.aliases[name] = replace(previous, partial=True)

    def _bind_field(self, left: Node, right: Node | None) -> bool:
        """`params.out_ptr = out.data_ptr();` records a pointer carried by a struct field."""
        base = left.child_by_field_name("argument")
        field_name = text_of(left.child_by_field_name("field") or left)
        if base is None or base.type != "identifier":
            return False
        alias = self.alias_of(right)
        owner = self.aliases.get(text_of(base))
        if owner is not None and owner.kind == "struct":
            if alias is not None and alias.field is None:
                for param in owner.params:
                    self.result.field_binds[(param, field_name)] = alias.params
            return True
        if owner is None:
            if alias is not None:
                self.structs.setdefault(text_of(base), {})[field_name] = alias
                self.bound_at[(text_of(base), field_name)] = left
            return True
        return False

    def _fill_table(self, left: Node, right: Node | None) -> bool:
        """`ptrs[i] = (int64_t)x.data_ptr();` into a local array makes it an address table."""
        base = left.child_by_field_name("argument")
        if base is None or base.type != "identifier" or text_of(base) in self.aliases:
            return False
        alias = self.alias_of(right)
        if alias is None or alias.kind not in {"address", "pointer"}:
            return False
        table = replace(alias, kind="table" if alias.kind == "address" else "pointer")
        self.aliases[text_of(base)] = table
        return True

    def _store(self, node: Node, target: Node | None) -> None:
        """A store through `target` (`p[i] = v`, `*q = v`, `acc[0][1] = v`, `p[i]++`)."""
        if target is None or target.type == "identifier":
            return
        bound = self.bound_at.get(self._local_field(target) or ("", ""))
        if bound is not None and exclusive(bound, node):
            return  # on this path the field does not hold the parameter's pointer
        alias = self._store_base(target)
        if is_pointer_like(alias) and alias is not None and not alias.const:
            self.evidence(alias, "store", node, Confidence.HIGH)

    def _local_field(self, target: Node) -> tuple[str, str] | None:
        """(struct, field) when a store goes through a local struct's field (`s.f[i] = v`)."""
        node: Node | None = target
        while node is not None and node.type != "field_expression":
            if node.type not in {"subscript_expression", "pointer_expression"}:
                return None
            node = node.child_by_field_name("argument")
        base = node.child_by_field_name("argument") if node is not None else None
        if node is None or base is None or base.type != "identifier":
            return None
        return text_of(base), text_of(node.child_by_field_name("field") or node)

    def _store_base(self, target: Node) -> Alias | None:
        node: Node | None = target
        while node is not None:
            if node.type == "subscript_expression":
                base = self.alias_of(node.child_by_field_name("argument"))
                if base is not None and base.kind == "table":
                    return None  # storing into a table of addresses writes no parameter
                if base is not None and base.kind != "loaded":
                    return base
                node = node.child_by_field_name("argument")
            elif node.type == "pointer_expression" and not text_of(node).lstrip().startswith("&"):
                return self.alias_of(node.child_by_field_name("argument"))
            elif node.type == "field_expression":
                alias = self._field_alias(node)
                if alias is not None:
                    return alias
                node = node.child_by_field_name("argument")
            elif node.type == "parenthesized_expression":
                node = node.named_children[0] if node.named_children else None
            else:
                return self.alias_of(node)
        return None

    def _call(self, node: Node) -> None:
        function = node.child_by_field_name("function")
        arguments = node.child_by_field_name("arguments")
        if function is None or arguments is None:
            return
        args = [a for a in arguments.named_children if a.type != "comment"]
        if function.type == "field_expression":
            if self._method_call(node, function, args):
                return
            name = text_of(function.child_by_field_name("field") or function).split("<", 1)[0]
        else:
            name = callee(function)
        name = self.fn_aliases.get(name, name)
        if name in LAUNCHERS:
            launch = launch_arguments(name, args, self.arg_tables)
            if launch is not None:
                kernel = self.fn_aliases.get(launch[0], launch[0])
                self._pass_to(kernel, node, launch[1], [self.alias_of(a) for a in launch[1]])
                return
        if name in self.local_fns:
            aliases = [self.alias_of(arg) for arg in args]
            self._pass_to(name, node, args, aliases)
            return
        if name in CASTS or name in READERS or name in WRAPPERS or is_accessor_type(name):
            return
        aliases = [self.alias_of(arg) for arg in args]
        first = aliases[0] if aliases else None
        qualified = "::" in text_of(function)
        if (
            first is not None
            and first.kind == "tensor"
            and (
                name.endswith("_out")
                or (name.endswith("_") and qualified and name not in NON_WRITING_INPLACE)
            )
        ):
            self.evidence(first, "out-call", node, Confidence.HIGH)
            return
        if name in POINTER_WRITERS and aliases:
            written = aliases[POINTER_WRITERS[name]] if len(aliases) > 1 else aliases[0]
            if is_pointer_like(written) and written is not None and not written.const:
                self.evidence(written, "pointer-write", node, Confidence.HIGH)
            return
        carries = any(a.type == "identifier" and text_of(a) in self.structs for a in args)
        if carries or any(a is not None for a in aliases):
            self._pass_to(name, node, args, aliases)

    def _inline_asm(self, node: Node) -> None:
        """`asm("st.global.v4.f32 [%0], ..." :: "l"(ptr), ...)`: a PTX store through `ptr`."""
        template = next((c for c in node.named_children if c.type == "string_literal"), None)
        text = text_of(template) if template is not None else ""
        if not re.search(r"\b(?:st|red|atom|cp\.async)\.", text):
            return
        operands = [
            operand.named_children[-1]
            for kind in ("gnu_asm_output_operand_list", "gnu_asm_input_operand_list")
            for group in node.named_children
            if group.type == kind
            for operand in group.named_children
            if operand.named_children
        ]
        for index in {int(i) for i in re.findall(r"\[%(\d+)\]", text)}:
            if index < len(operands):
                alias = self.alias_of(operands[index])
                if is_pointer_like(alias) and alias is not None and not alias.const:
                    self.evidence(alias, "pointer-write", node, Confidence.HIGH)

    def _aggregate(self, node: Node) -> None:
        """`K{out_ptr, in_ptr}`: a functor brace-initialised from aliased values."""
        kind = node.child_by_field_name("type")
        value = node.child_by_field_name("value")
        if kind is None or value is None:
            return
        name = callee(kind)
        if not any(c.call is not None for c in self.context.classes(name)):
            return
        args = [a for a in value.named_children if a.type != "comment"]
        aliases = [self.alias_of(arg) for arg in args]
        if any(a is not None for a in aliases):
            self._pass_to(name, node, args, aliases)

    def _method_call(self, node: Node, function: Node, args: list[Node]) -> bool:
        """`t.add_(..)`, `BlockStore(..).Store(ptr, ..)`: True when the call is decided here."""
        target = self.alias_of(receiver(function))
        method = text_of(function.child_by_field_name("field") or function).split("<", 1)[0]
        if target is not None and target.kind == "tensor":
            if method.endswith("_") and method not in NON_WRITING_INPLACE:
                self.evidence(target, "inplace-method", node, Confidence.HIGH)
            return True
        if method in METHOD_WRITERS and args:
            written = self.alias_of(args[0])
            if is_pointer_like(written) and written is not None and not written.const:
                self.evidence(written, "vector-store", node, Confidence.HIGH)
            return True
        return method in READERS

    def _pass_to(
        self, name: str, node: Node, args: list[Node], aliases: list[Alias | None]
    ) -> None:
        """Arguments handed to another function or functor: look into it, or judge constness."""
        inner = self._analysecallee(name, len(aliases))
        if inner is None:
            for alias in aliases:
                if alias is not None and alias.kind == "pointer" and not alias.const:
                    confidence = Confidence.MEDIUM if alias.mutable_ptr else Confidence.LOW
                    self.evidence(alias, "pointer-to-unresolved-call", node, confidence)
            return
        call_text = short(text_of(node), 60)
        for position, alias in enumerate(aliases):
            if alias is None or position >= len(args):
                continue
            if position in inner.writes and not alias.const:
                proof = inner.writes[position][0]
                kind = "mutating-call" if alias.kind == "tensor" else "kernel-store"
                self.evidence(
                    alias, kind, node, proof.confidence, f"{call_text} -> {proof.expression}"
                )
            if position in inner.indirect:
                proof = inner.indirect[position][0]
                target = replace(alias, kind="pointer") if alias.kind == "table" else alias
                if alias.kind in {"table", "pointer"}:
                    self.evidence(
                        target if alias.kind == "table" else replace(alias, kind="indirect"),
                        "indirect-store",
                        node,
                        proof.confidence,
                        f"{call_text} -> {proof.expression}",
                    )
        self._struct_flow(inner, node, args, aliases, call_text)

    def _struct_flow(
        self,
        inner: FunctionWrites,
        node: Node,
        args: list[Node],
        aliases: list[Alias | None],
        call_text: str,
    ) -> None:
        """Carry struct fields across the call: fields the callee fills, fields it writes."""
        for (position, name), params in inner.field_binds.items():
            if position >= len(args):
                continue
            bound = [aliases[p] for p in params if p < len(aliases) and aliases[p] is not None]
            if not bound:
                continue
            value = bound[0]
            for other in bound[1:]:
                if other is not None and value is not None:
                    value = value.merged(other)
            if value is None:
                continue
            holder = args[position]
            owner = aliases[position]
            if holder.type == "identifier" and owner is None:
                self.structs.setdefault(text_of(holder), {})[name] = value
            elif owner is not None and owner.kind == "struct" and value.field is None:
                for param in owner.params:
                    self.result.field_binds[(param, name)] = value.params
        for (position, name), proofs in inner.field_writes.items():
            if position >= len(args):
                continue
            holder = args[position]
            owner = aliases[position]
            text = f"{call_text} -> {proofs[0].expression}"
            if owner is not None and owner.kind == "struct":
                self.evidence(
                    Alias(owner.params, "pointer", field=name),
                    "field-store",
                    node,
                    proofs[0].confidence,
                    text,
                )
            elif holder.type == "identifier":
                carried = self.structs.get(text_of(holder), {}).get(name)
                if carried is not None and not carried.const:
                    self.evidence(carried, "field-store", node, proofs[0].confidence, text)

    def _analysecallee(self, name: str, arity: int) -> FunctionWrites | None:
        """Writes of the function or functor `name` (union over same-named definitions)."""
        if self.depth >= _MAX_DEPTH:
            return None
        if name in self.local_fns:
            return self._analyse(self.local_fns[name])
        functors = [c for c in self.context.classes(name) if c.call is not None]
        if functors:
            return self._analyse_functor(functors[0], arity)
        candidates = [c for c in self.context.functions(name) if len(c.params) >= arity]
        exact = [c for c in candidates if len(c.params) == arity] or candidates
        results = [r for c in exact if (r := self._analyse(c)) is not None]
        if not results:
            return None if not exact else FunctionWrites()
        merged = FunctionWrites()
        for result in results:
            for param, proofs in result.writes.items():
                merged.writes.setdefault(param, []).extend(proofs)
            for param, proofs in result.indirect.items():
                merged.indirect.setdefault(param, []).extend(proofs)
            for key, proofs in result.field_writes.items():
                merged.field_writes.setdefault(key, []).extend(proofs)
            merged.field_binds.update(result.field_binds)
        return merged

    def _analyse(self, callee: FunctionNode) -> FunctionWrites | None:
        key = id(callee.body)
        if key in self.context.cache:
            return self.context.cache[key]
        if key in self.context.active or callee.body is self.fn.body:
            return None
        self.context.active.add(key)
        try:
            result = _Analyzer(callee, self.context, self.depth + 1).run()
        finally:
            self.context.active.discard(key)
        self.context.cache[key] = result
        return result

    def _analyse_functor(self, functor: ClassNode, arity: int) -> FunctionWrites | None:
        """A functor built from the arguments: map them to fields, analyse `operator()`."""
        if functor.call is None:
            return None
        inner = self._analyse(functor.call)
        if inner is None:
            return None
        fields = [name for name, _ in functor.fields]
        by_arg: dict[int, list[int]] = {}
        for index, name in enumerate(fields):
            if functor.ctor_params is None:
                arg = index  # aggregate: brace-initialised in declaration order
            elif name in functor.ctor_inits:
                arg = functor.ctor_inits[name]
            else:
                continue
            by_arg.setdefault(arg, []).append(index)
        mapped = FunctionWrites()
        for arg, indices in by_arg.items():
            for index in indices:
                if index in inner.writes:
                    mapped.writes.setdefault(arg, []).extend(inner.writes[index])
                if index in inner.indirect:
                    mapped.indirect.setdefault(arg, []).extend(inner.indirect[index])
        return mapped

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
            if alias is None or alias.kind != "tensor":
                self.result.fresh_returns.add(position)
                continue
            if alias.partial:
                self.result.fresh_returns.add(position)
            name = self.fn.params[alias.param][0]
            proof = WriteEvidence(
                name, "returns-param", short(text_of(node)), self.location(node), Confidence.HIGH
            )
            self.result.returned.setdefault(position, (alias.param, proof))


def infer_writes(
    fn: FunctionNode, lookup: Lookup, classes: ClassLookup | None = None
) -> FunctionWrites:
    """Parameters `fn` writes (with evidence) and parameters it returns."""
    context = _Context(lookup, classes or (lambda name: []))
    return _Analyzer(fn, context, 0).run()
