"""A Python op's writes followed through the tree's own Python: the helpers its body calls, the
methods of the kernel objects it builds, and kernels written in Python DSLs that store into
the tensors it hands them.

Kernel libraries written in Python (CuTe DSL, Triton) rarely write in the op's body. The body
calls a launcher (`_launch(x, out)`), which calls a compiled kernel (`K.compile(...)(x, out)`,
where `compile` returns `cute.compile(K(...), ...)`), whose `__call__` launches a method
(`self.kernel(mX, mO).launch(...)`), which tiles and partitions its tensors and copies a
fragment into one of them (`cute.copy(atom, tXrO, tXgO)`). Each step is followed here:

- calls are resolved by what the calling module binds: a function of the same module, a name
  it imports from a module of the tree (`from pkg.m import f`, `import pkg.m as m; m.f`), a
  method of the class a method belongs to (`self.f`, through base classes of the tree), a
  class's static method (`K.compile`), a `functools.partial` bound to a local, the class a
  compiled callable was built from; only where none of these names it, the one function of that
  name in the tree;
- arguments bind to parameters (positions, keywords, a partial's keywords; `self` skipped for
  bound calls);
- a local takes the parameters of what it is computed from: views and slices, and any call that
  is not known to allocate (`cute.local_tile(mO, ...)`, `thr.partition_D(gO)`), elementwise
  through `a, b = [f(t) for t in (x, y)]`; a call to a function of the tree takes what that
  function returns; allocations (`make_rmem_tensor_like`, `torch.empty_like`, `.load()`, torch
  functions) take nothing;
- writes: a store into a subscript or an augmented assignment, an in-place method (`x.add_()`),
  `out=`, a CuTe copy's destination (`cute.copy(atom, src, dst)`, `cute.autovec_copy(src, dst)`:
  the last positional argument), `t.store(v)`, Triton's `tl.store(ptr, ...)` and atomics, and
  what a called function of the tree writes through the parameters the call binds.

Flow-insensitive (every assignment of a function at once) and bounded in depth. Written by hand:
no library models what Python code writes through its arguments without running it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from soakgate.audit.model import Location, OpCall

MAX_DEPTH = 10
# Calls whose result is new storage, never a view of their arguments.
ALLOCATORS = frozenset(
    {
        "make_fragment", "make_fragment_like", "make_rmem_tensor", "make_rmem_tensor_like",
        "allocate_tensor", "allocate_array", "make_identity_tensor", "empty", "empty_like",
        "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "clone",
        "load", "to", "float", "half", "bfloat16", "double", "int", "long", "new_empty",
        "new_zeros", "new_ones", "new_full", "copy", "deepcopy", "len", "isinstance", "tuple",
        "max", "min", "sum", "size", "numel", "dim", "stride", "item", "tolist", "cat", "stack",
    }
)  # fmt: skip
# CuTe DSL / cutlass numeric types: `Int32(mCuSeqlens[b])` is a scalar value, not storage.
NUMBERS = frozenset(
    {
        "Int8", "Int16", "Int32", "Int64", "Uint8", "Uint16", "Uint32", "Uint64", "Float16",
        "BFloat16", "Float32", "Float64", "TFloat32", "Boolean", "Float8E4M3FN", "Float8E5M2",
    }
)  # fmt: skip
# A tensor's attributes that describe it: numbers, not storage (`x_ptr + D` where `D =
# x.shape[1]` is an offset from x_ptr, not a pointer into x).
METADATA = frozenset(
    {
        "shape", "dtype", "device", "ndim", "element_type", "layout", "is_cuda", "itemsize",
        "nbytes", "requires_grad", "width", "is_contiguous", "names", "memspace",
    }
)  # fmt: skip
# Methods that return a view of their receiver (or the receiver itself).
VIEWS = frozenset(
    {
        "view", "reshape", "view_as", "select", "narrow", "flatten", "unflatten", "t",
        "transpose", "permute", "squeeze", "unsqueeze", "expand", "expand_as", "as_strided",
        "contiguous", "chunk", "split", "unbind", "movedim", "diagonal", "detach", "mT", "T",
        "real", "imag", "__getitem__", "iterator",
    }
)  # fmt: skip
# Modules whose functions return new tensors (or no tensors at all).
FRESH_MODULES = frozenset({"torch", "F", "np", "numpy", "math", "operator", "functools"})
TUPLE_RESULTS = {"tma_partition": (3, 4)}
"""CuTe calls returning a tuple of partitions, each of one argument: `cpasync.tma_partition(atom,
coord, layout, smem, gmem)` returns (smem partition, gmem partition)."""
DSLS = frozenset({"triton", "cute", "cutlass"})
"""Modules whose decorators make a kernel of a Python DSL (`@triton.jit`, `@cute.kernel`)."""
DSL_MODULES = DSLS | {"tl", "cpasync"}
"""Names a DSL's functions are called through (`tl.load`, `cpasync.tma_partition`)."""
CUTE_COPIES = frozenset({"copy", "autovec_copy", "basic_copy", "basic_copy_if", "copy_if"})
"""CuTe DSL copies: the destination is the last positional argument."""
NOT_WRITES = frozenset({"requires_grad_", "unsqueeze_", "squeeze_", "t_", "transpose_"})
COLLECTIVES = {
    **dict.fromkeys(("all_reduce", "broadcast", "reduce", "recv", "irecv", "scatter"), "tensor"),
    "all_gather": "tensor_list",
    "all_gather_into_tensor": "output_tensor",
    **dict.fromkeys(("reduce_scatter", "reduce_scatter_tensor", "all_to_all_single"), "output"),
    "all_to_all": "output_tensor_list",
}
"""`torch.distributed` collectives -> the keyword of the argument each fills, always its first,
by their documented contract: `all_reduce(t)` reduces into `t`, `all_gather_into_tensor(out, x)`
fills `out`."""
TRITON_STORES = frozenset(
    {"store", "atomic_add", "atomic_max", "atomic_min", "atomic_cas", "atomic_xchg",
     "atomic_and", "atomic_or", "atomic_xor"}
)  # fmt: skip
_DEFINED = re.compile(rb"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+(\w+)", re.M)
Aliases = dict[str, frozenset[str]]
_Analysis = tuple[dict[str, str], frozenset[str], list[OpCall]]
"""A function's writes (parameter -> how), the parameters it may return, the ops it calls."""
Flags = frozenset[tuple[str, bool]]
"""A function's parameters a call passes a constant `True` / `False`."""
_Add = Callable[[frozenset[str], "ast.AST | str"], None]
_COMPREHENSIONS = (ast.ListComp, ast.GeneratorExp, ast.SetComp)
_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


@dataclass(frozen=True, slots=True)
class Function:
    """A function of the tree, with the class it is a method of (if any) and its file."""

    node: ast.FunctionDef
    path: str
    owner: ast.ClassDef | None = None

    @property
    def params(self) -> list[str]:
        args = self.node.args
        return [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]


