"""Find op definitions, implementations, fake impls and call sites in Python sources (via `ast`)."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from soakgate.audit.model import (
    Confidence,
    ExtensionCall,
    ImplInfo,
    LiteralPiece,
    Location,
    OpDef,
    WriteEvidence,
)
from soakgate.audit.py_callers import FreshBuffer, fresh_buffers
from soakgate.audit.py_fakes import (
    FAKE_KEYS,
    FAKE_REGISTRARS,
    Env,
    indirect_fakes,
    string_constants,
    strings,
)
from soakgate.audit.py_flow import (
    DIRECT_LIBRARIES,
    DIRECT_REGISTRAR,
    DirectWrapper,
    PyTree,
    library_namespace,
    mentions_op_paths,
    op_called,
    op_namespaces,
    through_op_namespace,
)
from soakgate.audit.schema import SchemaSyntaxError, parse_schema

_STRING = re.compile(r"""([rRbBuUfF]*)("(?!"")|'(?!''))((?:\\.|(?!\2)[^\\\n])*)\2""")
_Adder = Callable[[str, str, ast.AST], None]
# Import roots that are not compiled extensions of the package (their calls are not followed).
_NOT_EXTENSIONS = frozenset(
    {"torch", "numpy", "triton", "math", "os", "sys", "typing", "functools", "itertools"}
)
REGISTRARS = FAKE_REGISTRARS | {"custom_op", "impl", "register_kernel", "define"}
DIRECT_PARAMS = ("op_name", "op_func", "mutates_args", "fake_impl", "target_lib")
"""vLLM's `direct_register_custom_op` (SGLang's has the same parameters), in order."""
_PY_TYPES = {"Tensor": "Tensor", "int": "SymInt", "float": "float", "bool": "bool", "str": "str"}


@dataclass(slots=True)
class PyFile:
    """Everything extracted from one Python source."""

    defs: list[OpDef] = field(default_factory=list)
    impls: list[tuple[str, ImplInfo]] = field(default_factory=list)
    """(op qualname or bare name with library namespace, analysed impl)."""
    fakes: set[str] = field(default_factory=set)
    """Qualified names of ops with a fake/meta impl here."""
    call_sites: dict[str, list[Location]] = field(default_factory=dict)
    """Op qualname -> calls whose return value is used."""
    buffers: list[FreshBuffer] = field(default_factory=list)
    """Op arguments that callers here fill with fresh, untouched `torch.empty` buffers."""


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call):
        return _dotted(node.func) + "()"
    return ""


def _last_name(node: ast.AST) -> str:
    """`register_custom_op` for `register_custom_op` and `utils.register_custom_op`."""
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _const_str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


