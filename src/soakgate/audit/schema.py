"""Parser for PyTorch's operator schema language, written by hand so the auditor runs without torch.

torch ships its parser only inside `torch._C.parse_schema`; the audit must read schemas from
sources and binaries on machines without torch, so this module re-implements the grammar of
`torch/csrc/jit/frontend/function_schema_parser.cpp` and records character spans for `--fix`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from soakgate.errors import AuditError

_TOKEN = re.compile(
    r"""(?:\s|\#[^\n]*)*(?:
      (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    | (?P<num>-?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?))
    | (?P<ident>[A-Za-z_][A-Za-z_0-9]*)
    | (?P<punct>->|::|\.\.\.|[()\[\],?!*=|.:])
    )""",
    re.VERBOSE,
)


class SchemaSyntaxError(AuditError):
    """A string that is not a valid operator schema."""


@dataclass(frozen=True, slots=True)
class AliasInfo:
    """An alias annotation such as `(a!)`, `(a -> *)` or the shorthand `!`."""

    before_sets: tuple[str, ...]
    """Alias sets the value belongs to on entry (`a` in `(a!)`)."""
    after_sets: tuple[str, ...]
    """Alias sets after the call (`*` in `(a -> *)`); equal to before_sets when not given."""
    is_write: bool
    """True when the op may write to the value (`!`): the flag torch.compile trusts."""


@dataclass(frozen=True, slots=True)
class TypeSpec:
    """A schema type: a base name with list/optional suffixes and alias annotations."""

    base: str
    """Base type name (`Tensor`, `SymInt`, `ScalarType`, or `Dict(str, Tensor)` spelled out)."""
    suffix: str
    """Suffixes after the base in order, e.g. `[]?` or `[2]`."""
    alias: AliasInfo | None
    """Alias annotation on the element (`Tensor(a!)[]`) or on the list (`Tensor[](a!)`)."""
    base_end: int
    """Offset just after the base name: where `--fix` inserts a new `(x!)` annotation."""

    @property
    def is_tensor_like(self) -> bool:
        """Whether values of this type can carry tensor storage an op could write to."""
        return self.base == "Tensor"

    def __str__(self) -> str:
        return f"{self.base}{self.suffix}"


@dataclass(frozen=True, slots=True)
class Argument:
    """One declared argument or return value."""

    name: str | None
    """Argument name; None for unnamed returns."""
    type: TypeSpec
    """Declared type."""
    default: str | None = None
    """Default value as written (`None`, `[0, 1]`, `1e-05`), or None when absent."""
    kwarg_only: bool = False
    """True for arguments after the bare `*`."""

    @property
    def is_write(self) -> bool:
        """Whether the schema declares that the op writes to this argument."""
        return self.type.alias is not None and self.type.alias.is_write


@dataclass(frozen=True, slots=True)
class Schema:
    """A parsed operator schema with the spans `--fix` needs."""

    namespace: str | None
    """Namespace before `::`, if written in the schema."""
    name: str
    """Operator name without namespace and overload."""
    overload: str
    """Overload name after `.`; empty for the default overload."""
    arguments: tuple[Argument, ...]
    """Declared arguments in order."""
    returns: tuple[Argument, ...]
    """Declared returns; empty for `-> ()`."""
    returns_span: tuple[int, int]
    """Offsets of the return declaration after `->` (without surrounding blanks)."""
    text: str = field(repr=False, default="")
    """The schema text this was parsed from."""

    @property
    def is_mutable(self) -> bool:
        """Torch's `FunctionSchema.is_mutable`: some argument is declared written."""
        return any(arg.is_write for arg in self.arguments)

    def argument(self, name: str) -> Argument | None:
        """The argument called `name`, if any."""
        return next((arg for arg in self.arguments if arg.name == name), None)

    def alias_sets(self) -> set[str]:
        """Every alias-set name used anywhere in the schema (to pick fresh ones)."""
        used: set[str] = set()
        for arg in (*self.arguments, *self.returns):
            if arg.type.alias is not None:
                used.update(arg.type.alias.before_sets, arg.type.alias.after_sets)
        return used


def _blank(text: str) -> bool:
    """Only whitespace and `#` comments (torch's lexer skips both)."""
    return all(not line.split("#", 1)[0].strip() for line in text.splitlines())