@dataclass(slots=True)
class _Module:
    tree: ast.Module
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    imported: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Local name -> (module dotted name, attribute or "" for a module itself)."""
    op_modules: dict[str, str] = field(default_factory=dict)
    """Names the file binds to a `torch.ops` path (`ops = torch.ops._C` -> `torch.ops._C`)."""


DIRECT_REGISTRAR = "direct_register_custom_op"
DIRECT_LIBRARIES = {"vllm": "vllm", "sglang": "sglang"}
"""Where `direct_register_custom_op` is imported from -> the namespace it registers into."""


@dataclass(frozen=True, slots=True)
class DirectWrapper:
    """A function of the tree that registers its argument through `direct_register_custom_op`."""

    namespace: str
    """Where its ops go (the registrar's package, or its module's own `Library`)."""
    fake: bool
    """It always hands the registrar a fake implementation."""
    name_at: int | None = None
    """The position of its `op_name` parameter, where it can be passed by position
    (`@register_kernel("name", ...)`)."""
    unknown: bool = False
    """Given no `mutates_args`, its registrar declares every argument written (a default of
    `"unknown"`, as `torch.library.infer_schema` reads it)."""
    export: tuple[str, int | None] | None = None
    """The op runs the function of a compiled extension named like the decorated function
    (AITER's `compile_ops`: `getattr(module, name)(*args, **kwargs)`), with the op's arguments
    in order; unless its parameter here (`fc_name`, and its position) names another."""


def _direct_namespace(tree: ast.Module) -> str | None:
    """The namespace a module's `direct_register_custom_op` registers into: that of the package
    it imports the registrar from (also inside a function), or of the module's own `Library`
    when it defines the registrar itself."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == DIRECT_REGISTRAR for a in node.names):
            root = (node.module or "").split(".")[0]
            if root in DIRECT_LIBRARIES:
                return DIRECT_LIBRARIES[root]
    defines = any(
        isinstance(item, ast.FunctionDef) and item.name == DIRECT_REGISTRAR for item in tree.body
    )
    own = [ns for ns in _libraries(tree).values() if ns in DIRECT_LIBRARIES.values()]
    return own[0] if defines and own else None


def _cpp_name(node: ast.expr) -> str:
    """`RMSNormKernel::run` for `f"RMSNormKernel<{args}>::run"` (or a plain string naming a C++
    function); empty when the text is not one."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value
    elif isinstance(node, ast.JoinedStr):
        text = "".join(str(v.value) if isinstance(v, ast.Constant) else "" for v in node.values)
    else:
        return ""
    while "<" in text and ">" in text:
        start = text.index("<")
        depth, end = 0, start
        for end in range(start, len(text)):
            depth += {"<": 1, ">": -1}.get(text[end], 0)
            if depth == 0:
                break
        text = text[:start] + text[end + 1 :]
    return text if re.fullmatch(r"[A-Za-z_]\w*(::[A-Za-z_]\w*)*", text) else ""


_FAKE_CALLS = frozenset({"_register_fake", "register_fake", "impl_abstract"})
_STACK_DEPTH = 3  # a registrar applied by a decorator applied by a decorator ...


def library_namespace(node: ast.AST) -> str | None:
    """The namespace a `Library("ns", ...)` call builds; None for anything else."""
    if (
        isinstance(node, ast.Call)
        and _dotted(node.func).endswith("Library")
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        return node.args[0].value
    return None


def _library_namespaces(tree: ast.Module) -> set[str]:
    """Namespaces of every `Library("ns", ...)` the module builds (also inside a function)."""
    return {ns for node in ast.walk(tree) if (ns := library_namespace(node)) is not None}


def _default_of(node: ast.FunctionDef, name: str) -> ast.expr | None:
    """The default of parameter `name` (an `ast.Constant(None)` where it has none), or None
    when the function does not take it."""
    positional = [*node.args.posonlyargs, *node.args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(node.args.defaults))
    pairs = [*zip(positional, [*defaults, *node.args.defaults], strict=True)]
    pairs += zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True)
    for arg, default in pairs:
        if arg.arg == name:
            return default if default is not None else ast.Constant(None)
    return None


def _stacked(node: ast.FunctionDef, found: Mapping[str, DirectWrapper]) -> DirectWrapper | None:
    """`node` as a decorator factory over one of `found`: a nested `def decorator(func)` in
    which a registrar of `found` is applied with `func` among its arguments (a decorator
    `@registrar(..., calling_func_=func)` on a function nested in it, or a call)."""
    for inner in ast.walk(node):
        if inner is node or not isinstance(inner, ast.FunctionDef) or len(inner.args.args) != 1:
            continue
        func = inner.args.args[0].arg
        for call in ast.walk(inner):
            if not isinstance(call, ast.Call) or (base := found.get(_last(call.func))) is None:
                continue
            given = [*call.args, *(kw.value for kw in call.keywords)]
            if not any(isinstance(a, ast.Name) and a.id == func for a in given):
                continue
            declares = any(kw.arg == "mutates_args" for kw in call.keywords)
            unknown = base.unknown and not declares
            return DirectWrapper(base.namespace, base.fake, None, unknown, _export(node, func))
    return None


def _export(node: ast.FunctionDef, func: str) -> tuple[str, int | None] | None:
    """Whether the factory runs, with the arguments it is given, a module's function looked up
    by the decorated function's name (`op = getattr(module, load_name)`; `op(*args)`), and its
    parameter that names another (`load_name = fc_name`), with that parameter's position."""
    params = [a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)]
    sources: dict[str, list[ast.expr]] = {}
    for item in ast.walk(node):
        if isinstance(item, ast.Assign) and len(item.targets) == 1:
            target = item.targets[0]
            if isinstance(target, ast.Name):
                sources.setdefault(target.id, []).append(item.value)
    looked_up: set[str] = set()
    override: str | None = None
    for name, values in sources.items():
        for value in values:
            if not (
                isinstance(value, ast.Call)
                and _last(value.func) == "getattr"
                and len(value.args) == 2
                and isinstance(value.args[1], ast.Name)
            ):
                continue
            origins = sources.get(value.args[1].id, [])
            by_name = any(
                isinstance(o, ast.Attribute) and o.attr == "__name__" and _last(o.value) == func
                for o in origins
            )
            if by_name:
                looked_up.add(name)
                named = [o.id for o in origins if isinstance(o, ast.Name) and o.id in params]
                override = named[0] if named else override
    runs = any(
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Name)
        and call.func.id in looked_up
        and any(isinstance(a, ast.Starred) for a in call.args)
        for call in ast.walk(node)
    )
    if not runs:
        return None
    positional = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
    if override is None:
        return ("", None)
    return (override, positional.index(override) if override in positional else None)


def _libraries(tree: ast.Module) -> dict[str, str]:
    """Module-level names bound to `Library("ns", ...)`: name -> namespace."""
    found = {}
    for item in tree.body:
        if (
            isinstance(item, ast.Assign)
            and len(item.targets) == 1
            and isinstance(item.targets[0], ast.Name)
            and (namespace := library_namespace(item.value)) is not None
        ):
            found[item.targets[0].id] = namespace
    return found


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return node.id if isinstance(node, ast.Name) else ""