class _Extractor(ast.NodeVisitor):
    """Single pass over a module's syntax tree."""

    def __init__(
        self,
        source: bytes,
        path: str,
        flow: PyTree | None = None,
        wrappers: Iterable[str] = (),
        direct_wrappers: Mapping[str, DirectWrapper] | None = None,
    ) -> None:
        self.source = source
        self.path = path
        self.flow = flow
        """The tree's Python, to follow an implementation's calls through (None: its body only)."""
        self.line_starts = [0]
        for index, byte in enumerate(source):
            if byte == 10:
                self.line_starts.append(index + 1)
        self.libraries: dict[str, str] = {}
        self.custom_ops: dict[str, str] = {}
        self.functions: dict[str, ast.FunctionDef] = {}
        self.out = PyFile()
        self.unused_calls: set[int] = set()
        self.op_modules: dict[str, str] = {}
        """Names this file binds to `torch.ops`, a namespace or an op (`op_namespaces`)."""
        self.constants: Env = {}
        """Module-level string constants, for op names built from them (`f"{NS}::op"`)."""
        self.modules: set[str] = set()
        """Names bound to imported modules that may be compiled extensions (`import ext as _C`)."""
        self.direct_namespace: str | None = None
        """The namespace `direct_register_custom_op` registers into when given no library:
        that of the package it was imported from, or of the module's own `Library`."""
        self.direct_wrappers = dict(direct_wrappers or {})
        """The tree's functions that register the function they are given through
        `direct_register_custom_op` (`PyTree.direct_wrappers`)."""
        self.enclosing: list[set[str]] = []
        """Parameters of the functions the visit is inside (innermost last)."""
        self.registrars: dict[str, str] = {name: "custom_op" for name in wrappers}
        """Local names bound to a torch.library registrar (`_op = torch.library.custom_op`), and
        the tree's own decorators that call `custom_op` with their argument (`@cute_op(...)`)."""

    def loc(self, node: ast.AST) -> Location:
        return Location(self.path, getattr(node, "lineno", 0))

    def pieces(self, node: ast.expr) -> tuple[LiteralPiece, ...]:
        """Source literals spelling a string constant; empty if any is not plainly fixable."""
        start = self.line_starts[node.lineno - 1] + node.col_offset
        end_line = node.end_lineno or node.lineno
        end = self.line_starts[end_line - 1] + (node.end_col_offset or 0)
        segment = self.source[start:end].decode()
        found = []
        for match in _STRING.finditer(segment):
            if match.group(1) or "\\" in match.group(3):
                return ()
            offset = start + len(segment[: match.start(3)].encode())
            found.append(LiteralPiece(self.path, offset, match.group(3)))
        return tuple(found)

    def span(self, node: ast.expr) -> LiteralPiece | None:
        """Where an expression is, as (byte offset, source text); None if any element is not a
        plain string constant (then it cannot be rewritten safely)."""
        elements = getattr(node, "elts", [])
        if any(_const_str(e) is None for e in elements):
            return None
        start = self.line_starts[node.lineno - 1] + node.col_offset
        end = self.line_starts[(node.end_lineno or node.lineno) - 1] + (node.end_col_offset or 0)
        return LiteralPiece(self.path, start, self.source[start:end].decode())

    def namespace_of(self, node: ast.AST) -> str | None:
        return self.libraries.get(_dotted(node))

    def visit_Module(self, node: ast.Module) -> None:
        for item in ast.walk(node):
            if isinstance(item, ast.FunctionDef):
                self.functions[item.name] = item
            if isinstance(item, ast.Expr) and isinstance(item.value, ast.Call):
                self.unused_calls.add(id(item.value))
            if isinstance(item, ast.Assign) and len(item.targets) == 1:
                self._note_registrar(item.targets[0], item.value)
                self._note_loaded_module(item.targets[0], item.value)
            if isinstance(item, ast.Import | ast.ImportFrom):
                self._note_module(item)
        if mentions_op_paths(self.source):
            parsed = self.flow.module(self.path) if self.flow is not None else None
            self.op_modules = parsed.op_modules if parsed is not None else op_namespaces(node)
        self.generic_visit(node)
        if self.op_modules or b"torch.ops" in self.source:  # else no call can reach an op
            self.out.buffers = fresh_buffers(node, self.path, self.op_called)

    def _note_loaded_module(self, target: ast.expr, value: ast.expr) -> None:
        """`_C = load(name=..., sources=...)` / `ext = Extension(...)` at module level: an
        object that may hold a compiled extension (its methods are looked up in pybind11)."""
        if isinstance(target, ast.Name) and isinstance(value, ast.Call):
            dotted = _dotted(value.func)
            if dotted.split(".")[0] not in _NOT_EXTENSIONS or "cpp_extension." in dotted:
                self.modules.add(target.id)

    def _note_module(self, item: ast.Import | ast.ImportFrom) -> None:
        root = (item.module or "").split(".")[0] if isinstance(item, ast.ImportFrom) else ""
        if any(alias.name == DIRECT_REGISTRAR for alias in item.names):
            self.direct_namespace = DIRECT_LIBRARIES.get(root, self.direct_namespace)
        for alias in item.names:
            source = root or alias.name.split(".")[0]
            if source not in _NOT_EXTENSIONS and alias.name != "*":
                self.modules.add(alias.asname or alias.name.split(".")[0])

    def _note_registrar(self, target: ast.expr, value: ast.expr) -> None:
        """`_custom_op = torch.library.custom_op` (often under a torch version check)."""
        name = _dotted(value).rsplit(".", 1)[-1]
        if isinstance(target, ast.Name) and name in REGISTRARS and _dotted(value) != target.id:
            self.registrars[target.id] = name

    def registrar_of(self, call: ast.Call) -> str:
        """What a registration call's callee is: `custom_op`, `register_fake`, `impl`, ..."""
        dotted = _dotted(call.func)
        return self.registrars.get(dotted, dotted.rsplit(".", 1)[-1])

    def visit_Assign(self, node: ast.Assign) -> None:
        namespace = library_namespace(node.value)
        if namespace is not None:
            for target in node.targets:
                self.libraries[_dotted(target)] = namespace
            if namespace in DIRECT_LIBRARIES.values() and self.direct_namespace is None:
                self.direct_namespace = namespace  # the module defines its own registrar
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        for decorator in node.decorator_list:
            wrapper = self.direct_wrappers.get(
                _last_name(decorator.func if isinstance(decorator, ast.Call) else decorator)
            )
            if wrapper is not None and self._hands_on(decorator):
                continue  # registers the function an enclosing decorator is given, not `node`
            if wrapper is not None:
                call = decorator if isinstance(decorator, ast.Call) else None
                self.wrapped_registration(call, node, self.path, wrapper)
            elif isinstance(decorator, ast.Call):
                self.registration(decorator, node)
            elif isinstance(decorator, ast.Attribute) and decorator.attr in FAKE_REGISTRARS:
                target = self.custom_ops.get(_dotted(decorator.value))
                if target:
                    self.out.fakes.add(target)
        arguments = node.args
        self.enclosing.append({a.arg for a in (*arguments.posonlyargs, *arguments.args)})
        self.generic_visit(node)
        self.enclosing.pop()

    def _hands_on(self, decorator: ast.expr) -> bool:
        """`@registrar(..., calling_func_=func)` inside `def decorator(func)`: the registrar is
        handed the enclosing function's argument (AITER's `compile_ops`), and registers that."""
        if not isinstance(decorator, ast.Call) or not self.enclosing:
            return False
        given = [*decorator.args, *(kw.value for kw in decorator.keywords)]
        names = set().union(*self.enclosing)
        return any(isinstance(a, ast.Name) and a.id in names for a in given)

    def visit_Call(self, node: ast.Call) -> None:
        method = self.registrar_of(node)
        if method == "define":
            self.define(node)
        elif method == DIRECT_REGISTRAR:
            self.direct_registration(node)
        elif (wrapper := self.direct_wrappers.get(_last_name(node.func))) and node.args:
            self.wrapped_call(node, wrapper)
        elif method in FAKE_REGISTRARS | {"impl"} and len(node.args) >= 2:
            fn = node.args[1]
            if isinstance(fn, ast.Name) and fn.id in self.functions:
                self.registration(node, self.functions[fn.id])
            elif any(_const_str(a) in FAKE_KEYS for a in node.args[2:]):
                qualname, _ = self.qualify(node)
                if qualname:
                    self.out.fakes.add(qualname)
        self.call_site(node)
        self.generic_visit(node)

    def qualify(self, call: ast.Call) -> tuple[str | None, list[ast.expr]]:
        """Qualified op name a registration call is about, and the arguments after it."""
        receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
        namespace = self.namespace_of(receiver) if receiver is not None else None
        for index, arg in enumerate(call.args[:2]):
            text = _const_str(arg)
            built = strings(arg, self.constants) if text is None else []
            text = built[0] if len(built) == 1 else text
            if text is None:
                namespace = namespace or self.namespace_of(arg)
                continue
            if "::" in text:
                return text, call.args[index + 1 :]
            return (f"{namespace}::{text}" if namespace else None), call.args[index + 1 :]
        return None, []

    def registration(self, call: ast.Call, fn: ast.FunctionDef) -> None:
        registrar = self.registrar_of(call)
        qualname, rest = self.qualify(call)
        if qualname is None:
            return
        if registrar == "custom_op":
            self.custom_op(call, fn, qualname)
            return
        keys = [s for a in rest if (s := _const_str(a))]
        keys += [s for kw in call.keywords if (s := _const_str(kw.value))]
        if registrar in FAKE_REGISTRARS or any(k in FAKE_KEYS for k in keys):
            self.out.fakes.add(qualname)
        elif registrar in {"impl", "register_kernel"}:
            key = keys[0] if keys else None
            info = analyse_python_impl(fn, self.path, key, self.modules, self.flow)
            self.out.impls.append((qualname, info))

    def define(self, call: ast.Call) -> None:
        receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
        namespace = self.namespace_of(receiver) if receiver is not None else None
        args = [a for a in call.args if _const_str(a) is not None]
        if not args:
            return
        prefix = ""
        if len(args) >= 2 and "::" in (_const_str(args[0]) or ""):
            prefix = (_const_str(args[0]) or "").split("::", 1)[1]
            namespace = (_const_str(args[0]) or "").split("::", 1)[0]
            args = args[1:]
        text = prefix + (_const_str(args[0]) or "")
        try:
            schema = parse_schema(text)
        except SchemaSyntaxError:
            return
        pieces = self.pieces(args[0])
        if prefix and pieces:
            pieces = (LiteralPiece(self.path, -1, prefix), *pieces)
        ns = schema.namespace or namespace or "?"
        qualname = f"{ns}::{schema.name}" + (f".{schema.overload}" if schema.overload else "")
        self.out.defs.append(OpDef(qualname, schema, self.loc(call), "python", None, pieces))

    def direct_registration(self, call: ast.Call) -> None:
        """vLLM's (and SGLang's) `direct_register_custom_op(op_name, op_func, mutates_args,
        fake_impl, target_lib, ...)`: `op_func` under `<namespace>::<op_name>`, its schema
        inferred as `custom_op` infers it, in `target_lib`'s namespace or the library's own
        (`vllm`, `sglang`: where the function was imported from)."""
        given = dict(zip(DIRECT_PARAMS, call.args, strict=False))
        given.update((kw.arg, kw.value) for kw in call.keywords if kw.arg in DIRECT_PARAMS)
        names = strings(given["op_name"], self.constants) if "op_name" in given else []
        fn = given.get("op_func")
        if len(names) != 1 or not isinstance(fn, ast.Name) or fn.id not in self.functions:
            return
        target = given.get("target_lib")
        namespace = self.namespace_of(target) if target is not None else None
        namespace = namespace or self.direct_namespace
        if namespace is None:
            return
        qualname = f"{namespace}::{names[0]}"
        self.custom_op(call, self.functions[fn.id], qualname, given.get("mutates_args"))
        if given.get("fake_impl") is not None:
            self.out.fakes.add(qualname)

    def wrapped_call(self, call: ast.Call, wrapper: DirectWrapper) -> None:
        """`f = register_custom_op(f, mutates_args=[...])`: `f` defined in this module or
        imported from one of the tree."""
        given = call.args[0]
        if not isinstance(given, ast.Name):
            return
        if given.id in self.functions:
            self.wrapped_registration(call, self.functions[given.id], self.path, wrapper)
        elif self.flow is not None and (found := self.flow.function(given.id, self.path)):
            self.wrapped_registration(call, found.node, found.path, wrapper)

    def wrapped_registration(
        self, call: ast.Call | None, fn: ast.FunctionDef, path: str, wrapper: DirectWrapper
    ) -> None:
        """`fn` registered by one of the tree's own registering functions: `<namespace>::`
        its `op_name=` (a string it can read) or else the function's name, with its
        `mutates_args=`."""
        keywords = {kw.arg: kw.value for kw in call.keywords if kw.arg} if call else {}
        at = wrapper.name_at
        if call is not None and at is not None and len(call.args) > at:
            keywords.setdefault("op_name", call.args[at])  # `@register_kernel("name", ...)`
        names = strings(keywords["op_name"], self.constants) if "op_name" in keywords else []
        if "op_name" in keywords and len(names) != 1:
            return
        qualname = f"{wrapper.namespace}::{names[0] if names else fn.name}"
        anchor = call if call is not None else fn
        mutates = keywords.get("mutates_args")
        if mutates is None and wrapper.unknown:
            mutates = ast.Constant("unknown")  # the registrar's default: every tensor written
        export = None
        if wrapper.export is not None:
            param, position = wrapper.export
            if call is not None and position is not None and len(call.args) > position:
                keywords.setdefault(param, call.args[position])
            given = strings(keywords[param], self.constants) if param in keywords else [fn.name]
            export = given[0] if len(given) == 1 else None
        self.custom_op(anchor, fn, qualname, mutates, path, export)
        if wrapper.fake or any(k in keywords for k in ("fake_impl", "out_shape")):
            self.out.fakes.add(qualname)

    def custom_op(
        self,
        call: ast.Call | ast.FunctionDef,
        fn: ast.FunctionDef,
        qualname: str,
        mutates: ast.expr | None = None,
        path: str | None = None,
        export: str | None = None,
    ) -> None:
        """`fn` registered as `qualname` by `torch.library.custom_op` or one of the registrars
        that infer its schema the same way (`fn` defined in `path`, this file by default;
        `export`: the registrar runs the compiled extension's function of that name with the
        op's arguments in order, `fn` being a typed stub)."""
        keywords = call.keywords if isinstance(call, ast.Call) else []
        if mutates is None:
            mutates = next((kw.value for kw in keywords if kw.arg == "mutates_args"), None)
        if isinstance(mutates, ast.Constant) and mutates.value == "unknown":
            written = {a.arg for a in fn.args.args}
        elif isinstance(mutates, ast.Tuple | ast.List | ast.Set):
            written = {s for e in mutates.elts if (s := _const_str(e))}
        else:
            written = set()
        name = qualname.split("::", 1)[1]
        given = next((kw.value for kw in keywords if kw.arg == "schema"), None)
        explicit = _const_str(given)  # `schema="(Tensor x, Tensor(a!) out) -> ()"`: torch's own
        text = name + explicit if explicit else custom_op_schema(name, fn, written)
        try:
            schema = parse_schema(text)
        except SchemaSyntaxError:
            return
        self.custom_ops[fn.name] = qualname
        literal = (
            self.span(mutates) if isinstance(mutates, ast.Tuple | ast.List | ast.Set) else None
        )
        pieces: tuple[LiteralPiece, ...] = ()
        if explicit and given is not None and (found := self.pieces(given)):
            # torch requires the schema's write annotations to match mutates_args: `--fix`
            # edits both (the name is not in the literal)
            pieces = (LiteralPiece(self.path, -1, name), *found)
        where = self.loc(fn) if path in (None, self.path) else self.loc(call)
        self.out.defs.append(
            OpDef(qualname, schema, where, "custom_op", pieces=pieces, mutates=literal)
        )
        info = analyse_python_impl(fn, path or self.path, None, self.modules, self.flow)
        if export:
            params = tuple(a.arg for a in (*fn.args.posonlyargs, *fn.args.args))
            where = Location(path or self.path, fn.lineno)
            info.extension_calls.append(
                ExtensionCall(export, params, (), where, f"{export}({', '.join(params)})")
            )
        self.out.impls.append((qualname, info))

    def op_called(self, call: ast.Call) -> str | None:
        """The op a call reaches through `torch.ops` (`ns::name` or `ns::name.overload`)."""
        return op_called(through_op_namespace(_dotted(call.func), self.op_modules))

    def call_site(self, call: ast.Call) -> None:
        qualname = self.op_called(call)
        if qualname is not None and id(call) not in self.unused_calls:
            self.out.call_sites.setdefault(qualname, []).append(self.loc(call))