class _Lexer:
    """Token stream over one schema string that remembers offsets."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, str, int, int]] = []
        pos = 0
        while pos < len(text):
            match = _TOKEN.match(text, pos)
            if match is None or match.end() == pos:
                if _blank(text[pos:]):
                    break
                raise SchemaSyntaxError(f"unexpected character {text[pos]!r} at {pos}")
            kind = match.lastgroup or ""
            self.tokens.append((kind, match.group(kind), match.start(kind), match.end()))
            pos = match.end()
        self.index = 0

    def peek(self, offset: int = 0) -> str:
        """Text of the token `offset` ahead, or '' at the end."""
        position = self.index + offset
        return self.tokens[position][1] if position < len(self.tokens) else ""

    def kind(self) -> str:
        """Kind of the next token, or '' at the end."""
        return self.tokens[self.index][0] if self.index < len(self.tokens) else ""

    def start(self) -> int:
        """Offset where the next token starts (end of text at the end)."""
        return self.tokens[self.index][2] if self.index < len(self.tokens) else len(self.text)

    def last_end(self) -> int:
        """Offset just after the previous token."""
        return self.tokens[self.index - 1][3] if self.index else 0

    def take(self, expected: str | None = None) -> str:
        """Consume one token, checking its text when `expected` is given."""
        if self.index >= len(self.tokens):
            raise SchemaSyntaxError(f"unexpected end of schema, expected {expected or 'token'}")
        value = self.tokens[self.index][1]
        if expected is not None and value != expected:
            raise SchemaSyntaxError(f"expected {expected!r}, got {value!r} at {self.start()}")
        self.index += 1
        return value

    def accept(self, value: str) -> bool:
        """Consume the next token if it is `value`."""
        if self.peek() == value:
            self.index += 1
            return True
        return False


def _alias_set(lex: _Lexer) -> str:
    if lex.accept("*"):
        return "*"
    if lex.kind() != "ident":
        raise SchemaSyntaxError(f"expected an alias set, got {lex.peek()!r} at {lex.start()}")
    return lex.take()


def _alias_sets(lex: _Lexer) -> tuple[str, ...]:
    sets = [_alias_set(lex)]
    while lex.accept("|"):
        sets.append(_alias_set(lex))
    return tuple(sets)


def _alias(lex: _Lexer) -> AliasInfo:
    """Parse `(a)`, `(a!)`, `(a|b)`, `(*)`, `(a -> *)`, `(a! -> a|b)` after the opening
    parenthesis."""
    lex.take("(")
    before = _alias_sets(lex)
    is_write = lex.accept("!")
    after = _alias_sets(lex) if lex.accept("->") else before
    lex.take(")")
    return AliasInfo(before, after, is_write)


def _alias_annotation(lex: _Lexer, at: int) -> AliasInfo | None:
    """An alias annotation where torch allows one (after a base type, after `[]`, after a
    sized list): `(…)`, the shorthand `!` (a fresh written set), or none."""
    if lex.peek() == "(":
        return _alias(lex)
    if lex.accept("!"):
        return AliasInfo((f"${at}",), (f"${at}",), True)
    return None


_CONTAINERS = {"Dict", "Future", "RRef", "Union", "Await", "tuple", "Tuple", "Optional", "List"}


def _base_type(lex: _Lexer) -> str:
    """A base type name, qualified names and container types spelled out in full."""
    if lex.peek() == "(":
        lex.take("(")
        inner = [] if lex.peek() == ")" else [str(_type(lex))]
        while lex.accept(","):
            inner.append(str(_type(lex)))
        lex.take(")")
        return f"({', '.join(inner)})"
    if lex.kind() != "ident":
        raise SchemaSyntaxError(f"expected a type, got {lex.peek()!r} at {lex.start()}")
    name = lex.take()
    while lex.peek() == "." and lex.peek(1).isidentifier():
        lex.take(".")
        name += "." + lex.take()
    if name in _CONTAINERS and lex.peek() == "(":
        lex.take("(")
        types = [_type(lex)]
        while lex.accept(","):
            types.append(_type(lex))
        lex.take(")")
        if name == "Dict" and (types[0].suffix or types[0].base not in _DICT_KEYS):
            raise SchemaSyntaxError(f"a Dict cannot have {types[0]} keys (torch: only "
                                    f"{', '.join(sorted(_DICT_KEYS))})")  # fmt: skip
        name = f"{name}({', '.join(str(t) for t in types)})"
    return name


_DICT_KEYS = {"int", "SymInt", "bool", "float", "complex", "Tensor", "str", "Device"}
"""Key types torch accepts for a `Dict` (`DictType::create`; bool and SymInt as int)."""
_LIST_DEFAULTS = {"int", "SymInt", "bool", "float", "complex", "ScalarType", "Layout",
                  "MemoryFormat"}  # fmt: skip
"""Element types whose lists torch gives a default value (`parseDefaultValue`)."""


def _check_default(spec: TypeSpec, default: str) -> None:
    """Reject the defaults torch's schema parser rejects: a list's default must be a list
    (a single value only with a size, `int[2] x=1`), of an element type it can parse, and never
    None unless the list is optional; an optional list's default is None or a single value."""
    optional = spec.suffix.endswith("?")
    body = spec.suffix[:-1] if optional else spec.suffix
    if not body.endswith("]"):
        return  # not a list: torch is lenient with single values
    if optional:
        if default.startswith("["):
            raise SchemaSyntaxError(f"default {default} of {spec}: torch expects None or a value")
        return
    cut = body.rfind("[")
    element, sized = spec.base + body[:cut], body[cut + 1 : -1] != ""
    if element not in _LIST_DEFAULTS:
        raise SchemaSyntaxError(f"torch gives no default to a list of {element}")
    if not default.startswith("[") and not sized:
        raise SchemaSyntaxError(f"default {default} of {spec}: expected a list")


