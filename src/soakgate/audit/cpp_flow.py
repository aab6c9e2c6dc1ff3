"""Following data across calls: what a callee, functor or struct does with the arguments.

`CallFlow` is the half of the C++ write analysis (`writes`) that looks into other functions:
arguments handed to a helper, kernel or functor are analysed in it (through a cache shared by
one implementation's analysis, at most `MAX_DEPTH` calls deep) and its writes mapped back onto
the caller's parameters; struct fields carry pointers across calls in both directions (fields a
callee fills, fields whose pointer it stores through); a struct built by its constructor
carries the pointers its constructor stores in its fields.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from soakgate.audit.cpp_alias import Alias, AliasResolver
from soakgate.audit.cpp_classes import ClassNode, returned_field
from soakgate.audit.cpp_names import declared_name, short
from soakgate.audit.cpp_reach import Reach, pick
from soakgate.audit.cpp_syntax import FunctionNode, text_of
from soakgate.audit.cpp_vendor import VendorOp
from soakgate.audit.model import Confidence, Location, WriteEvidence

if TYPE_CHECKING:
    from tree_sitter import Node

Lookup = Callable[[str], list[FunctionNode]]
ClassLookup = Callable[[str], list[ClassNode]]

MAX_DEPTH = 6
_LINEAGE = 6  # classes looked at up a derivation chain
THIS = -1
"""The implicit object of a member function: its fields' writes are `field_writes[(THIS, f)]`."""


def same_object_call(call: Node) -> bool:
    """`run(...)` / `this->run(...)` inside a member function: a call on the same object."""
    function = call.child_by_field_name("function")
    if function is None:
        return False
    return function.type == "identifier" or text_of(function).startswith("this->")


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


def strongest(proofs: list[WriteEvidence]) -> WriteEvidence:
    """The evidence to carry up a call: the most confident (the first of those, in order)."""
    return max(proofs, key=lambda proof: proof.confidence)


@dataclass(slots=True)
class Context:
    """What every analysis of one implementation shares: lookups and a cache of callees."""

    functions: Lookup
    classes: ClassLookup
    reach: Reach | None = None
    """The files each file includes (`cpp_reach`): which same-named definition a call reaches."""
    cache: dict[int, FunctionWrites] = field(default_factory=dict)
    active: set[int] = field(default_factory=set)
    picked: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)
    """(picker function, caller file) -> the functions it may return (`writes`), or ()."""
    vendor: Callable[[str], VendorOp | None] = lambda name: None
    """A vendor framework's operator by type (`cpp_vendor`), for `EXEC_NPU_CMD(aclnnX, ...)`."""
    passthrough: dict[str, int | None] = field(default_factory=dict)
    """Function name -> the parameter every definition returns (offset), or None (`writes`)."""