def _last(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _root(node: ast.AST) -> ast.AST:
    while isinstance(node, ast.Attribute | ast.Subscript | ast.Starred):
        node = node.value
    return node


class PyTree:
    """Every Python file of the tree, parsed when first needed, for following calls."""

    def __init__(self, contents: Mapping[str, bytes]) -> None:
        self._sources = {p: d for p, d in contents.items() if p.endswith(".py")}
        self._modules: dict[str, _Module | None] = {}
        self._defined: dict[str, list[str]] | None = None
        self._tails: dict[str, list[str]] | None = None
        """Module path tails (`pkg/m`, `m`) -> files, for resolving imports."""
        self._analysed: dict[tuple[int, Flags], _Analysis] = {}
        """(function node, flags) -> (parameters it writes and how, parameters it may return,
        ops it calls)."""
        self._active: set[int] = set()
        self._unique_methods: dict[str, Function | None] = {}
        self._steering: dict[int, frozenset[str]] = {}

    # --- modules and names -------------------------------------------------------------------

    def module(self, path: str) -> _Module | None:
        """The file's parse (None: not a Python file of the tree, or not Python at all)."""
        if path not in self._sources:
            return None
        if path not in self._modules:
            self._modules[path] = _parse(self._sources.get(path, b""), path)
        return self._modules[path]

    def _paths_defining(self, name: str) -> list[str]:
        if self._defined is None:
            self._defined = {}
            for path, data in self._sources.items():
                for match in _DEFINED.finditer(data):
                    self._defined.setdefault(match.group(1).decode(), []).append(path)
        return self._defined.get(name, [])

    def _module_path(self, dotted: str, near: str) -> str | None:
        """The tree's file for a module name (`pkg.sub`), relative ones resolved from `near`."""
        level = len(dotted) - len(dotted.lstrip("."))
        parts = [p for p in dotted.lstrip(".").split(".") if p]
        if self._tails is None:
            self._tails = {}
            for path in self._sources:
                pieces = ("/" + path.lstrip("/")).removesuffix(".py").split("/")
                if pieces[-1] == "__init__":
                    pieces.pop()
                for start in range(1, len(pieces)):  # every tail: `m`, `pkg/m`, `src/pkg/m`
                    self._tails.setdefault("/".join(pieces[start:]), []).append(path)
        if level:
            base = ("/" + near.lstrip("/")).rsplit("/", level)[0]
            wanted = "/".join([base, *parts])
            found = [
                p
                for p in self._tails.get("/".join(parts), [])
                if ("/" + p.lstrip("/")).removesuffix(".py").removesuffix("/__init__") == wanted
            ]
            return found[0] if found else None
        found = self._tails.get("/".join(parts), []) if parts else []
        return found[0] if found else None

    def _lookup(
        self, name: str, path: str, want: str, depth: int = 0
    ) -> tuple[str, ast.AST] | None:
        """A function (`want="def"`) or class (`"class"`) bound to `name` in the module at
        `path`: defined there, or imported from a module of the tree."""
        module = self.module(path)
        if module is None or depth > 4:
            return None
        table = module.functions if want == "def" else module.classes
        if name in table:
            return path, table[name]
        if name in module.imported:
            source, attribute = module.imported[name]
            target = self._module_path(source, path)
            if target is not None and attribute:
                return self._lookup(attribute, target, want, depth + 1)
        return None

    def _unique(self, name: str, want: str) -> tuple[str, ast.AST] | None:
        """The only module-level function or class of that name in the tree."""
        found = []
        for path in self._paths_defining(name):
            module = self.module(path)
            table = (module.functions if want == "def" else module.classes) if module else {}
            if name in table:
                found.append((path, table[name]))
        return found[0] if len(found) == 1 else None

    def function(self, name: str, path: str) -> Function | None:
        found = self._lookup(name, path, "def") or self._unique(name, "def")
        if found is None or not isinstance(found[1], ast.FunctionDef):
            return None
        return Function(found[1], found[0])

    def klass(self, name: str, path: str) -> tuple[str, ast.ClassDef] | None:
        found = self._lookup(name, path, "class") or self._unique(name, "class")
        if found is None or not isinstance(found[1], ast.ClassDef):
            return None
        return found[0], found[1]

    def steering(self, fn: Function) -> frozenset[str]:
        """Parameters of `fn` a settled flag can matter for: tested by an `if` of its own, or
        handed on to a call (only these key a separate analysis)."""
        key = id(fn.node)
        if key not in self._steering:
            names: set[str] = set()
            for node in _own_nodes(fn.node):
                if isinstance(node, ast.If):
                    names.update(n.id for n in ast.walk(node.test) if isinstance(n, ast.Name))
                elif isinstance(node, ast.Call):
                    passed = [*node.args, *(k.value for k in node.keywords)]
                    names.update(a.id for a in passed if isinstance(a, ast.Name))
            self._steering[key] = frozenset(names) & frozenset(fn.params)
        return self._steering[key]

    def unique_method(self, name: str) -> Function | None:
        """The method `name` where exactly one class of the tree defines a method of that name
        (and no module-level function has it): `group._all_reduce_in_place(t)` on an object
        looked up at run time (`group = _groups[name]()`) runs GroupCoordinator's."""
        if name not in self._unique_methods:
            found: list[Function] = []
            rivals = 0  # module-level functions of that name (or files that do not parse)
            sites = self._paths_defining(name)  # one per `def`/`class` of that name
            for path in sites if len(sites) == 1 else ():
                module = self.module(path)
                if module is None or name in module.functions:
                    rivals += 1
                    continue
                for node in ast.walk(module.tree):
                    if isinstance(node, ast.ClassDef):
                        found.extend(
                            Function(item, path, node)
                            for item in node.body
                            if isinstance(item, ast.FunctionDef) and item.name == name
                        )
            self._unique_methods[name] = found[0] if len(found) == 1 and not rivals else None
        return self._unique_methods[name]

    def method(self, owner: tuple[str, ast.ClassDef], name: str, depth: int = 0) -> Function | None:
        """`name` on a class of the tree, or inherited from one of its bases in the tree."""
        path, cls = owner
        for item in cls.body:
            if isinstance(item, ast.FunctionDef) and item.name == name:
                return Function(item, path, cls)
        if depth > 6:
            return None
        for base in cls.bases:
            found = self.klass(_last(base), path) if _last(base) else None
            if found is not None and found[1] is not cls:
                method = self.method(found, name, depth + 1)
                if method is not None:
                    return method
        return None

    def module_function(self, module_name: str, attribute: str, path: str) -> Function | None:
        """`m.f` where `m` names a module the file at `path` imports."""
        module = self.module(path)
        if module is None or module_name not in module.imported:
            return None
        source, name = module.imported[module_name]
        dotted = f"{source}.{name}" if name else source
        target = self._module_path(dotted, path)
        if target is None:
            return None
        found = self._lookup(attribute, target, "def")
        return (
            Function(found[1], found[0])
            if found and isinstance(found[1], ast.FunctionDef)
            else None
        )

    def registrar_wrappers(self) -> frozenset[str]:
        """Functions of the tree that register their argument as a custom op: a decorator
        factory whose body calls `torch.library.custom_op(name, fn, ...)` with `name` one of its
        own parameters (`def cute_op(name, *, mutates_args, schema=None)`)."""
        found = set()
        for path, data in self._sources.items():
            module = self.module(path) if b"custom_op(" in data else None
            for node in ast.walk(module.tree) if module is not None else ():
                if not isinstance(node, ast.FunctionDef):
                    continue
                params = {a.arg for a in (*node.args.posonlyargs, *node.args.args)}
                for inner in _own_nodes(node):
                    if (
                        isinstance(inner, ast.Call)
                        and _last(inner.func) == "custom_op"
                        and inner.args
                        and isinstance(inner.args[0], ast.Name)
                        and inner.args[0].id in params
                    ):
                        found.add(node.name)
        return frozenset(found)

    def direct_wrappers(self) -> dict[str, DirectWrapper]:
        """Functions of the tree that register the function they are given as a custom op
        through `direct_register_custom_op`, named by their `op_name=` or else the function's
        own name, declaring their `mutates_args=` (SGLang's `register_custom_op`, used as
        `@register_custom_op(mutates_args=[...])` or `f = register_custom_op(f, ...)`): a
        function taking `mutates_args` whose body, a function nested in it, or a method of a
        class of its module it instantiates calls the registrar. Name -> where it registers."""
        found: dict[str, DirectWrapper] = {}
        for path, data in self._sources.items():
            module = self.module(path) if DIRECT_REGISTRAR.encode() in data else None
            namespace = _direct_namespace(module.tree) if module is not None else None
            if module is None or namespace is None:
                continue
            libraries = _libraries(module.tree)
            for name, node in module.functions.items():
                takes = {a.arg for a in (*node.args.args, *node.args.kwonlyargs)}
                if name == DIRECT_REGISTRAR or "mutates_args" not in takes:
                    continue
                reached: list[ast.AST] = [node]
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Call) and _last(inner.func) in module.classes:
                        reached.append(module.classes[_last(inner.func)])
                calls = [
                    inner
                    for root in reached
                    for inner in ast.walk(root)
                    if isinstance(inner, ast.Call) and _last(inner.func) == DIRECT_REGISTRAR
                ]
                positional = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
                at = positional.index("op_name") if "op_name" in positional else None
                for call in calls:
                    given = {kw.arg: kw.value for kw in call.keywords if kw.arg}
                    target = given.get("target_lib")
                    # a library named at the call (`target_lib=vllm_helion_lib`) is where the
                    # op goes; one this module does not define is not guessed
                    where = namespace if target is None else libraries.get(_last(target))
                    fake = "fake_impl" in given and not _is_none(given["fake_impl"])
                    if where is not None:
                        found[name] = DirectWrapper(where, fake, at)
        found.update(self._defining_wrappers())
        self._stacked_wrappers(found)
        return found

    def _defining_wrappers(self) -> dict[str, DirectWrapper]:
        """Functions taking `mutates_args` that define an op named after a function on their
        module's `Library` (AITER's `torch_compile_guard`: `lib.define(f"aiter::{name}" +
        schema)`, `name = calling_func.__name__`, the schema inferred from its signature)."""
        found: dict[str, DirectWrapper] = {}
        for path, data in self._sources.items():
            if b".define(" not in data or b"__name__" not in data or b"Library(" not in data:
                continue
            module = self.module(path)
            spaces = _library_namespaces(module.tree) if module is not None else set()
            if module is None or len(spaces) != 1:
                continue
            for name, node in module.functions.items():
                default = _default_of(node, "mutates_args")
                if default is None or name == DIRECT_REGISTRAR:  # that one is read as itself
                    continue
                calls = [c for c in ast.walk(node) if isinstance(c, ast.Call)]
                if any(
                    _last(c.func) == "define" and c.args and not isinstance(c.args[0], ast.Constant)
                    for c in calls
                ) and any(
                    isinstance(a, ast.Attribute) and a.attr == "__name__" for a in ast.walk(node)
                ):
                    fake = any(_last(c.func) in _FAKE_CALLS for c in calls)
                    unknown = isinstance(default, ast.Constant) and default.value == "unknown"
                    found[name] = DirectWrapper(next(iter(spaces)), fake, None, unknown)
        return found

    def _stacked_wrappers(self, found: dict[str, DirectWrapper]) -> None:
        """Add decorator factories that apply one of `found` to the function they decorate
        (AITER's `compile_ops`: `@torch_compile_guard(..., calling_func_=func)` on a nested
        wrapper): they register that function as well, in the same namespace."""
        for _ in range(_STACK_DEPTH):
            added = False
            names = [n.encode() for n in found]
            for path, data in self._sources.items():
                if not any(n in data for n in names):
                    continue
                module = self.module(path)
                for name, node in module.functions.items() if module is not None else ():
                    if name not in found and (wrapper := _stacked(node, found)) is not None:
                        found[name] = wrapper
                        added = True
            if not added:
                return

    def jit_loaders(self, path: str) -> dict[str, dict[str, str]]:
        """Functions of a file that return a module compiled at run time from the tree's
        sources, with the C++ function each exported name runs (SGLang's `return load_jit(...,
        cuda_wrappers=[("rmsnorm", f"RMSNormKernel<{args}>::run")])`): a `return` of a call to
        a `load*` function holding (export name, C++ name) string pairs. Function -> {export:
        C++ name, template arguments dropped}."""
        module = self.module(path)
        found: dict[str, dict[str, str]] = {}
        for name, node in module.functions.items() if module is not None else ():
            for inner in _own_nodes(node):
                if not (
                    isinstance(inner, ast.Return)
                    and isinstance(inner.value, ast.Call)
                    and _last(inner.value.func).startswith("load")
                ):
                    continue
                exported = {
                    pair.elts[0].value: target
                    for pair in ast.walk(inner.value)
                    if isinstance(pair, ast.Tuple)
                    and len(pair.elts) == 2
                    and isinstance(pair.elts[0], ast.Constant)
                    and isinstance(pair.elts[0].value, str)
                    and (target := _cpp_name(pair.elts[1]))
                }
                if exported:
                    found[name] = exported
        return found

    # --- writes ------------------------------------------------------------------------------

    def writes_at(self, path: str, line: int) -> dict[str, str]:
        """`writes` of the function defined at `path:line` (as this tree parsed it: results are
        kept by node, so nodes of another parse must not be passed in)."""
        fn = self._defined_at(path, line)
        return self.writes(fn) if fn is not None else {}

    def op_calls_at(self, path: str, line: int) -> list[OpCall]:
        """`op_calls` of the function defined at `path:line`."""
        fn = self._defined_at(path, line)
        return self.op_calls(fn) if fn is not None else []

    def _defined_at(self, path: str, line: int) -> Function | None:
        module = self.module(path)
        for node in ast.walk(module.tree) if module is not None else ():
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.lineno == line:
                        return Function(item, path, node)
            elif isinstance(node, ast.FunctionDef) and node.lineno == line:
                return Function(node, path)
        return None

    def writes(self, fn: Function, depth: int = 0, flags: Flags = frozenset()) -> dict[str, str]:
        """Parameters of `fn` its code (and what it calls in the tree) writes: name -> how
        (`flags`: parameters the call passes a constant `True` / `False`)."""
        return self._analyse(fn, depth, flags)[0]

    def returned(self, fn: Function, depth: int = 0, flags: Flags = frozenset()) -> frozenset[str]:
        """Parameters of `fn` whose storage it may return (a view, the tensor itself)."""
        return self._analyse(fn, depth, flags)[1]

    def op_calls(self, fn: Function, depth: int = 0, flags: Flags = frozenset()) -> list[OpCall]:
        """The ops `fn` calls through `torch.ops` (itself or through the tree's functions it
        calls), each argument as the parameters of `fn` it may be."""
        return self._analyse(fn, depth, flags)[2]

    def _analyse(self, fn: Function, depth: int, flags: Flags = frozenset()) -> _Analysis:
        """One analysis of `fn`'s body for these flags, kept; nothing while it is being
        analysed (recursion) or past `MAX_DEPTH`."""
        key = (id(fn.node), flags)
        if key in self._analysed:
            return self._analysed[key]
        if depth > MAX_DEPTH or id(fn.node) in self._active:
            return {}, frozenset(), []
        self._active.add(id(fn.node))
        try:
            body = _Body(self, fn, depth, flags)
        finally:
            self._active.discard(id(fn.node))
        self._analysed[key] = body.found, body.returns, body.op_calls
        return self._analysed[key]

    def compiled_class(self, fn: Function) -> tuple[str, ast.ClassDef] | None:
        """The class `fn` returns a compiled kernel of (`return cute.compile(K(...), ...)`)."""
        for node in _own_nodes(fn.node):
            if isinstance(node, ast.Return) and isinstance(node.value, ast.Call):
                found = self._compile_target(node.value, fn)
                if found is not None:
                    return found
        return None

    def _compile_target(self, call: ast.Call, fn: Function) -> tuple[str, ast.ClassDef] | None:
        """For `cute.compile(K(...), ...)` or `cute.compile(k, ...)` with `k = K(...)`: K."""
        dotted = _dotted(call.func)
        if not (dotted == "cute.compile" or dotted.endswith(".cute.compile")) or not call.args:
            return None
        built: ast.expr | None = call.args[0]
        if isinstance(built, ast.Name):
            built = _assigned_call(fn.node, built.id)
        if isinstance(built, ast.Call) and _last(built.func):
            return self.klass(_last(built.func), fn.path)
        return None