def _type(lex: _Lexer, sized: bool = False) -> TypeSpec:
    """A full type as torch's `SchemaTypeParser::parseType` reads it: the base, an optional
    alias annotation, then any run of `[]` (each with an optional alias annotation on the
    list) and `?`; with `sized` (an argument or return, `parseArgument`), then one optional
    `[N]` list with its own optional annotation and `?`. An annotation anywhere else (after
    `?`, a second one in a row) is a syntax error, as it is for torch."""
    base = _base_type(lex)
    base_end = lex.last_end()
    alias = _alias_annotation(lex, base_end)
    suffix = ""
    while True:
        if lex.peek() == "[" and lex.peek(1) == "]":
            lex.take("[")
            lex.take("]")
            suffix += "[]"
            alias = _list_alias(lex, alias, base_end)
        elif lex.accept("?"):
            suffix += "?"
        else:
            break
    if sized and lex.peek() == "[":
        lex.take("[")
        if lex.kind() != "num" or not lex.peek().isdigit():
            raise SchemaSyntaxError(f"expected a list size, got {lex.peek()!r} at {lex.start()}")
        suffix += f"[{lex.take()}]"
        lex.take("]")
        alias = _list_alias(lex, alias, base_end)
        if lex.accept("?"):
            suffix += "?"
    return TypeSpec(base, suffix, alias, base_end)


def _list_alias(lex: _Lexer, element: AliasInfo | None, at: int) -> AliasInfo | None:
    """The list's own annotation after `[]`, else the element's (torch makes the list written
    when its elements are)."""
    container = _alias_annotation(lex, at)
    return container if container is not None else element


def _default(lex: _Lexer) -> str:
    """A default value as written: balanced brackets, up to the next top-level `,` or `)`."""
    start = lex.start()
    depth = 0
    while lex.peek() and not (depth == 0 and lex.peek() in {",", ")"}):
        token = lex.take()
        depth += token in {"[", "("}
        depth -= token in {"]", ")"}
    return lex.text[start : lex.last_end()].strip()


def _argument(lex: _Lexer, kwarg_only: bool, is_return: bool) -> Argument:
    spec = _type(lex, sized=True)
    name: str | None = None
    if lex.kind() == "ident":
        name = lex.take()
    elif not is_return:
        raise SchemaSyntaxError(f"argument of type {spec} has no name")
    default = _default(lex) if not is_return and lex.accept("=") else None
    if default is not None:
        _check_default(spec, default)
    return Argument(name, spec, default, kwarg_only)


def _arguments(lex: _Lexer) -> tuple[Argument, ...]:
    lex.take("(")
    args: list[Argument] = []
    kwarg_only = False
    while lex.peek() != ")":
        if args or kwarg_only:
            lex.take(",")
        if lex.accept("*"):
            kwarg_only = True
            continue
        if lex.accept("..."):
            continue
        args.append(_argument(lex, kwarg_only, is_return=False))
    lex.take(")")
    return tuple(args)


def _returns(lex: _Lexer) -> tuple[tuple[Argument, ...], tuple[int, int]]:
    start = lex.start()
    if lex.accept("..."):  # varret: any number of returns (`prim::` ops)
        return (), (start, lex.last_end())
    if lex.peek() == "(":
        lex.take("(")
        rets: list[Argument] = []
        while lex.peek() != ")":
            if rets:
                lex.take(",")
            if not lex.accept("..."):
                rets.append(_argument(lex, False, is_return=True))
        lex.take(")")
        return tuple(rets), (start, lex.last_end())
    ret = _argument(lex, False, is_return=True)
    return (ret,), (start, lex.last_end())


def _qualified_name(lex: _Lexer) -> tuple[str | None, str, str]:
    name = lex.take()
    namespace: str | None = None
    if lex.accept("::"):
        namespace, name = name, lex.take()
    overload = ""
    if lex.accept("."):
        overload = lex.take()
    return namespace, name, overload


def parse_schema(text: str) -> Schema:
    """Parse a full schema such as `ns::op.overload(Tensor(a!) out) -> ()`."""
    lex = _Lexer(text)
    if lex.kind() != "ident":
        raise SchemaSyntaxError(f"schema must start with an operator name: {text[:40]!r}")
    namespace, name, overload = _qualified_name(lex)
    arguments = _arguments(lex)
    lex.take("->")
    returns, span = _returns(lex)
    if lex.peek():
        raise SchemaSyntaxError(f"trailing text {lex.peek()!r} at {lex.start()}")
    return Schema(namespace, name, overload, arguments, returns, span, text)


def looks_like_schema(text: str) -> bool:
    """Cheap test before parsing: a name, an argument list and an arrow."""
    return "(" in text and "->" in text and text[:1].isidentifier()


def try_parse_schema(text: str) -> Schema | None:
    """`parse_schema`, or None when the text is not a schema (pybind docs, log strings)."""
    if not looks_like_schema(text):
        return None
    try:
        return parse_schema(text)
    except SchemaSyntaxError:
        return None
