"""The schema torch infers for `m.def("name", fn)`: from the C++ signature, with no annotations.

`torch::Library::def(name, fn)` without a schema string derives the schema from `fn`'s
parameter and return types (c10's `infer_schema`): `at::Tensor&` and `const at::Tensor&` both
become a plain `Tensor`, so an op that writes its output looks pure to torch.compile. This
module spells that schema so the audit can judge it and `--fix` can write it out in full with
the written parameters marked (torch accepts an explicit schema that matches the inferred
one's types; argument names and alias annotations are not compared).

Hand-written (no library maps C++ types to schema types without compiling); the table follows
c10's `getTypePtr` for the types kernels use. Arguments are named after the C++ parameters,
not `_0, _1, ...` as torch names them, so findings and fixes name what the code names.
"""

from __future__ import annotations

import re

from soakgate.audit.schema import Schema, SchemaSyntaxError, parse_schema

_SCALARS = {
    "Tensor": "Tensor",
    "int64_t": "int",
    "SymInt": "SymInt",
    "double": "float",
    "bool": "bool",
    "string": "str",
    "string_view": "str",
    "Scalar": "Scalar",
    "ScalarType": "ScalarType",
    "Layout": "Layout",
    "Device": "Device",
    "MemoryFormat": "MemoryFormat",
    "Generator": "Generator",
    "Dimname": "Dimname",
    "IValue": "Any",
}
_LISTS = {"IntArrayRef": "int[]", "SymIntArrayRef": "SymInt[]", "TensorList": "Tensor[]"}
_TEMPLATE = re.compile(r"^(\w+)\s*<(.*)>$", re.DOTALL)


def schema_type(cpp: str) -> str | None:
    """The schema type torch infers for a C++ parameter or return type, None if unsupported."""
    text = re.sub(r"\b(?:const|volatile|struct|class|typename)\b", " ", cpp)
    text = re.sub(r"\s+", " ", text.replace("&", " ")).strip()
    text = re.sub(r"\b(?:at|c10|torch|std|caffe2)::", "", text).strip()
    if "*" in text:
        return None  # raw pointers cannot be registered
    template = _TEMPLATE.match(text)
    if template is None:
        return _SCALARS.get(text) or _LISTS.get(text)
    outer, inner = template.group(1), template.group(2).strip()
    if outer == "optional":
        element = schema_type(inner)
        return f"{element}?" if element and not element.endswith("?") else None
    if outer in {"vector", "ArrayRef", "List", "OptionalArrayRef"}:
        element = schema_type(inner)
        if element is None or "[" in element or element.endswith("?"):
            return None
        return f"{element}[]?" if outer == "OptionalArrayRef" else f"{element}[]"
    if outer == "array":
        parts = _split_top(inner)
        element = schema_type(parts[0]) if len(parts) == 2 else None
        return f"{element}[{parts[1].strip()}]" if element else None
    return None


def _split_top(text: str) -> list[str]:
    """Split template arguments on commas that are not nested in `<...>`."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        depth += {"<": 1, ">": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def returns_type(cpp: str) -> str | None:
    """`void` -> `()`, `std::tuple<A, B>` -> `(A, B)`, else the single type."""
    text = re.sub(r"\b(?:at|c10|torch|std)::", "", cpp).strip()
    text = re.sub(r"\b(?:inline|static|const|constexpr|extern)\b", " ", text).strip()
    if text == "void":
        return "()"
    template = _TEMPLATE.match(text.replace("&", "").strip())
    if template is not None and template.group(1) == "tuple":
        items = [schema_type(p) for p in _split_top(template.group(2))]
        known = [i for i in items if i is not None]
        return "(" + ", ".join(known) + ")" if len(known) == len(items) else None
    return schema_type(text)


def infer_schema(name: str, params: list[tuple[str, str]], returns: str) -> Schema | None:
    """The schema of `m.def(name, fn)` for `fn(params) -> returns`, None when not inferable."""
    args = []
    for index, (param, declaration) in enumerate(params):
        type_text = declaration
        if param:
            type_text = re.sub(rf"\b{re.escape(param)}\b(?=[^\w]*(?:=.*)?$)", " ", declaration)
        type_text = type_text.split("=", 1)[0]
        kind = schema_type(type_text)
        if kind is None:
            return None
        args.append(f"{kind} {param or f'_{index}'}")
    ret = returns_type(returns)
    if ret is None:
        return None
    try:
        return parse_schema(f"{name}({', '.join(args)}) -> {ret}")
    except SchemaSyntaxError:
        return None