def _parse(data: bytes, path: str) -> _Module | None:
    try:
        tree = ast.parse(data, filename=path)
    except (SyntaxError, ValueError):
        return None
    module = _Module(tree, op_modules=op_namespaces(tree) if mentions_op_paths(data) else {})
    for item in tree.body:
        if isinstance(item, ast.FunctionDef):
            module.functions[item.name] = item
        elif isinstance(item, ast.ClassDef):
            module.classes[item.name] = item
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = "." * node.level + (node.module or "")
            for alias in node.names:
                module.imported[alias.asname or alias.name] = (source, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    module.imported[alias.asname] = (alias.name, "")
                else:
                    head = alias.name.split(".")[0]
                    module.imported.setdefault(head, (head, ""))
    return module


def _is_partial(call: ast.Call) -> bool:
    return _last(call.func) == "partial" and bool(call.args)


def _decorated(decorator: ast.expr) -> ast.expr:
    """The decorator's callee (`triton.autotune` of `@triton.autotune(configs=...)`)."""
    return decorator.func if isinstance(decorator, ast.Call) else decorator


def _merged(one: Aliases, other: Aliases) -> Aliases:
    """Where two paths meet: a local may hold what either gave it."""
    merged = dict(one)
    for name, derived in other.items():
        merged[name] = merged.get(name, frozenset()) | derived
    return merged


def _own_nodes(fn: ast.FunctionDef) -> Iterator[ast.AST]:
    """The nodes of a function's body, without those of functions or classes nested in it."""
    stack: list[ast.AST] = list(fn.body)
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, _NESTED):
                stack.append(child)


