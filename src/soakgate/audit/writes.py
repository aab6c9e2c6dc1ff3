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
from dataclasses import replace
from typing import TYPE_CHECKING

from soakgate.audit.cpp_alias import (
    WRAPPERS,
    Alias,
    is_accessor_type,
    is_pointer_like,
    pointee_const,
)
from soakgate.audit.cpp_classes import ClassNode
from soakgate.audit.cpp_flow import (
    MAX_DEPTH,
    THIS,
    CallFlow,
    ClassLookup,
    Context,
    FunctionWrites,
    Lookup,
    same_object_call,
    strongest,
)
from soakgate.audit.cpp_launch import (
    LAUNCHERS,
    address_table,
    kernel_of,
    launch_arguments,
    strip_casts,
)
from soakgate.audit.cpp_names import (
    CASTS,
    LIBRARY_WRITERS,
    METHOD_WRITERS,
    NON_WRITING_INPLACE,
    NULLS,
    POINTER_WRITERS,
    READERS,
    VIEW_WRITERS,
    assignment_target,
    callee,
    declared_name,
    exclusive,
    receiver,
    short,
    walk,
)
from soakgate.audit.cpp_reach import Reach, pick
from soakgate.audit.cpp_vendor import COMMANDS, VendorOp, api_operator
from soakgate.audit.extract_cpp import FunctionNode, params_of, text_of
from soakgate.audit.model import Confidence, WriteEvidence

GLOBAL_TENSOR = re.compile(r"\bGlobalTensor\s*<")
"""AscendC's view of global memory (`AscendC::GlobalTensor<T> yGm;`), bound by `SetGlobalBuffer`."""
_GLOBAL = re.compile(r"\bGM_ADDR\b|__gm__")  # a global-memory address (a kernel's parameter)

if TYPE_CHECKING:
    from tree_sitter import Node


def _is_const_pointer(type_text: str) -> bool:
    """`const T* p` / `T const* p` -> True; `T* const p` / `T* p` -> False."""
    head = type_text.rsplit("*", 1)[0] if "*" in type_text else type_text.split("&")[0]
    return re.search(r"\bconst\b", head) is not None and (
        "*" in type_text or "ccessor" not in type_text
    )


def _moved_param(value: Node | None, pointers: list[str], fn: FunctionNode) -> int | None:
    """The position of the pointer parameter `value` is (through casts, parentheses and
    `+ offset`), else None."""
    value = strip_casts(value)
    while value is not None and value.type == "binary_expression":
        value = strip_casts(value.child_by_field_name("left"))
    if value is None or value.type != "identifier" or text_of(value) not in pointers:
        return None
    return [p for p, _ in fn.params].index(text_of(value))


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
        # `Variable` is `torch::autograd::Variable`, a Tensor (autograd Functions' forward)
        if re.search(r"\b(?:Tensor|Variable|TensorView)\b", type_text) and "*" not in type_text:
            aliases[name] = Alias((index,), "tensor")
        elif "*" in type_text or "ccessor" in type_text or re.search(r"\bGM_ADDR\b", type_text):
            aliases[name] = Alias((index,), "pointer", _is_const_pointer(type_text))
        elif not re.match(
            r"\s*(?:const\s+)?(?:unsigned\s+)?(?:bool|int|float|double|char|"
            r"long|short|u?int\d*_t|size_t|auto)\b",
            type_text,
        ):
            aliases[name] = Alias((index,), "struct")
    return aliases


def _function_named(value: Node) -> str | None:
    """The function an expression names (`k`, `ns::k`, `k<T, 2>`, `&k<T>`), else None."""
    if text_of(value).lstrip().startswith("&"):
        operand = value.child_by_field_name("argument")
        if operand is None:
            return None
        value = operand
    if value.type in {"identifier", "template_function", "qualified_identifier"}:
        return callee(value)
    return None


def _is_name(node: Node | None, name: str) -> bool:
    return node is not None and node.type == "identifier" and text_of(node) == name