def _annotation_type(node: ast.expr | None) -> str:
    """Schema type for a Python annotation, the way `torch.library.infer_schema` spells it."""
    text = ast.unparse(node) if node is not None else "Tensor"
    optional = text.startswith("Optional[") or text.endswith("| None")
    core = re.sub(r"^Optional\[(.*)\]$|^(.*?)\s*\|\s*None$", r"\1\2", text)
    is_list = core.lower().startswith(("list[", "sequence["))
    core = core.split("[", 1)[1].rstrip("]") if is_list else core
    base = _PY_TYPES.get(core.rsplit(".", 1)[-1], "Tensor")
    return base + ("[]" if is_list else "") + ("?" if optional else "")


def custom_op_schema(name: str, fn: ast.FunctionDef, written: set[str]) -> str:
    """The schema `torch.library.custom_op` would infer: written args get `(a1!)`, `(a2!)`, ..."""
    params = []
    for counter, arg in enumerate(fn.args.args, start=1):
        spec = _annotation_type(arg.annotation)
        if arg.arg in written:
            spec = spec.replace("Tensor", f"Tensor(a{counter}!)", 1)
        params.append(f"{spec} {arg.arg}")
    returns = fn.returns
    ret = "()" if returns is None or ast.unparse(returns) == "None" else _annotation_type(returns)
    return f"{name}({', '.join(params)}) -> {ret}"