class CallFlow(AliasResolver):
    """Call-following for the analysis of one function body (see `writes._Analyzer`)."""

    fn: FunctionNode
    context: Context
    depth: int
    result: FunctionWrites
    local_fns: dict[str, FunctionNode]
    struct_types: dict[str, str]

    def spawn(self, fn: FunctionNode) -> CallFlow:
        """An analysis of `fn` one call deeper (the concrete analyzer)."""
        raise NotImplementedError

    def run(self) -> FunctionWrites:
        """Analyse the body."""
        raise NotImplementedError

    def location(self, node: Node) -> Location:
        return Location(self.fn.path, self.fn.line(node))

    def evidence(
        self, alias: Alias, kind: str, node: Node, conf: Confidence, text: str = ""
    ) -> None:
        """Record a write through `alias`, routed by what it refers to."""
        expression = text or short(text_of(node))
        for param in alias.params:
            name = self.fn.params[param][0] if 0 <= param < len(self.fn.params) else "?"
            proof = WriteEvidence(name, kind, expression, self.location(node), conf)
            if alias.field is not None:
                for field_name in (alias.field, *alias.other_fields):
                    self.result.field_writes.setdefault((param, field_name), []).append(proof)
            elif alias.kind == "indirect":
                self.result.indirect.setdefault(param, []).append(proof)
            elif alias.kind in {"tensor", "pointer"}:
                self.result.add(param, proof)

    # --- what expressions refer to -------------------------------------------------------

    def _build_struct(self, node: Node, classes: list[ClassNode], args: list[Node]) -> bool:
        """`paged_kv_t<T> kv(n, k_ptr, v_ptr);`: the fields its constructor sets carry the
        pointers, like `params.k_ptr = ...` on a local struct."""
        var = declared_name(node.child_by_field_name("declarator"))
        if var is None:
            return False
        return self.struct_from(var, classes, [self.alias_of(arg) for arg in args])

    def struct_from(self, var: str, classes: list[ClassNode], args: list[Alias | None]) -> bool:
        """Local `var` built by a constructor of `classes` from arguments that are `args`."""
        built = next((c for c in classes if c.ctors), None)
        ctor = built.ctor_for(len(args)) if built is not None else None
        if built is None or ctor is None:
            return False
        self.struct_types[var] = built.name
        carried = {f: args[i] for f, i in ctor[1].items() if i < len(args)}
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
        self._carry(inner, node, args, aliases)

    def _carry(
        self,
        inner: FunctionWrites,
        node: Node,
        args: list[Node],
        aliases: list[Alias | None],
    ) -> None:
        """What a callee writes, carried to the arguments the caller handed it."""
        call_text = short(text_of(node), 60)
        for position, alias in enumerate(aliases):
            if alias is None or position >= len(args):
                continue
            if position in inner.writes and not alias.const:
                proof = strongest(inner.writes[position])
                kind = "mutating-call" if alias.kind == "tensor" else "kernel-store"
                self.evidence(
                    alias, kind, node, proof.confidence, f"{call_text} -> {proof.expression}"
                )
            if position in inner.indirect:
                proof = strongest(inner.indirect[position])
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
            if not 0 <= position < len(args):
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
            if position == THIS and self.fn.owner and same_object_call(node):
                self._member_flow(name, proofs, node, call_text)
            if not 0 <= position < len(args):
                continue
            holder = args[position]
            owner = aliases[position]
            proof = strongest(proofs)  # the callee's surest store through that field
            text = f"{call_text} -> {proof.expression}"
            if owner is not None and owner.kind == "struct":
                self.evidence(
                    Alias(owner.params, "pointer", field=name),
                    "field-store",
                    node,
                    proof.confidence,
                    text,
                )
            elif holder.type == "identifier":
                carried = self.structs.get(text_of(holder), {}).get(name)
                if carried is not None and not carried.const:
                    self.evidence(carried, "field-store", node, proof.confidence, text)

    def _member_flow(
        self, name: str, proofs: list[WriteEvidence], node: Node, call_text: str
    ) -> None:
        """A method of the same class writes through member `name`: whatever the caller's
        `name` holds (a parameter its constructor stored there, or its own member) is written."""
        carried = self.aliases.get(name)
        if carried is not None and not carried.const:
            proof = strongest(proofs)
            text = f"{call_text} -> {proof.expression}"
            self.evidence(carried, "field-store", node, proof.confidence, text)

    def lineage(self, name: str) -> list[ClassNode]:
        """The classes named `name` and those they derive from, nearest first."""
        found: list[ClassNode] = []
        queue, seen = [name], set[str]()
        while queue and len(seen) < _LINEAGE:
            current = queue.pop(0)
            if current in seen:
                continue
            seen.add(current)
            for cls in self.context.classes(current):
                found.append(cls)
                queue.extend(cls.bases)
        return found

    def method_of(self, name: str, method: str) -> FunctionNode | None:
        """`method` of class `name` or of the nearest class it derives from that has one
        (defined in the class body, or out of line as `Class::method`)."""
        lineage = self.lineage(name)
        for cls in lineage:
            if method in cls.methods:
                return cls.methods[method]
        owners = [cls.name for cls in lineage]
        defined = [f for f in self.context.functions(method) if f.owner in owners]
        defined.sort(key=lambda f: owners.index(f.owner))
        return defined[0] if defined else None

    def _analysecallee(self, name: str, arity: int) -> FunctionWrites | None:
        """Writes of the function or functor `name` (union over same-named definitions)."""
        if self.depth >= MAX_DEPTH:
            return None
        if name in self.local_fns:
            return self._analyse(self.local_fns[name])
        own = self.method_of(self.fn.owner, name) if self.fn.owner else None
        if own is not None and len(own.params) >= arity:  # `CopyOut(i)` in a method: this
            return self._analyse(own)  # class's (or its bases'), not any other's
        functors = [c for c in self.context.classes(name) if c.call is not None]
        if functors:
            return self._analyse_functor(functors[0], arity)
        reached = pick(self.context.functions(name), self.fn.path, self.context.reach)
        candidates = [c for c in reached if len(c.params) >= arity]
        exact = [c for c in candidates if len(c.params) == arity] or candidates
        return self.analyse_all(exact)

    def analyse_all(self, exact: list[FunctionNode]) -> FunctionWrites | None:
        """The union of what each of `exact` (same-named definitions) writes."""
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
            result = self.spawn(callee).run()
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
