"""Schema strings inside compiled libraries, read as bytes: nothing is loaded or executed."""

from __future__ import annotations

import re

from soakgate.audit.model import Location, OpDef
from soakgate.audit.schema import try_parse_schema

BINARY_SUFFIXES = frozenset({".so", ".pyd", ".dylib"})
# Printable runs like `strings(1)`; compilers merge adjacent literals, so schemas are whole.
_PRINTABLE = re.compile(rb"[\x20-\x7e]{8,}")


def extract_binary(data: bytes, path: str) -> list[OpDef]:
    """Op definitions whose schema strings appear in a library, confirmed by the parser."""
    found: list[OpDef] = []
    seen: set[str] = set()
    for match in _PRINTABLE.finditer(data):
        run = match.group(0)
        if b"->" not in run or b"(" not in run:
            continue
        text = run.decode("ascii").strip()
        schema = try_parse_schema(text)
        if schema is None or text in seen:
            continue
        seen.add(text)
        namespace = schema.namespace or "?"
        name = schema.name + (f".{schema.overload}" if schema.overload else "")
        found.append(OpDef(f"{namespace}::{name}", schema, Location(path, 0), "binary"))
    return found


def schemas_in(data: bytes) -> dict[str, str]:
    """Op name (with overload) -> schema text for every schema string in a library."""
    return {op.qualname.split("::", 1)[1]: op.schema.text for op in extract_binary(data, "")}