def _assigned_values(body: Node, returned: Node | None, functions: Lookup) -> list[Node]:
    """What a picker's `return x;` may return: `x` itself when it names a function, else the
    values the picker assigns to the local `x` (`auto x = Default; ... x = K<T, 2>;`); a null
    return is no value."""
    if returned is None or text_of(returned).strip() in NULLS:
        return []
    if returned.type != "identifier" or functions(text_of(returned)):
        return [returned]
    local = text_of(returned)
    values: list[Node] = []
    for node in walk(body):
        if (
            node.type == "init_declarator"
            and declared_name(node.child_by_field_name("declarator")) == local
        ):
            value = node.child_by_field_name("value")
        elif node.type == "assignment_expression" and _is_name(assignment_target(node), local):
            value = node.child_by_field_name("right")
        else:
            continue
        if value is not None:
            values.append(value)
    return values or [returned]


class _Analyzer(CallFlow):
    """Walks one function body, tracking local aliases of its parameters."""

    def __init__(self, fn: FunctionNode, context: Context, depth: int) -> None:
        self.fn = fn
        self.context = context
        self.depth = depth
        super().__init__(initial_aliases(fn.params))
        self.fn_aliases: dict[str, str] = {}
        self.fn_choices: dict[str, tuple[str, ...]] = {}
        """`kernel = pick_kernel(...)` where the picker returns one of several functions."""
        self.pickers: dict[str, Node] = {}
        """Locals bound to a call's result (`kernel = pick_kernel(m)`), looked into only
        when the local is itself called or launched."""
        self.local_fns: dict[str, FunctionNode] = {}
        self.arg_tables: dict[str, list[Node]] = {}
        """`void* args[] = {&a, &b}` for `cudaLaunchKernel(kernel, grid, block, args, ...)`."""
        self.bound_at: dict[tuple[str, str], Node] = {}
        """(local struct, field) -> where the field was bound to a parameter's pointer."""
        self.struct_types: dict[str, str] = {
            name: _type_name(declaration, name)
            for name, declaration in fn.params
            if name and self.aliases.get(name, Alias((), "")).kind == "struct"
        }
        """Struct-typed locals and parameters -> their class name (for their methods)."""
        self.result = FunctionWrites()
        self._seed_members()

    def _seed_members(self) -> None:
        """In `C::method`, a pointer member `p` of C is `this->p`: stores through it are
        writes of the field, which a caller of the same class maps to what it put there."""
        if not self.fn.owner:
            return
        params = {name for name, _ in self.fn.params}
        for cls in reversed(self.lineage(self.fn.owner)):  # the nearest class's fields last
            for field_name, declaration in cls.fields:
                if field_name in params:
                    continue
                if GLOBAL_TENSOR.search(declaration):  # AscendC: a view of global memory
                    self.aliases[field_name] = Alias((THIS,), "tensor", field=field_name)
                elif "*" in declaration:
                    const = pointee_const(declaration, Alias((THIS,), "pointer"))
                    self.aliases[field_name] = Alias((THIS,), "pointer", const, field=field_name)

    def spawn(self, fn: FunctionNode) -> CallFlow:
        return _Analyzer(fn, self.context, self.depth + 1)

    def run(self) -> FunctionWrites:
        """Visit the body once, in document order, so aliases are known before their uses."""
        for node in walk(self.fn.body):
            kind = node.type
            if kind == "init_declarator":
                self._declare(node)
            elif kind == "declaration":
                self._declare_functor(node)
            elif kind == "assignment_expression":
                self._assign(node)
            elif kind == "update_expression":
                self._store(node, node.child_by_field_name("argument"))
            elif kind == "call_expression":
                self._call(node)
            elif kind == "new_expression":
                self._new(node)
            elif kind == "compound_literal_expression":
                self._aggregate(node)
            elif kind == "gnu_asm_expression":
                self._inline_asm(node)
            elif kind == "return_statement":
                self._return(node)
        return self.result

    def _declare(self, node: Node) -> None:
        value = node.child_by_field_name("value")
        declarator = node.child_by_field_name("declarator")
        if value is not None and self._unpack(declarator, value):
            return
        name = declared_name(declarator)
        if value is None or name is None:
            return
        if self._designated(node, name, value):
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

    def _designated(self, node: Node, name: str, value: Node) -> bool:
        """`auto params = Params{.k = k.data_ptr(), .out = out.data_ptr(), .n = n};` (also
        `Params p{.k = ...}` / `= {.k = ...}`): a local struct whose fields carry those
        pointers, as if each were assigned (`params.out = ...`)."""
        kind: Node | None = None
        listed: Node | None = value
        if value.type == "compound_literal_expression":
            kind, listed = value.child_by_field_name("type"), value.child_by_field_name("value")
        elif value.type == "initializer_list" and node.parent is not None:
            kind = node.parent.child_by_field_name("type")
        if kind is None or listed is None or listed.type != "initializer_list":
            return False
        items = [c for c in listed.named_children if c.type != "comment"]
        pairs: list[tuple[str, Node]] = []
        for item in items:
            designator = item.child_by_field_name("designator") or (
                item.named_children[0] if item.type == "initializer_pair" else None
            )
            inner = item.child_by_field_name("value")
            if item.type == "initializer_pair" and designator is not None and inner is not None:
                pairs.append((text_of(designator).lstrip(".").strip(), inner))
        struct = callee(kind)
        if not pairs:  # `{a, b}` in field order stays a list of the pointers it holds, which
            return False  # a call the tree does not have sees as pointers handed to it
        carried = {f: a for f, v in pairs if (a := self.alias_of(v)) is not None}
        if not carried:
            return False
        self.structs[name] = carried
        self.struct_types[name] = struct
        self.aliases.pop(name, None)
        return True

    def _aggregate_fields(self, struct: str) -> list[tuple[str, str]]:
        """The data members of a plain struct of the tree, in declaration order: (name,
        declaration)."""
        for cls in self.context.classes(struct):
            if cls.fields and cls.ctor_params is None:
                return [
                    (f, declared) for f, declared in cls.fields if f and "static" not in declared
                ]
        return []

    def _unpack(self, declarator: Node | None, value: Node) -> bool:
        """`const auto& [src, dst, n] = params;`: each name is the struct's field at its
        position (a parameter struct's field, or what a local struct's field carries)."""
        while declarator is not None and declarator.type == "reference_declarator":
            declarator = next((c for c in declarator.named_children if c.type != "comment"), None)
        if declarator is None or declarator.type != "structured_binding_declarator":
            return False
        names = [text_of(c) for c in declarator.named_children if c.type == "identifier"]
        for bound in names:
            self.aliases.pop(bound, None)
        if value.type != "identifier":
            return True
        source = text_of(value)
        owner = self.aliases.get(source)
        if source in self.structs:
            fields = self._aggregate_fields(self.struct_types.get(source, ""))
            carried = self.structs[source]
            for bound, (field_name, _) in zip(names, fields, strict=False):
                if field_name in carried:
                    self.aliases[bound] = carried[field_name]
        elif owner is not None and owner.kind == "struct" and len(owner.params) == 1:
            declared = self.fn.params[owner.params[0]][1] if owner.params[0] >= 0 else ""
            struct = _type_name(declared, self.fn.params[owner.params[0]][0])
            members = self._aggregate_fields(struct)
            for bound, (field_name, text) in zip(names, members, strict=False):
                if "*" in text:
                    const = _is_const_pointer(text.split(field_name, 1)[0])
                    self.aliases[bound] = Alias(owner.params, "pointer", const, field=field_name)
        return True

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

    def _new(self, node: Node) -> None:
        """`new QMatrix(w_ptr, perm_ptr)`: the arguments go to the class's constructor."""
        kind = node.child_by_field_name("type")
        arguments = node.child_by_field_name("arguments")
        if kind is None or arguments is None or arguments.type != "argument_list":
            return
        args = [a for a in arguments.named_children if a.type != "comment"]
        aliases = [self.alias_of(arg) for arg in args]
        if any(a is not None for a in aliases):
            self._pass_to(callee(kind), node, args, aliases)

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
        if value.type == "call_expression" or (  # maybe a picker (or either of two)
            value.type == "conditional_expression"
            and all(
                (b := value.child_by_field_name(f)) is not None and b.type == "call_expression"
                for f in ("consequence", "alternative")
            )
        ):  # resolved if `name` is called
            self.pickers[name] = value

    def _autograd_apply(self, node: Node, function: Node, args: list[Node]) -> bool:
        """`ScatterSum::apply(src, out, ...)` on a `torch::autograd::Function` of the tree runs
        its static `forward(ctx, src, out, ...)`: the arguments land one place later."""
        scope = function.child_by_field_name("scope")
        cls = next(
            (c for c in self.context.classes(callee(scope)) if "forward" in c.methods)
            if scope is not None
            else iter(()),
            None,
        )
        if cls is None:
            return False
        inner = self._analyse(cls.methods["forward"])
        if inner is not None:
            aliases = [self.alias_of(arg) for arg in args]
            self._carry(inner, node, [node, *args], [None, *aliases])
        return True

    def _called(self, name: str) -> tuple[str, ...]:
        """The functions a call of `name` runs: itself, or what a function-pointer local
        holds (`auto kernel = K<T>;`, or the functions a picker it was bound to returns)."""
        if name in self.pickers:
            value = self.pickers.pop(name)
            picked = self._picked_function(value)
            if len(picked) == 1:
                self.fn_aliases[name] = picked[0]
            elif picked:
                self.fn_choices[name] = picked
        if name in self.fn_choices:
            return self.fn_choices[name]
        return (self.fn_aliases.get(name, name),)

    def _call_alias(self, call: Node) -> Alias | None:
        found = super()._call_alias(call)
        function = call.child_by_field_name("function")
        arguments = call.child_by_field_name("arguments")
        if found is not None or function is None or arguments is None:
            return found
        if function.type not in {"identifier", "qualified_identifier", "template_function"}:
            return None
        position = self._passed_through(callee(function))
        args = [a for a in arguments.named_children if a.type != "comment"]
        return (
            self.alias_of(args[position]) if position is not None and position < len(args) else None
        )

    def _passed_through(self, name: str) -> int | None:
        """The pointer parameter a function of the tree returns, moved (`offset(ptr, n)`
        returning `static_cast<T*>(ptr) + n`), where every definition of that name returns the
        same one."""
        if name not in self.context.passthrough:
            positions = set()
            for fn in self.context.functions(name):
                names = [p for p, declared in fn.params if "*" in declared]
                for node in walk(fn.body):
                    if node.type == "return_statement":
                        value = next((c for c in node.named_children if c.type != "comment"), None)
                        positions.add(_moved_param(value, names, fn))
            known = positions - {None}
            self.context.passthrough[name] = (
                known.pop() if positions == known and len(known) == 1 else None
            )
        return self.context.passthrough[name]

    def _kernel_named(self, name: str) -> str:
        """The function `name` stands for: itself, or in a method the one a member variable of
        its class names (`_member_function`; a picker may hand such a member back)."""
        if self.context.functions(name) or not self.fn.owner:
            return name
        return self._member_function(name) or name

    def _member_function(self, name: str) -> str | None:
        """`kernel` inside a class holding `static constexpr auto kernel = k<T, 2>;` (also a
        member variable template, `template <int S> static constexpr auto kernel = k<S>;`):
        `k`, where it is a function of the tree. Read from the class body this method is in."""
        body: Node | None = self.fn.body
        while body is not None and body.type != "field_declaration_list":
            body = body.parent
        if body is None:
            return None
        pattern = rf"\bstatic\s+constexpr\s+auto\s+{re.escape(name)}\s*=\s*&?\s*([A-Za-z_][\w:]*)"
        found = re.search(pattern, text_of(body))
        target = found.group(1).rsplit("::", 1)[-1] if found else None
        return target if target and self.context.functions(target) else None

    def _picked_function(self, call: Node) -> tuple[str, ...]:
        """`kernel = pick_kernel<T>(m)` where the tree's picker returns instances of functions
        (`return gemm_kernel<true, 2>;`, or a local it assigned them to): `kernel(...)` calls
        one of them (`use32 ? pick<int>(m) : pick<long>(m)`: either's). Empty when the
        picker returns anything else."""
        if call.type == "conditional_expression":
            branches = [call.child_by_field_name(f) for f in ("consequence", "alternative")]
            picked = [self._picked_function(b) for b in branches if b is not None]
            return tuple(sorted(set().union(*picked))) if all(picked) else ()
        function = call.child_by_field_name("function")
        kinds = {"identifier", "qualified_identifier", "template_function"}
        if function is None or function.type not in kinds:
            return ()
        key = (callee(function), self.fn.path)
        if key not in self.context.picked:
            self.context.picked[key] = self._returned_functions(callee(function))
        return self.context.picked[key]

    def _returned_functions(self, picker_name: str) -> tuple[str, ...]:
        names: set[str] = set()
        for picker in pick(self.context.functions(picker_name), self.fn.path,
                           self.context.reach):  # fmt: skip
            for node in walk(picker.body):
                if node.type != "return_statement":
                    continue
                returned = next((c for c in node.named_children if c.type != "comment"), None)
                values = _assigned_values(picker.body, returned, self.context.functions)
                for value in values:
                    name = _function_named(value)
                    if name is None:
                        return ()
                    names.add(name)
        # A member variable naming a kernel (`static constexpr auto store_kernel = k<S, T>;`)
        # is that kernel; a name the tree does not define (a default kernel made by a macro)
        # adds nothing.
        names = {self._kernel_named(n) for n in names}
        return tuple(sorted(n for n in names if self.context.functions(n)))

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
        if left.type == "subscript_expression" and self._bind_field_element(left, right):
            return
        if left.type == "subscript_expression" and self._fill_table(left, right):
            return
        self._store(node, left)

    def _rebind(self, name: str, right: Node | None) -> None:
        """`c = c_or_none.value();` after the declaration: a may-alias, kept on every path."""
        alias = self.alias_of(right)
        previous = self.aliases.get(name)
        if alias is not None:
            member = previous is not None and previous.params == (THIS,)  # `this->p = ...`
            self.aliases[name] = previous.merged(alias) if previous and not member else alias
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

    def _bind_field_element(self, left: Node, right: Node | None) -> bool:
        """`kernel.outs[j] = ptrs[j];` fills an array field of a local functor element by
        element: the field carries every pointer put into it (a may-alias)."""
        target = left.child_by_field_name("argument")
        if target is None or target.type != "field_expression":
            return False
        base = target.child_by_field_name("argument")
        if base is None or base.type != "identifier" or text_of(base) in self.aliases:
            return False
        alias = self.alias_of(right)
        if (
            right is not None
            and right.type == "subscript_expression"
            and (alias is None or alias.kind in {"loaded", "address"})
        ):
            # `ptrs[j]` of a local array of pointers (`float* ptrs[2] = {o1_ptr, o2_ptr}`): the
            # element is one of its pointers (the launch checks the field holds pointers)
            alias = self.alias_of(right.child_by_field_name("argument"))
        if alias is None or alias.kind not in {"pointer", "tensor", "table"}:
            return False
        if alias.kind == "table":
            alias = replace(alias, kind="pointer")
        field_name = text_of(target.child_by_field_name("field") or target)
        carried = self.structs.setdefault(text_of(base), {})
        previous = carried.get(field_name)
        carried[field_name] = previous.merged(alias) if previous is not None else alias
        return True

    def _declare_functor(self, node: Node) -> None:
        """`SplitKernel<2> kernel;`: a functor declared without arguments, to be filled field by
        field and launched (its type is what the launch analyses)."""
        kind = node.child_by_field_name("type")
        if kind is None:
            return
        name = callee(kind)
        classes = self.context.classes(name)
        functor = any(c.call is not None for c in classes)
        methods = any(c.methods for c in classes)  # AscendC: `KernelClass<T> op; op.Init(...)`
        if not functor and not methods:
            return
        for child in node.children_by_field_name("declarator"):
            if child.type == "identifier":
                self.struct_types[text_of(child)] = name
                if not functor:
                    self.structs.setdefault(text_of(child), {})
            elif child.type == "function_declarator" and not functor:
                self._constructed(child, classes)

    def _constructed(self, declarator: Node, classes: list[ClassNode]) -> None:
        """`Kernel<T> op(x, y, n);` of names this function holds: the grammar reads a
        declaration of a function `op` (C++'s most vexing parse); it builds an object."""
        var = declared_name(declarator.child_by_field_name("declarator"))
        plist = declarator.child_by_field_name("parameters")
        names = [text_of(p).strip() for p in plist.named_children] if plist is not None else []
        if var is None or not names or not all(n.isidentifier() for n in names):
            return
        if any(n in self.aliases for n in names):
            self.struct_from(var, classes, [self.aliases.get(n) for n in names])

    def _launch_functor(self, node: Node, args: list[Node]) -> None:
        """A functor filled field by field handed to a call (`h.parallel_for(range, kernel)`, a
        launch macro's expansion): what its `operator()` writes through a field is written
        through the pointers that field carries."""
        for arg in args:
            var = text_of(arg) if arg.type == "identifier" else ""
            carried = self.structs.get(var)
            if not carried or var not in self.struct_types:
                continue
            functors = self.context.classes(self.struct_types[var])
            functor = next((c for c in functors if c.call is not None), None)
            inner = self._analyse(functor.call) if functor and functor.call else None
            if functor is None or inner is None:
                continue
            call_text = short(text_of(node), 60)
            for index, (field_name, declared) in enumerate(functor.fields):
                alias = carried.get(field_name)
                proofs = inner.writes.get(index) or inner.indirect.get(index)
                if alias is None or alias.const or not proofs or "*" not in declared:
                    continue
                kind = "mutating-call" if alias.kind == "tensor" else "kernel-store"
                text = f"{call_text} -> {proofs[0].expression}"
                self.evidence(alias, kind, node, proofs[0].confidence, text)

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
        kernel = kernel_of(args[0]) if function.type == "call_expression" and args else None
        named = [self._kernel_named(k) for k in self._called(kernel)] if kernel else []
        kernels = [k for k in named if self.context.functions(k)]
        if kernels:
            # a launcher object called with the kernel and its arguments (SGLang's JIT kernels:
            # `LaunchKernel(grid, block, device)(kernel<T>, in, out, n)`)
            launched = [self.alias_of(a) for a in args[1:]]
            for target in kernels:
                self._pass_to(target, node, args[1:], launched)
            return
        if function.type == "field_expression":
            if self._method_call(node, function, args):
                return
            name = text_of(function.child_by_field_name("field") or function).split("<", 1)[0]
        else:
            name = callee(function)
        if name in COMMANDS and args and args[0].type == "identifier":
            self._vendor_command(text_of(args[0]), node, args[1:])
            return
        apply = function.type == "qualified_identifier" and name == "apply"
        if apply and self._autograd_apply(node, function, args):
            return
        targets = self._called(name)
        if len(targets) > 1:  # a kernel from a picker: each function it may return
            aliases = [self.alias_of(arg) for arg in args]
            for target in targets:
                self._pass_to(target, node, args, aliases)
            return
        name = targets[0]
        if name in LAUNCHERS:
            launch = launch_arguments(name, args, self.arg_tables)
            if launch is not None:
                launched = [self.alias_of(a) for a in launch[1]]
                for kernel in self._called(launch[0]):
                    self._pass_to(kernel, node, launch[1], launched)
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
        # ATen's conventions (`at::add_out(out, ..)`, `at::add_(self, ..)`) name the written
        # argument; a project function of that name whose body is in the tree is read instead.
        own_body = not qualified and bool(self.context.functions(name))
        if (
            first is not None
            and first.kind == "tensor"
            and not own_body
            and (
                name.endswith("_out")
                or (name.endswith("_") and qualified and name not in NON_WRITING_INPLACE)
            )
        ):
            self.evidence(first, "out-call", node, Confidence.HIGH)
            return
        if name in LIBRARY_WRITERS:
            for position in LIBRARY_WRITERS[name]:
                output = aliases[position] if position < len(aliases) else None
                if is_pointer_like(output) and output is not None and not output.const:
                    self.evidence(output, "pointer-write", node, Confidence.HIGH)
            return
        if name in POINTER_WRITERS and aliases:
            written = aliases[POINTER_WRITERS[name]] if len(aliases) > 1 else aliases[0]
            if is_pointer_like(written) and written is not None and not written.const:
                self.evidence(written, "pointer-write", node, Confidence.HIGH)
            return
        carries = any(a.type == "identifier" and text_of(a) in self.structs for a in args)
        if carries:
            self._launch_functor(node, args)
        member = bool(self.fn.owner) and same_object_call(node)  # may write our members
        if carries or member or any(a is not None for a in aliases):
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
        holder = receiver(function)
        target = self.alias_of(holder)
        method = text_of(function.child_by_field_name("field") or function).split("<", 1)[0]
        if method == "SetGlobalBuffer" and holder is not None:
            member = text_of(holder).replace("this->", "").strip()
            if member.isidentifier():  # AscendC: `gm.SetGlobalBuffer(ptr, n)`
                self._global_buffer(member, args)
                return True
        if method == "SetValue" and target is not None and target.kind == "tensor":
            self.evidence(target, "vector-store", node, Confidence.HIGH)  # `gm.SetValue(i, v)`
            return True
        if (
            holder is not None
            and holder.type == "identifier"
            and self._object_method(text_of(holder), method, node, args)
        ):
            return True
        if (
            method in VIEW_WRITERS
            and target is not None
            and target.kind == "pointer"
            and not target.const
            and "->" not in text_of(function)
        ):  # a view object made from the pointer (`make_buffer_view(p, n).set(...)`)
            self.evidence(target, "vector-store", node, Confidence.HIGH)
            return True
        if target is not None and target.kind == "tensor":
            if method.endswith("_") and method not in NON_WRITING_INPLACE:
                self.evidence(target, "inplace-method", node, Confidence.HIGH)
            return True
        if method == "mark_dirty":  # autograd: "inputs modified in-place" by this forward
            items = args[0].named_children if args and args[0].type == "initializer_list" else args
            for item in items:
                dirty = self.alias_of(item)
                if dirty is not None and dirty.kind == "tensor":
                    self.evidence(dirty, "inplace-method", node, Confidence.HIGH)
            return True
        if method in METHOD_WRITERS and args:
            written = self.alias_of(args[0])
            if is_pointer_like(written) and written is not None and not written.const:
                self.evidence(written, "vector-store", node, Confidence.HIGH)
            return True
        return method in READERS

    def _vendor_command(self, api: str, node: Node, args: list[Node]) -> None:
        """`EXEC_NPU_CMD(aclnnName, inputs..., attributes..., outputs...)` of an operator the
        tree defines (`cpp_vendor`): the outputs it declares are written (an output named as
        an input is that input, in place), and its kernel is followed with the tensors in its
        parameters' order. A closed operator (not in the tree) is left alone."""
        name = api_operator(api)
        op = self.context.vendor(name) if name is not None else None
        if op is None:
            return
        aliases = [self.alias_of(arg) for arg in args]
        for output in op.outputs:
            index = op.output_argument(output, len(args))
            alias = aliases[index] if index is not None else None
            if alias is not None and alias.kind == "tensor":
                text = f"{short(text_of(node), 60)} -> {op.name} declares output {output!r}"
                self.evidence(alias, "vendor-output", node, Confidence.MEDIUM, text)
        order = op.kernel_arguments(len(args))
        passed = [aliases[i] if i is not None else None for i in order]
        # the kernel entries: every parameter a global-memory address (a binding of the same
        # name, vLLM-Ascend's `store_kv_block`, is not one)
        kernels = [
            fn
            for fn in self.context.functions(op.kernel)
            if len(fn.params) >= len(passed) and all(_GLOBAL.search(t) for _, t in fn.params)
        ]
        inner = self.analyse_all(kernels) if self.depth < MAX_DEPTH else None
        if inner is None or not any(alias is not None for alias in passed):
            return
        # the kernel's own stores; an address it hands to code not found (the framework's
        # list descriptors, a class picked by a macro argument) says nothing here
        sure = {
            position: strong
            for position, proofs in inner.writes.items()
            if (strong := [p for p in proofs if p.confidence >= Confidence.MEDIUM])
        }
        nodes = [args[i] if i is not None else node for i in order]
        self._carry(replace(inner, writes=sure), node, nodes, passed)

    def _global_buffer(self, name: str, args: list[Node]) -> None:
        """`gm.SetGlobalBuffer((__gm__ T*)ptr, n)`: `gm` views the memory `ptr` points to; a
        member bound so in one method (`Init`) carries it to the others (`field_binds`)."""
        alias = self.alias_of(args[0]) if args else None
        if alias is None or alias.kind not in {"pointer", "tensor"} or alias.field is not None:
            return
        view = Alias(alias.params, "tensor", alias.const)
        member = self.aliases.get(name)
        if member is not None and member.params == (THIS,) and member.field == name:
            self.result.field_binds[(THIS, name)] = alias.params
        self.aliases[name] = view

    def _object_method(self, var: str, method: str, node: Node, args: list[Node]) -> bool:
        """`op.Init(x, y, ...)` then `op.Process()` on a local object of a class of the tree
        (AscendC's kernel classes): the members a method binds to the arguments carry them to
        the methods that store through those members."""
        cls = self.struct_types.get(var)
        if var in self.aliases or var not in self.structs or not cls:  # an object built here
            return False
        found = self.method_of(cls, method)
        if found is None or self.depth >= MAX_DEPTH:
            return False
        inner = self._analyse(found)
        if inner is None:
            return True
        aliases = [self.alias_of(arg) for arg in args]
        self._carry(inner, node, args, aliases)
        members = self.structs.setdefault(var, {})
        for (position, name), params in inner.field_binds.items():
            bound = [aliases[p] for p in params if p < len(aliases) and aliases[p] is not None]
            if position == THIS and bound and bound[0] is not None:
                members[name] = bound[0]
        call_text = short(text_of(node), 60)
        for (position, name), proofs in inner.field_writes.items():
            carried = members.get(name)
            if position == THIS and carried is not None and not carried.const:
                proof = strongest(proofs)
                text = f"{call_text} -> {proof.expression}"
                self.evidence(
                    replace(carried, field=None), "field-store", node, proof.confidence, text
                )
        return True

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
    fn: FunctionNode, lookup: Lookup, classes: ClassLookup | None = None,
    reach: Reach | None = None, vendor: Callable[[str], VendorOp | None] | None = None,
) -> FunctionWrites:  # fmt: skip
    """Parameters `fn` writes (with evidence) and parameters it returns; `reach` tells which
    files each file includes (calls then reach the definitions a compiler would); `vendor`
    finds a vendor framework's operator definitions (`cpp_vendor`)."""
    context = Context(lookup, classes or (lambda name: []), reach)
    if vendor is not None:
        context.vendor = vendor
    return _Analyzer(fn, context, 0).run()
