"""Fake (meta) registrations that name their op indirectly, found in a Python module's `ast`.

Kernel packages rarely write `@register_fake("ns::op")` for every op. They build the name
(`f"{NS}::op"`, `NS + "::op"`), loop over names, hide the call in a helper
(`_try_register(name, fn)` that calls `register_fake(name)(fn)`), or pass a lambda. With a fake
the op is traced by torch.compile and its schema hazards are live, so missing one of these
reports the opposite of the truth. Names are resolved from module-level string constants and
literal loop bounds; a name that cannot be resolved is not guessed.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterable

FAKE_REGISTRARS = frozenset({"register_fake", "impl_abstract", "register_meta", "_register_fake"})
FAKE_KEYS = frozenset({"Meta", "Fake", "FakeTensor"})
Env = dict[str, list[str]]


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Name):
        return node.id
    return ""


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


def strings(node: ast.AST | None, env: Env) -> list[str]:
    """Every value a string expression can take, given the names bound in `env`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Name):
        return env.get(node.id, [])
    if isinstance(node, ast.JoinedStr):
        parts: list[list[str]] = []
        for value in node.values:
            if isinstance(value, ast.FormattedValue):
                parts.append(strings(value.value, env))
            else:
                parts.append(strings(value, env))
        if any(not p for p in parts):
            return []
        return ["".join(combo) for combo in itertools.product(*parts)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = strings(node.left, env), strings(node.right, env)
        return [a + b for a in left for b in right]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        template = strings(node.left, env)
        args = node.right.elts if isinstance(node.right, ast.Tuple) else [node.right]
        values = [strings(a, env) for a in args]
        if not template or any(not v for v in values):
            return []
        out = []
        for text in template:
            for combo in itertools.product(*values):
                try:
                    out.append(text % combo)
                except (TypeError, ValueError):
                    return []
        return out
    return []


class _FakeFinder(ast.NodeVisitor):
    """Walks a module with loop bindings in scope, collecting fake-registered op names."""

    def __init__(self, env: Env, helpers: dict[str, int], namespaces: dict[str, str]) -> None:
        self.env = env
        self.helpers = helpers
        self.namespaces = namespaces
        self.found: set[str] = set()

    def visit_For(self, node: ast.For) -> None:
        if isinstance(node.target, ast.Name) and isinstance(node.iter, ast.Tuple | ast.List):
            values = [v for e in node.iter.elts for v in strings(e, self.env)]
            if values:
                saved = self.env.get(node.target.id)
                self.env[node.target.id] = values
                for statement in node.body:
                    self.visit(statement)
                if saved is None:
                    self.env.pop(node.target.id, None)
                else:
                    self.env[node.target.id] = saved
                return
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = _dotted(node.func).rsplit(".", 1)[-1]
        if name in FAKE_REGISTRARS and node.args:
            self._add(node.args[0], node)
        elif name == "impl" and _has_fake_key(node, self.env):
            self._add(node.args[0] if node.args else None, node)
        elif name in self.helpers and len(node.args) > self.helpers[name]:
            self._add(node.args[self.helpers[name]], node)
        self.generic_visit(node)

    def _add(self, arg: ast.AST | None, call: ast.Call) -> None:
        receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
        namespace = self.namespaces.get(_dotted(receiver)) if receiver is not None else None
        for text in strings(arg, self.env):
            if "::" in text:
                self.found.add(text)
            elif namespace:
                self.found.add(f"{namespace}::{text}")


def _has_fake_key(call: ast.Call, env: Env) -> bool:
    keys = [s for a in call.args[1:] for s in strings(a, env)]
    keys += [s for kw in call.keywords for s in strings(kw.value, env)]
    return any(k in FAKE_KEYS for k in keys)


def _helpers(tree: ast.Module) -> dict[str, int]:
    """Functions that pass one of their parameters to a fake registrar as the op name."""
    helpers: dict[str, int] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        params = [a.arg for a in node.args.args]
        for inner in ast.walk(node):
            if not isinstance(inner, ast.Call) or not inner.args:
                continue
            name = _dotted(inner.func).rsplit(".", 1)[-1]
            first = inner.args[0]
            if name in FAKE_REGISTRARS and isinstance(first, ast.Name) and first.id in params:
                helpers[node.name] = params.index(first.id)
    return helpers


def indirect_fakes(tree: ast.Module, namespaces: dict[str, str]) -> set[str]:
    """Qualified names of every op this module registers a fake/meta implementation for."""
    finder = _FakeFinder(string_constants(tree), _helpers(tree), namespaces)
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
