"""Fake (meta) registrations that name their op indirectly, found in a Python module's `ast`.

Kernel packages rarely write `@register_fake("ns::op")` for every op. They build the name
(`f"{NS}::op"`, `NS + "::op"`, `"{}::{}".format(NS, op)`), from a constant local to the function
that registers (`ns = "_xpu_C"` inside `register_fakes()`), or a parameter's default; loop over
names (a literal, or a module or local list, tuple or dict of them, `.items()`, unpacked
pairs); hide the call in a helper (`_try_register(name, fn)` that calls `register_fake(name)` or
`register_fake(f"{NS}::{name}")`), or build the name in one (`_qualified("op")` returning
`f"{NS}::{op}"`), or pass a lambda. With a fake the op is traced by torch.compile and its schema
hazards are live, so missing one of these reports the opposite of the truth.

Names are evaluated as Python would bind them: module constants, then each function's
parameters (their string defaults) and its assignments in order, loop variables while their
loop runs. Hand-written: no library evaluates string expressions over a module's bindings
without running it, and running a kernel package's module is not an option. A name that cannot
be resolved is not guessed.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass

FAKE_REGISTRARS = frozenset({"register_fake", "impl_abstract", "register_meta", "_register_fake"})
FAKE_KEYS = frozenset({"Meta", "Fake", "FakeTensor"})
Env = dict[str, list[str]]
Sequences = dict[str, list[ast.expr]]
WRAPPERS = frozenset({"sorted", "list", "tuple", "reversed", "set"})
MAX_VALUES = 4096  # a name expression with more values than this is not expanded (no blow-up)


@dataclass(frozen=True, slots=True)
class _Function:
    """A module function a name can pass through: its parameters, their string defaults, and
    the string expression it returns (name builders) or passes to a registrar (helpers)."""

    params: tuple[str, ...]
    defaults: tuple[tuple[str, ast.expr], ...]
    expression: ast.expr


def dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Name):
        return node.id
    return ""


def called_name(node: ast.Call) -> str:
    """The last part of the called name: `register_fake` for `torch.library.register_fake(..)`."""
    return dotted(node.func).rsplit(".", 1)[-1]


class _Evaluator:
    """Every value a string expression can take, given the names bound in `env` and the
    module's name builders."""

    def __init__(self, builders: dict[str, _Function]) -> None:
        self.builders = builders

    def strings(self, node: ast.AST | None, env: Env, depth: int = 0) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.Name):
            return env.get(node.id, [])
        if isinstance(node, ast.JoinedStr):
            parts = [
                self.strings(v.value if isinstance(v, ast.FormattedValue) else v, env, depth)
                for v in node.values
            ]
            return _product(parts)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.strings(node.left, env, depth), self.strings(node.right, env, depth)
            return _product([left, right])
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            args = node.right.elts if isinstance(node.right, ast.Tuple) else [node.right]
            return self._format(node.left, args, env, depth, lambda t, v: t % v)
        if isinstance(node, ast.Call):
            return self._call(node, env, depth)
        return []

    def _format(self, template: ast.AST, args: list[ast.expr], env: Env, depth: int,
                apply: Callable[[str, tuple[str, ...]], str]) -> list[str]:  # fmt: skip
        texts = self.strings(template, env, depth)
        values = [self.strings(a, env, depth) for a in args]
        if not texts or any(not v for v in values):
            return []
        out = []
        for text in texts:
            for combo in itertools.product(*values):
                try:
                    out.append(apply(text, combo))
                except (TypeError, ValueError, IndexError, KeyError):
                    return []
                if len(out) > MAX_VALUES:
                    return []
        return out

    def _call(self, node: ast.Call, env: Env, depth: int) -> list[str]:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "format" and not node.keywords:
            return self._format(func.value, node.args, env, depth, lambda t, v: t.format(*v))
        builder = self.builders.get(called_name(node)) if isinstance(func, ast.Name) else None
        if builder is None or depth > 4:
            return []
        return self.strings(
            builder.expression, bind(builder, node, env, self, depth + 1), depth + 1
        )


def _product(parts: list[list[str]]) -> list[str]:
    """Every concatenation of one value of each part (none past MAX_VALUES)."""
    if any(not p for p in parts):
        return []
    size = 1
    for part in parts:
        size *= len(part)
    if size > MAX_VALUES:
        return []
    return ["".join(combo) for combo in itertools.product(*parts)]


def bind(function: _Function, call: ast.Call, env: Env, evaluator: _Evaluator,
         depth: int = 0) -> Env:  # fmt: skip
    """The environment inside `function` for this call: module names, its parameters bound to
    the call's values (or their string defaults); a parameter with neither is unbound, so a
    name that needs it has no value."""
    inner = {k: v for k, v in env.items() if k not in function.params}
    for name, default in function.defaults:
        values = evaluator.strings(default, env, depth)
        if values:
            inner[name] = values
    given = list(zip(function.params, call.args, strict=False))
    given += [(k.arg, k.value) for k in call.keywords if k.arg in function.params]
    for name, value in given:
        values = evaluator.strings(value, env, depth)
        if values:
            inner[name] = values
        else:
            inner.pop(name, None)
    return inner