def _assigned_call(fn: ast.FunctionDef, name: str) -> ast.Call | None:
    for node in _own_nodes(fn):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
        ):
            return node.value
    return None


class _Body:
    """One function's locals and writes."""

    def __init__(self, tree: PyTree, fn: Function, depth: int, flags: Flags = frozenset()) -> None:
        self.tree, self.fn, self.depth = tree, fn, depth
        rebound = {
            n.id
            for n in _own_nodes(fn.node)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
        }
        self.flags = {name: value for name, value in flags if name not in rebound}
        """Parameters this call of the function passes a constant `True` / `False` (and never
        rebinds): a branch they rule out is not analysed (`if inplace: out = x` when the
        caller passes `inplace=False`)."""
        self.aliases: Aliases = {p: frozenset({p}) for p in fn.params}
        self.partials: dict[str, ast.Call] = {}
        self.values: set[str] = set()
        """Locals computed by arithmetic (`y = x * w`): values, so `y += v` stores nothing."""
        self.compiled: dict[str, tuple[str, ast.ClassDef]] = {}
        self.dsl = any(_dotted(_decorated(d)).split(".")[0] in DSLS for d in fn.node.decorator_list)
        """A kernel of a Python DSL (`@triton.jit`, `@cute.kernel`): its names are values."""
        self.found: dict[str, str] = {}
        """Parameters written -> how (the first evidence found)."""
        self.returns: frozenset[str] = frozenset()
        """Parameters whose storage a `return` may hand back."""
        self.op_calls: list[OpCall] = []
        """Ops called through `torch.ops` with the function's parameters (or views of them)."""
        self._helpers(fn.node)
        self._walk(fn.node.body)

    # --- statements, in order: a local holds what its latest assignment gave it --------------

    def _walk(self, body: list[ast.stmt]) -> None:
        for statement in body:
            self._statement(statement)

    def _statement(self, node: ast.stmt) -> None:
        if isinstance(node, _NESTED):
            return
        before = dict(self.aliases)
        known = self._known(node.test) if isinstance(node, ast.If) else None
        if isinstance(node, ast.If) and known is not None:
            self._walk(node.body if known else node.orelse)
        elif isinstance(node, ast.If):
            self._scan(node.test)
            self._walk(node.body)
            taken, self.aliases = self.aliases, before
            self._walk(node.orelse)
            self.aliases = _merged(taken, self.aliases)
        elif isinstance(node, ast.For | ast.AsyncFor | ast.While):
            head = node.iter if isinstance(node, ast.For | ast.AsyncFor) else node.test
            self._scan(head)
            for _ in range(2):  # twice: what one iteration binds reaches the next
                if isinstance(node, ast.For | ast.AsyncFor):
                    self._bind(node.target, self.derive(node.iter))
                self._walk(node.body)
                self.aliases = _merged(before, self.aliases)  # it may run no iteration
            self._walk(node.orelse)
        elif isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                self._scan(item.context_expr)
                if item.optional_vars is not None:
                    self._bind(item.optional_vars, self.derive(item.context_expr))
            self._walk(node.body)
        elif isinstance(node, ast.Try | ast.TryStar):
            self._walk(node.body)
            for handler in node.handlers:
                self.aliases = _merged(before, self.aliases)
                self._walk(handler.body)
            self._walk(node.orelse)
            self._walk(node.finalbody)
        elif isinstance(node, ast.Match):
            self._scan(node.subject)
            merged = before
            for case in node.cases:
                self.aliases = dict(before)
                self._walk(case.body)
                merged = _merged(merged, self.aliases)
            self.aliases = merged
        else:
            self._scan(node)
            if isinstance(node, ast.Return) and node.value is not None:
                self.returns |= self.derive(node.value)
            if isinstance(node, ast.Assign | ast.AnnAssign):
                self._assign(node)

    def _known(self, test: ast.expr) -> bool | None:
        """The value of an `if` test made of flags (`inplace`, `not inplace`, `a and not b`),
        or None where the call does not settle it."""
        if isinstance(test, ast.Name):
            return self.flags.get(test.id)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self._known(test.operand)
            return None if inner is None else not inner
        if isinstance(test, ast.BoolOp):
            values = [self._known(v) for v in test.values]
            stop = isinstance(test.op, ast.Or)  # the value that decides an `or` (`and`: False)
            if stop in values:
                return stop
            return None if None in values else not stop
        return None

    def _flags(self, call: ast.Call, callee: Function, bound: bool) -> Flags:
        """The callee's parameters this call settles to `True` / `False`: a constant or one of
        this function's flags passed, or a constant default the call leaves alone (only where
        it passes nothing unpacked)."""
        settled: dict[str, bool] = {}
        pairs = self._binding(call, callee, bound)
        for param, arg in pairs:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, bool):
                settled[param] = arg.value
            elif isinstance(arg, ast.Name) and arg.id in self.flags:
                settled[param] = self.flags[arg.id]
        unpacked = any(isinstance(a, ast.Starred) for a in call.args) or any(
            k.arg is None for k in call.keywords
        )
        if not unpacked and not (isinstance(call.func, ast.Name) and call.func.id in self.partials):
            passed = {param for param, _ in pairs}
            args = callee.node.args
            positional = [*args.posonlyargs, *args.args]
            tail = positional[len(positional) - len(args.defaults) :]
            defaults = zip(tail, args.defaults, strict=True)
            keyword = zip(args.kwonlyargs, args.kw_defaults, strict=True)
            for spec, default in (*defaults, *keyword):
                if (
                    spec.arg not in passed
                    and isinstance(default, ast.Constant)
                    and isinstance(default.value, bool)
                ):
                    settled[spec.arg] = default.value
        steering = self.tree.steering(callee)
        return frozenset((k, v) for k, v in settled.items() if k in steering)

    def _scan(self, node: ast.AST) -> None:
        """Writes in one simple statement (or a compound statement's test), as things stand."""
        stack = [node]
        while stack:
            item = stack.pop()
            if isinstance(item, ast.Assign | ast.AugAssign | ast.AnnAssign):
                self._store(item)
            elif isinstance(item, ast.Call):
                self._call_writes(item, self._add)
            stack.extend(c for c in ast.iter_child_nodes(item) if not isinstance(c, _NESTED))

    def _add(self, derived: frozenset[str], how: ast.AST | str) -> None:
        text = how if isinstance(how, str) else ast.unparse(how)[:100]
        for param in derived:
            self.found.setdefault(param, text)

    def _store(self, node: ast.Assign | ast.AugAssign | ast.AnnAssign) -> None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            if isinstance(target, ast.Subscript) or (
                isinstance(node, ast.AugAssign)
                and not (
                    isinstance(target, ast.Name)
                    and (target.id in self.values or self.dsl)  # `X += row * stride`: a pointer
                )  # moved in a Triton kernel, a value rebound in a CuTe one: nothing stored
            ):
                self._add(self.derive(target), node)

    def _helpers(self, fn: ast.FunctionDef) -> None:
        """Names bound to a partial, to a compiled kernel, or to arithmetic, wherever the
        function binds them (flow-insensitive: they name helpers and values, not storage)."""
        bound: list[tuple[list[str], ast.expr]] = []
        for node in _own_nodes(fn):
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                bound.append(([t.id for t in targets if isinstance(t, ast.Name)], node.value))
        for names, value in bound:
            if isinstance(value, ast.Call) and _is_partial(value):
                self.partials.update(dict.fromkeys(names, value))
        for names, value in bound:
            if isinstance(value, ast.Call) and names and not _is_partial(value):
                built = self._callable_class(value)
                if built is not None:
                    self.compiled.update(dict.fromkeys(names, built))
        for _ in range(3):  # `y = x_hat` after `x_hat = x * r`: a chain needs a few rounds
            for names, value in bound:
                if self._is_value(value):
                    self.values.update(names)

    def _assign(self, node: ast.Assign | ast.AnnAssign) -> None:
        value = node.value
        if value is None:
            return
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            if isinstance(target, ast.Tuple | ast.List):
                parts = self._elementwise(value, len(target.elts))
                for element, derived in zip(target.elts, parts, strict=True):
                    self._bind(element, derived)
            else:
                self._bind(target, self.derive(value))

    def _is_value(self, value: ast.expr) -> bool:
        """Arithmetic, an allocation, or a local that holds one: not a parameter's storage."""
        if isinstance(value, ast.IfExp):
            return self._is_value(value.body) and self._is_value(value.orelse)
        return (
            isinstance(value, ast.BinOp | ast.UnaryOp)
            or (isinstance(value, ast.Call) and _last(value.func) in ALLOCATORS | NUMBERS)
            or (isinstance(value, ast.Name) and value.id in self.values)
        )

    def _bind(self, target: ast.expr, derived: frozenset[str]) -> None:
        """Rebind a local: it now holds only what this assignment gave it."""
        if isinstance(target, ast.Name):
            self.aliases[target.id] = derived
        elif isinstance(target, ast.Starred):
            self._bind(target.value, derived)
        elif isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                self._bind(element, derived)

    def _elementwise(self, value: ast.expr, count: int) -> list[frozenset[str]]:
        """What each of `count` unpacked targets takes from `value`."""
        if isinstance(value, ast.Tuple | ast.List) and len(value.elts) == count:
            return [self.derive(e) for e in value.elts]
        positions = TUPLE_RESULTS.get(_last(value.func)) if isinstance(value, ast.Call) else None
        if isinstance(value, ast.Call) and positions and len(positions) == count:
            args = value.args
            return [self.derive(args[i]) if i < len(args) else frozenset() for i in positions]
        if (
            isinstance(value, ast.ListComp | ast.GeneratorExp)
            and len(value.generators) == 1
            and isinstance(value.generators[0].target, ast.Name)
            and isinstance(value.generators[0].iter, ast.Tuple | ast.List)
            and len(value.generators[0].iter.elts) == count
        ):
            variable = value.generators[0].target.id
            found = []
            for element in value.generators[0].iter.elts:
                saved = self.aliases.get(variable)
                self.aliases[variable] = self.derive(element)
                found.append(self.derive(value.elt))
                if saved is None:
                    del self.aliases[variable]
                else:
                    self.aliases[variable] = saved
            return found
        whole = self._comprehension(value) if isinstance(value, _COMPREHENSIONS) else None
        return [self.derive(value) if whole is None else whole] * count

    def _comprehension(self, node: ast.ListComp | ast.GeneratorExp | ast.SetComp) -> frozenset[str]:
        """Every value of a comprehension: its variables take what they iterate over."""
        saved = dict(self.aliases)
        try:
            for generator in node.generators:
                taken = self.derive(generator.iter)
                for name in ast.walk(generator.target):
                    if isinstance(name, ast.Name):
                        self.aliases[name.id] = taken
            return self.derive(node.elt)
        finally:
            self.aliases = saved

    def derive(self, node: ast.expr) -> frozenset[str]:
        """The parameters whose storage `node` may be (or view)."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, frozenset())
        if isinstance(node, ast.Attribute):  # `mO.iterator`, `x.T`, `x.data`; not `x.shape`
            return frozenset() if node.attr in METADATA else self.derive(node.value)
        if isinstance(node, ast.Subscript | ast.Starred):
            return self.derive(node.value)
        if isinstance(node, ast.BinOp):  # pointer arithmetic: `x_ptr + offsets`
            return self.derive(node.left) | self.derive(node.right)
        if isinstance(node, ast.IfExp):
            return self.derive(node.body) | self.derive(node.orelse)
        if isinstance(node, ast.Tuple | ast.List):
            return frozenset().union(*(self.derive(e) for e in node.elts))
        if isinstance(node, _COMPREHENSIONS):
            return self._comprehension(node)
        if isinstance(node, ast.Call):
            return self._call_result(node)
        return frozenset()

    def _call_result(self, call: ast.Call) -> frozenset[str]:
        func, name = call.func, _last(call.func)
        if name in ALLOCATORS or name in NUMBERS:
            return frozenset()
        if isinstance(func, ast.Attribute):
            receiver = self.derive(func.value)
            if receiver:  # a method of the tensor itself: a view or something new
                return receiver if name in VIEWS else frozenset()
            if isinstance(_root(func), ast.Name) and _dotted(func).split(".")[0] in FRESH_MODULES:
                return frozenset()
        target = self.callee(call)
        if target is not None:
            callee, bound = target
            flags = self._flags(call, callee, bound)
            returned = self.tree.returned(callee, self.depth + 1, flags)
            return frozenset().union(
                *(
                    self.derive(arg)
                    for param, arg in self._binding(call, callee, bound)
                    if param in returned
                )
            )
        if isinstance(func, ast.Name) and not self.dsl:
            # a function the tree does not define, called from plain Python (`gemm(A, B, ...)`
            # imported from a compiled library): what it returns is its own, not a view of its
            # arguments (vLLM 0.34.0's `output = gemm_a8w8_bpreshuffle(A, B, ...);
            # output.add_(bias)` wrote nothing of A or B)
            return frozenset()
        if (
            isinstance(func, ast.Attribute)
            and not self.dsl
            and _dotted(func).split(".")[0] not in DSL_MODULES
        ):
            # a method of something that is not one of the parameters, in plain Python
            # (`slot_mapping.get(layer_name)`): its result is not a view of the arguments
            # (vLLM 0.34.0's `get_attention_context(layer_name)` took a KV cache for a view of
            # the layer's name)
            return frozenset()
        # a DSL's constructors and partitions (`cute.local_tile(mO, ...)`, `thr.partition_D(g)`)
        parts = [self.derive(a) for a in call.args] + [self.derive(k.value) for k in call.keywords]
        return frozenset().union(*parts)

    # --- calls -------------------------------------------------------------------------------

    def _callable_class(self, call: ast.Call) -> tuple[str, ast.ClassDef] | None:
        """The kernel class a call's result is a compiled callable of, if it is one."""
        direct = self.tree._compile_target(call, self.fn)
        if direct is not None:
            return direct
        target = self.callee(call)
        return self.tree.compiled_class(target[0]) if target is not None else None

    def callee(self, call: ast.Call) -> tuple[Function, bool] | None:
        """The function of the tree a call runs, and whether it is bound (`self` skipped)."""
        func, path = call.func, self.fn.path
        if isinstance(func, ast.Name):
            inner = self.partials[func.id].args[0] if func.id in self.partials else None
            if inner is not None and not (
                isinstance(inner, ast.Name) and inner.id in self.partials
            ):
                return self.callee(ast.Call(inner, [], []))  # `f = partial(g, ...)`: g
            if func.id in self.compiled:
                method = self.tree.method(self.compiled[func.id], "__call__")
                return (method, True) if method is not None else None
            found = self.tree.function(func.id, path)
            return (found, False) if found is not None else None
        if isinstance(func, ast.Subscript):  # a Triton launch: `kernel[grid](x, out, n)`
            kernel = func.value
            if isinstance(kernel, ast.Call) and _last(kernel.func) == "wrap_triton" and kernel.args:
                kernel = kernel.args[0]  # `torch.library.wrap_triton(kernel)[grid](...)`
            launched = self.callee(ast.Call(kernel, [], []))
            return (launched[0], False) if launched is not None else None
        if isinstance(func, ast.Call):  # `K.compile(...)(x, out)`
            built = self._callable_class(func)
            if built is not None:
                method = self.tree.method(built, "__call__")
                return (method, True) if method is not None else None
            return None
        if not isinstance(func, ast.Attribute):
            return None
        head = func.value
        if isinstance(head, ast.Name) and head.id in ("self", "cls") and self.fn.owner is not None:
            method = self.tree.method((self.fn.path, self.fn.owner), func.attr)
            return (method, True) if method is not None else None
        if isinstance(head, ast.Name):
            found = self.tree.module_function(head.id, func.attr, path)
            if found is not None:
                return found, False
            owner = self.tree.klass(head.id, path)
            if owner is not None:
                method = self.tree.method(owner, func.attr)
                if method is not None:
                    static = any(_last(d) == "staticmethod" for d in method.node.decorator_list)
                    return method, not static
            module = self.tree.module(path)
            local = head.id not in (module.imported if module is not None else {})
            if local and not self.derive(head) and head.id not in ("self", "cls"):
                only = self.tree.unique_method(func.attr)  # an object of a class not named here
                if only is not None:
                    return only, True
        return None

    def _binding(self, call: ast.Call, callee: Function, bound: bool) -> list[tuple[str, ast.expr]]:
        """(callee parameter, the caller's argument) for each argument the call passes."""
        if isinstance(call.func, ast.Name) and call.func.id in self.partials:
            inner = self.partials[call.func.id]
            call = ast.Call(
                inner.args[0], [*inner.args[1:], *call.args], [*inner.keywords, *call.keywords]
            )
        args = callee.node.args
        positional = [a.arg for a in (*args.posonlyargs, *args.args)]
        if bound and positional:
            positional = positional[1:]
        pairs: list[tuple[str, ast.expr]] = []
        for index, arg in enumerate(call.args):
            if isinstance(arg, ast.Starred):
                break
            if index < len(positional):
                pairs.append((positional[index], arg))
        names = set(callee.params)
        pairs.extend((k.arg, k.value) for k in call.keywords if k.arg in names)
        return pairs

    def _call_writes(self, call: ast.Call, add: _Add) -> None:
        func, name = call.func, _last(call.func)
        dotted = _dotted(func)
        receiver = self.derive(func.value) if isinstance(func, ast.Attribute) else frozenset()
        if dotted.split(".")[0] in FRESH_MODULES or receiver:  # `torch.mm(a, b, out=c)`
            for keyword in call.keywords:
                if keyword.arg == "out":
                    add(self.derive(keyword.value), call)
        if isinstance(func, ast.Attribute):
            if name.endswith("_") and not name.startswith("_") and name not in NOT_WRITES:
                add(receiver, call)
            if name == "store" and receiver:  # a CuTe tensor's `t.store(values)`
                add(receiver, call)
        head = dotted.split(".")[0]
        if name in COLLECTIVES and self._distributed(dotted):
            word = COLLECTIVES[name]
            filled = call.args[0] if call.args else None
            filled = filled or next((k.value for k in call.keywords if k.arg == word), None)
            if filled is not None:
                add(self.derive(filled), call)
        if head in ("cute", "cutlass") and name in CUTE_COPIES and call.args:
            add(self.derive(call.args[-1]), call)  # the destination is the last argument
        if head in ("tl", "triton", "hl", "helion") and name in TRITON_STORES and call.args:
            add(self.derive(call.args[0]), call)
        op = op_called(self._through_op_module(dotted))
        if op is not None:  # `torch.ops.ns.name(...)`: `scan` binds it to the op's schema
            self._op_call(op, call)
            return
        target = self.callee(call)
        if target is None:
            return
        callee, bound = target
        flags = self._flags(call, callee, bound)
        written = self.tree.writes(callee, self.depth + 1, flags)
        inner = self.tree.op_calls(callee, self.depth + 1, flags)
        if not written and not inner:
            return
        passed: dict[str, frozenset[str]] = {}
        for param, arg in self._binding(call, callee, bound):
            passed[param] = passed.get(param, frozenset()) | self.derive(arg)
        for param, derived in passed.items():
            if param in written:
                add(derived, f"{ast.unparse(call)[:60]} -> {written[param]}")
        for use in inner:  # the callee's op calls, in terms of this function's parameters
            args = tuple(_through(passed, names) for names in use.args)
            keywords = tuple((k, _through(passed, names)) for k, names in use.keywords)
            if any(args) or any(names for _, names in keywords):
                how = f"{ast.unparse(call)[:40]} -> {use.expression}"[:120]
                self.op_calls.append(replace(use, args=args, keywords=keywords, expression=how))

    def _distributed(self, dotted: str) -> bool:
        """`torch.distributed.f`, or `f` on a name bound to `torch.distributed` (`import
        torch.distributed as dist`, `from torch import distributed`) or imported from it."""
        head, _, rest = dotted.partition(".")
        module = self.tree.module(self.fn.path)
        source, attribute = (module.imported if module is not None else {}).get(head, (head, ""))
        full = ".".join(part for part in (source, attribute, rest) if part)
        return full.rpartition(".")[0] == "torch.distributed"

    def _through_op_module(self, dotted: str) -> str:
        """`ops.rms_norm` after the module's `ops = torch.ops._C`: `torch.ops._C.rms_norm`
        (a local of the same name hides the module's)."""
        module = self.tree.module(self.fn.path)
        if module is None or dotted.partition(".")[0] in self.aliases:
            return dotted
        return through_op_namespace(dotted, module.op_modules)

    def _op_call(self, op: str, call: ast.Call) -> None:
        args: list[frozenset[str]] = []
        for arg in call.args:
            if isinstance(arg, ast.Starred):
                break
            args.append(self.derive(arg))
        keywords = tuple((k.arg, self.derive(k.value)) for k in call.keywords if k.arg)
        if any(args) or any(names for _, names in keywords):
            where = Location(self.fn.path, call.lineno)
            how = " ".join(ast.unparse(call).split())[:80]
            self.op_calls.append(OpCall(op, tuple(args), keywords, where, how))