_FAKE_MARKERS = (b"register_fake", b"impl_abstract", b"register_meta", b"impl(")
"""A module registers fakes indirectly only if it names a registrar (or an `impl`)."""
_PY_VIEWS = frozenset(
    {
        "view",
        "reshape",
        "view_as",
        "select",
        "narrow",
        "flatten",
        "t",
        "transpose",
        "permute",
        "squeeze",
        "unsqueeze",
        "expand",
        "as_strided",
    }
)


def _unused_params(fn: ast.FunctionDef) -> frozenset[str]:
    """Parameters the body never names (none when it forwards `*args`, `**kwargs`, `locals()`)."""
    args = fn.args
    if args.vararg is not None or args.kwarg is not None:
        return frozenset()
    read = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    if read & {"locals", "vars"}:
        return frozenset()
    names = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
    return frozenset(names - read)


def analyse_python_impl(
    fn: ast.FunctionDef,
    path: str,
    key: str | None,
    modules: Iterable[str] = (),
    flow: PyTree | None = None,
) -> ImplInfo:
    """Parameters a Python implementation writes (`x.add_()`, `out[...] =`, `out=`) or returns;
    with `flow`, also through the functions, kernel objects and Python-DSL kernels of the tree
    it calls (`py_flow`)."""
    params = {a.arg: a.arg for a in fn.args.args}
    info = ImplInfo(fn.name, key, Location(path, fn.lineno))
    info.unused = _unused_params(fn)

    def add(param: str, kind: str, node: ast.AST) -> None:
        expression = ast.unparse(node)[:100]
        where = Location(path, getattr(node, "lineno", fn.lineno))
        info.writes.append(WriteEvidence(param, kind, expression, where, Confidence.HIGH))

    loaders = flow.jit_loaders(path) if flow is not None else {}
    compiled: dict[str, dict[str, str]] = {}  # locals holding a module compiled at run time
    for node in ast.walk(fn) if loaders else ():
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            loader = loaders.get(_dotted(node.value.func))
            for target in node.targets if loader else ():
                if isinstance(target, ast.Name):
                    compiled[target.id] = loader or {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            func = node.value.func
            if isinstance(func, ast.Attribute) and func.attr in _PY_VIEWS:
                root = _root_name(func.value)
                for target in node.targets:
                    if root in params and isinstance(target, ast.Name):
                        params[target.id] = params[root]
        targets = node.targets if isinstance(node, ast.Assign) else []
        targets = [node.target] if isinstance(node, ast.AugAssign) else targets
        for target in targets:
            root = _root_name(target)
            if root in params and (
                isinstance(target, ast.Subscript) or isinstance(node, ast.AugAssign)
            ):
                add(params[root], "store", node)
        if isinstance(node, ast.Call):
            _python_call(node, params, add)
            _extension_call(node, params, set(modules), info, compiled)
        if isinstance(node, ast.Return) and node.value is not None:
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            for position, value in enumerate(values):
                if isinstance(value, ast.Name) and value.id in params:
                    info.returned_params[position] = params[value.id]
                    add(params[value.id], "returns-param", node)
    if flow is not None:
        info.op_calls = flow.op_calls_at(path, fn.lineno)
        seen = {w.param for w in info.writes if w.kind != "returns-param"}
        for param, how in flow.writes_at(path, fn.lineno).items():
            if param not in seen:
                where = Location(path, fn.lineno)
                info.writes.append(
                    WriteEvidence(param, "python-call", how, where, Confidence.MEDIUM)
                )
    return info


def _root_name(node: ast.AST) -> str:
    """The name an expression's storage belongs to, through indexing, attributes and views
    (`x[0]`, `x.view(-1)`, `x.narrow(0, 1, 2)[0]`): an in-place method on it writes that name."""
    while True:
        if isinstance(node, ast.Subscript | ast.Attribute):
            node = node.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _PY_VIEWS
        ):
            node = node.func.value
        else:
            return node.id if isinstance(node, ast.Name) else ""