def strings(node: ast.AST | None, env: Env) -> list[str]:
    """Every value a string expression can take, given the names bound in `env`."""
    return _Evaluator({}).strings(node, env)


def string_constants(tree: ast.Module) -> Env:
    """Module-level `NAME = "text"` (and `NAME = OTHER + "text"`) assignments."""
    env: Env = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            values = strings(node.value, env)
            if isinstance(target, ast.Name) and values:
                env[target.id] = values
    return env


def _elements(node: ast.expr, sequences: Sequences) -> list[ast.expr] | None:
    """The elements a `for` loop over `node` takes, when they are written in the module: a
    literal list/tuple/set, a dict's keys, `.items()`/`.keys()`/`.values()` of one, a name
    bound to one, or `sorted`/`list`/`tuple`/`reversed`/`enumerate`-free wrappers of these."""
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return list(node.elts)
    if isinstance(node, ast.Dict):
        return [k for k in node.keys if k is not None]
    if isinstance(node, ast.Name):
        return sequences.get(node.id)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in WRAPPERS
        and len(node.args) == 1
        and not node.keywords
    ):
        return _elements(node.args[0], sequences)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.args:
        source = node.func.value
        mapping = sequences.get(f"{source.id}{{}}") if isinstance(source, ast.Name) else None
        if isinstance(source, ast.Dict):
            mapping = _pairs(source)
        if mapping is None:
            return None
        pairs = [p for p in mapping if isinstance(p, ast.Tuple) and len(p.elts) == 2]
        if node.func.attr == "items":
            return list(pairs)
        if node.func.attr == "keys":
            return [p.elts[0] for p in pairs]
        if node.func.attr == "values":
            return [p.elts[1] for p in pairs]
    return None


def _pairs(mapping: ast.Dict) -> list[ast.expr]:
    """A dict literal's (key, value) pairs as tuples, as `.items()` yields them."""
    return [
        ast.Tuple([k, v], ast.Load())
        for k, v in zip(mapping.keys, mapping.values, strict=True)
        if k is not None
    ]


def _sequence_bindings(name: str, value: ast.expr, sequences: Sequences) -> None:
    """Record `name = [...]` / `(...)` / `{...}` for later loops (a dict also as its pairs)."""
    elements = _elements(value, sequences)
    if elements is None:
        sequences.pop(name, None)
        sequences.pop(f"{name}{{}}", None)
        return
    sequences[name] = elements
    if isinstance(value, ast.Dict):
        sequences[f"{name}{{}}"] = _pairs(value)


def _own_nodes(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.AST]:
    """The nodes of a function's body, not those of functions, lambdas or classes it defines
    (each is looked at on its own: the module is read once in all)."""
    found: list[ast.AST] = []
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        found.append(node)
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            stack.extend(ast.iter_child_nodes(node))
    return found


def _functions(tree: ast.Module) -> tuple[dict[str, _Function], dict[str, _Function]]:
    """(builders, helpers): functions whose single `return` is a string expression over their
    parameters, and functions that hand a registrar an op name built from their parameters."""
    builders: dict[str, _Function] = {}
    helpers: dict[str, _Function] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        args = node.args
        params = tuple(a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs])
        if not params:
            continue
        defaults = tuple((a.arg, d) for a, d in _defaults(args))
        own = _own_nodes(node)
        returns = [n.value for n in own if isinstance(n, ast.Return) and n.value is not None]
        if len(returns) == 1 and _uses(returns[0], params):
            builders[node.name] = _Function(params, defaults, returns[0])
        for inner in own:
            if not (isinstance(inner, ast.Call) and inner.args):
                continue
            if called_name(inner) in FAKE_REGISTRARS and _uses(inner.args[0], params):
                helpers[node.name] = _Function(params, defaults, inner.args[0])
    return builders, helpers


def _defaults(args: ast.arguments) -> list[tuple[ast.arg, ast.expr]]:
    """Each parameter that has a default, with it (positional and keyword-only)."""
    positional = [*args.posonlyargs, *args.args]
    pairs = list(
        zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True)
    )
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d]
    return pairs


def _uses(node: ast.AST | None, params: tuple[str, ...]) -> bool:
    """The expression reads one of `params`."""
    return node is not None and any(
        isinstance(n, ast.Name) and n.id in params for n in ast.walk(node)
    )