def _through(passed: Mapping[str, frozenset[str]], names: frozenset[str]) -> frozenset[str]:
    """A callee's parameters `names`, as the caller's parameters its arguments bound to them."""
    return frozenset().union(*(passed.get(name, frozenset()) for name in names))


def mentions_op_paths(source: bytes) -> bool:
    """Whether a file can bind a name to a `torch.ops` path at all (`op_namespaces` is {}
    otherwise: a cheap test before walking its whole tree)."""
    return b"torch.ops" in source or (b"from torch import" in source and b"ops" in source)


def op_namespaces(tree: ast.Module) -> dict[str, str]:
    """Names bound to `torch.ops`, an op namespace or an op, by assignment (`ops = torch.ops._C`,
    `fill = torch.ops._C.fill`) or import (`from torch import ops`, `from torch.ops import _C`,
    `import torch.ops as ops`), anywhere in the file (a function's own `ops = torch.ops._C` too):
    name -> the dotted path it stands for. The one reader of these bindings, for an op's calls
    to other ops and for the call sites of ops alike."""
    bound: dict[str, str] = {}
    for item in ast.walk(tree):
        if isinstance(item, ast.Assign) and len(item.targets) == 1:
            target, dotted = item.targets[0], _dotted(item.value)
            if isinstance(target, ast.Name) and dotted.split(".")[:2] == ["torch", "ops"]:
                bound[target.id] = dotted
        elif isinstance(item, ast.ImportFrom) and item.level == 0:
            for alias in item.names:
                if item.module == "torch" and alias.name == "ops":
                    bound[alias.asname or "ops"] = "torch.ops"
                elif item.module == "torch.ops" and alias.name != "*":
                    bound[alias.asname or alias.name] = f"torch.ops.{alias.name}"
        elif isinstance(item, ast.Import):
            for alias in item.names:
                if alias.asname and alias.name.split(".")[:2] == ["torch", "ops"]:
                    bound[alias.asname] = alias.name
    return bound


def through_op_namespace(dotted: str, bound: Mapping[str, str]) -> str:
    """`dotted` with its first name replaced by the op path it is bound to (`op_namespaces`)."""
    head, _, rest = dotted.partition(".")
    path = bound.get(head)
    if path is None:
        return dotted
    return f"{path}.{rest}" if rest else path


def op_called(dotted: str) -> str | None:
    """The op a call of `dotted` reaches through `torch.ops` (`torch.ops.ns.name[.overload]`):
    `ns::name` or `ns::name.overload` (`.default` is the op itself)."""
    parts = dotted.split(".")
    if len(parts) < 4 or parts[:2] != ["torch", "ops"]:
        return None
    qualname = f"{parts[2]}::{parts[3]}"
    if len(parts) > 4 and parts[4] != "default":
        qualname += f".{parts[4]}"
    return qualname