def _python_call(node: ast.Call, params: dict[str, str], add: _Adder) -> None:
    func = node.func
    if (
        isinstance(func, ast.Attribute)
        and func.attr.endswith("_")
        and not func.attr.startswith("_")
    ):
        root = _root_name(func.value)
        if root in params and func.attr not in {"requires_grad_", "unsqueeze_", "squeeze_", "t_"}:
            add(params[root], "inplace-method", node)
    for keyword in node.keywords:
        if (
            keyword.arg == "out"
            and isinstance(keyword.value, ast.Name)
            and keyword.value.id in params
        ):
            add(params[keyword.value.id], "out-call", node)


def _extension_call(
    call: ast.Call,
    params: dict[str, str],
    modules: set[str],
    info: ImplInfo,
    compiled: Mapping[str, Mapping[str, str]] | None = None,
) -> None:
    """`_ext.fwd(q, k, out)` on an imported module, or on a module-level object that holds
    one (`ext.lib.fwd(...)`, `ext = Extension(...)`): followed into C++ by `scan` (pybind11);
    or on a local holding a module compiled at run time from the tree's sources (`compiled`:
    local -> {export: C++ function}), followed into the C++ function it exports. Tensors pass
    as the parameters or views of them (`out.view(-1)`)."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return
    root = func.value
    while isinstance(root, ast.Attribute):
        root = root.value
    if not isinstance(root, ast.Name) or root.id in params:
        return
    exported = (compiled or {}).get(root.id)
    if root.id not in modules and exported is None:
        return
    target = exported.get(func.attr, "") if exported is not None else ""
    if exported is not None and not target:
        return

    def passed(node: ast.expr) -> str | None:
        name = node.id if isinstance(node, ast.Name) else _viewed(node) if exported else ""
        return params.get(name) if name else None

    args = tuple(passed(a) for a in call.args)
    keywords = tuple(
        (k.arg, found) for k in call.keywords if k.arg and (found := passed(k.value)) is not None
    )
    if any(args) or keywords:
        where = Location(info.location.path, call.lineno)
        expression = ast.unparse(call)[:100]
        info.extension_calls.append(
            ExtensionCall(func.attr, args, keywords, where, expression, target)
        )


def _viewed(node: ast.expr) -> str:
    """The name a chain of views is of (`out.view(-1)`, `x.flatten()`), else empty."""
    while (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in _PY_VIEWS
    ):
        node = node.func.value
    return node.id if isinstance(node, ast.Name) else ""


def extract_python(
    source: bytes,
    path: str,
    flow: PyTree | None = None,
    wrappers: Iterable[str] = (),
    direct_wrappers: Mapping[str, DirectWrapper] | None = None,
) -> PyFile:
    """Op definitions, impls, fake registrations and call sites of one Python source (`flow`:
    the tree's Python, followed from each implementation; `wrappers`: the tree's decorators
    that register a custom op; `direct_wrappers`: its functions that register one through
    `direct_register_custom_op`)."""
    parsed = flow.module(path) if flow is not None else None  # the tree's parse, not a second
    try:
        tree = parsed.tree if parsed is not None else ast.parse(source, filename=path)
    except (SyntaxError, ValueError):
        return PyFile()
    extractor = _Extractor(source, path, flow, wrappers, direct_wrappers)
    extractor.constants = string_constants(tree)
    extractor.visit(tree)
    if any(marker in source for marker in _FAKE_MARKERS):
        extractor.out.fakes |= indirect_fakes(tree, extractor.libraries)
    return extractor.out