class _FakeFinder(ast.NodeVisitor):
    """Walks a module in execution order with the names bound at each point in scope,
    collecting fake-registered op names."""

    def __init__(self, env: Env, builders: dict[str, _Function], helpers: dict[str, _Function],
                 namespaces: dict[str, str]) -> None:  # fmt: skip
        self.env = env
        self.sequences: Sequences = {}
        self.evaluator = _Evaluator(builders)
        self.helpers = helpers
        self.namespaces = dict(namespaces)
        self.found: set[str] = set()
        self.local = False

    def strings(self, node: ast.AST | None) -> list[str]:
        return self.evaluator.strings(node, self.env)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for decorator in node.decorator_list:
            self.visit(decorator)
        saved = (dict(self.env), dict(self.sequences), dict(self.namespaces), self.local)
        args = node.args
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            self.env.pop(a.arg, None)
            self.sequences.pop(a.arg, None)
        for arg, default in _defaults(args):
            values = strings(default, saved[0])
            if values:
                self.env[arg.arg] = values
        self.local = True
        for statement in node.body:
            self.visit(statement)
        self.env, self.sequences, self.namespaces, self.local = saved

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        return  # a lambda's body runs later, with bindings this walk cannot know

    def visit_Assign(self, node: ast.Assign) -> None:
        self.generic_visit(node)
        if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
            return
        name = node.targets[0].id
        values = self.strings(node.value)
        if values:
            self.env[name] = values
        elif self.local:
            self.env.pop(name, None)
        _sequence_bindings(name, node.value, self.sequences)
        value = node.value
        if isinstance(value, ast.Call) and called_name(value) == "Library" and value.args:
            found = self.strings(value.args[0])
            if len(found) == 1:
                self.namespaces[name] = found[0]

    def visit_For(self, node: ast.For) -> None:
        self.visit(node.iter)
        elements = _elements(node.iter, self.sequences)
        targets = node.target.elts if isinstance(node.target, ast.Tuple) else [node.target]
        if elements is None or not all(isinstance(t, ast.Name) for t in targets):
            self.generic_visit(node)
            return
        saved = {t.id: self.env.get(t.id) for t in targets if isinstance(t, ast.Name)}
        for position, target in enumerate(targets):
            assert isinstance(target, ast.Name)
            if isinstance(node.target, ast.Tuple):
                parts = [e.elts[position] for e in elements
                         if isinstance(e, ast.Tuple) and len(e.elts) == len(targets)]  # fmt: skip
            else:
                parts = elements
            values = [v for part in parts for v in self.strings(part)]
            if values:
                self.env[target.id] = values
            else:
                self.env.pop(target.id, None)
        for statement in [*node.body, *node.orelse]:
            self.visit(statement)
        for name, value in saved.items():
            if value is None:
                self.env.pop(name, None)
            else:
                self.env[name] = value

    def visit_Call(self, node: ast.Call) -> None:
        name = called_name(node)
        if name in FAKE_REGISTRARS and node.args:
            self._add(node.args[0], node)
        elif name == "impl" and _has_fake_key(node, self.env):
            self._add(node.args[0] if node.args else None, node)
        elif name in self.helpers:
            helper = self.helpers[name]
            inner = bind(helper, node, self.env, self.evaluator)
            self._record(self.evaluator.strings(helper.expression, inner), None)
        self.generic_visit(node)

    def _add(self, arg: ast.AST | None, call: ast.Call) -> None:
        receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
        namespace = self.namespaces.get(dotted(receiver)) if receiver is not None else None
        self._record(self.strings(arg), namespace)

    def _record(self, texts: list[str], namespace: str | None) -> None:
        for text in texts:
            if "::" in text:
                self.found.add(text)
            elif namespace:
                self.found.add(f"{namespace}::{text}")


def _has_fake_key(call: ast.Call, env: Env) -> bool:
    keys = [s for a in call.args[1:] for s in strings(a, env)]
    keys += [s for kw in call.keywords for s in strings(kw.value, env)]
    return any(k in FAKE_KEYS for k in keys)


def indirect_fakes(tree: ast.Module, namespaces: dict[str, str]) -> set[str]:
    """Qualified names of every op this module registers a fake/meta implementation for."""
    builders, helpers = _functions(tree)
    finder = _FakeFinder(string_constants(tree), builders, helpers, namespaces)
    finder.visit(tree)
    return finder.found


def added_python(patch: str) -> Iterable[tuple[str, str]]:
    """(path, text) of each Python file a unified diff adds lines to, from its `+` lines."""
    path: str | None = None
    lines: list[str] = []
    for line in patch.splitlines():
        if line.startswith("+++ "):
            if path is not None and path.endswith(".py"):
                yield path, "\n".join(lines) + "\n"
            target = line[4:].split("\t", 1)[0].strip()
            path = target[2:] if target.startswith("b/") else target
            lines = []
        elif path is not None and line.startswith("+"):
            lines.append(line[1:])
    if path is not None and path.endswith(".py"):
        yield path, "\n".join(lines) + "\n"
