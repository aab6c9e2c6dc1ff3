"""JSON documents valid under a JSON schema, drawn from a request's random stream, and documents
that break it in one named way.

Written by hand: the libraries that generate instances (hypothesis-jsonschema) are built for
property tests (shrinking, strategies), far too slow per request. Every document is checked with
`jsonschema` before it is answered; a schema the generator cannot satisfy is refused when first
seen (the mock answers HTTP 400).
"""

from __future__ import annotations

import copy
import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeGuard

from soakgate.mockserver import regexgen
from soakgate.mockserver.vocab import VOCAB, WORD_IDS

WORDS = tuple(VOCAB[i].strip() for i in WORD_IDS)
"""The mock's plain words: what generated strings and keys are made of."""
MAX_DEPTH = 5
"""Below this nesting optional properties and items are left out (recursive schemas end)."""
LIMIT_DEPTH = 40
"""A schema whose documents must nest deeper than this is refused."""
ATTEMPTS = 8
"""Draws tried before the document found when the schema was compiled is answered instead."""
JSON_KINDS = ("truncated", "wrong_type", "missing_required", "extra_property", "not_json")
"""The ways a JSON document is made invalid (`violate`)."""


class UnsupportedSchema(ValueError):
    """A schema that is not valid, or that the generator cannot produce documents for."""


@dataclass(frozen=True, slots=True)
class Schema:
    """A checked schema, its validator, and one document valid under it."""

    schema: Any
    validator: Any
    """A `jsonschema` validator of the schema's own draft (2020-12 when it names none)."""
    example: Any

    def accepts(self, text: str) -> bool:
        """Whether `text` is one strict JSON document valid under the schema."""
        try:
            value = json.loads(text, parse_constant=_no_constant)
        except ValueError:
            return False
        return bool(self.validator.is_valid(value))

    def instance(self, rng: random.Random) -> Any:
        """A document valid under the schema, drawn from `rng`."""
        for _ in range(ATTEMPTS):
            value = _Generator(self.schema, rng).value(self.schema, 0)
            if self.validator.is_valid(value):
                return value
        return copy.deepcopy(self.example)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def dumps(value: Any) -> str:
    """A document as a server writes it."""
    return json.dumps(value, ensure_ascii=False)


@lru_cache(maxsize=256)
def compile_schema(text: str) -> Schema:
    """Check a schema (given as JSON text: the cache's key) and find one document for it;
    UnsupportedSchema says why it cannot be served. Cached: soaks repeat their schemas."""
    import jsonschema

    schema = json.loads(text)
    if not isinstance(schema, dict | bool):
        raise UnsupportedSchema("a JSON schema must be an object")
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise UnsupportedSchema(f"invalid JSON schema: {exc.message}") from None
    validator = cls(schema)
    for seed in range(ATTEMPTS):
        try:
            value = _Generator(schema, random.Random(seed)).value(schema, 0)
        except RecursionError:
            break
        if validator.is_valid(value):
            return Schema(schema, validator, value)
    raise UnsupportedSchema("the mock cannot generate a document valid under this schema")


class _Generator:
    """Draws one document; `root` resolves `$ref`s."""

    def __init__(self, root: Any, rng: random.Random) -> None:
        self.root = root
        self.rng = rng

    def value(self, schema: Any, depth: int) -> Any:
        """A value for `schema` at nesting `depth`."""
        if depth > LIMIT_DEPTH:
            raise UnsupportedSchema(f"documents of this schema nest deeper than {LIMIT_DEPTH}")
        if schema is True or schema == {}:
            return self.word()
        if not isinstance(schema, dict):
            raise UnsupportedSchema("the schema admits no value")
        schema = self.flatten(schema, depth)
        rng = self.rng
        if "const" in schema:
            return copy.deepcopy(schema["const"])
        if "enum" in schema:
            return copy.deepcopy(rng.choice(schema["enum"]))
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = rng.choice(kind) if kind else None
        if kind is None:
            kind = _inferred_type(schema)
        if kind == "object":
            return self.object(schema, depth)
        if kind == "array":
            return self.array(schema, depth)
        if kind == "integer":
            return self.integer(schema)
        if kind == "number":
            return self.number(schema)
        if kind == "boolean":
            return rng.random() < 0.5
        if kind == "null":
            return None
        return self.string(schema)

    def flatten(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        """The schema with its `$ref`, `allOf` and one `anyOf`/`oneOf` branch merged in."""
        for _ in range(LIMIT_DEPTH):
            if "$ref" in schema:
                rest = {k: v for k, v in schema.items() if k != "$ref"}
                schema = _merge(self.resolve(schema["$ref"]), rest)
            elif "allOf" in schema:
                rest = {k: v for k, v in schema.items() if k != "allOf"}
                for part in schema["allOf"]:
                    rest = _merge(rest, part if isinstance(part, dict) else {})
                schema = rest
            elif "anyOf" in schema or "oneOf" in schema:
                key = "anyOf" if "anyOf" in schema else "oneOf"
                branch = self.rng.choice(schema[key])
                rest = {k: v for k, v in schema.items() if k != key}
                schema = _merge(rest, branch if isinstance(branch, dict) else {})
            else:
                return schema
        raise UnsupportedSchema(f"$ref chains longer than {LIMIT_DEPTH} (depth {depth})")

    def resolve(self, ref: Any) -> dict[str, Any]:
        """The local schema a `$ref` points to ("#", "#/$defs/...", "#/definitions/...")."""
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise UnsupportedSchema(f"only local $ref are supported by the mock, not {ref!r}")
        target = self.root
        for part in filter(None, ref[1:].split("/")):
            part = part.replace("~1", "/").replace("~0", "~")
            try:
                target = target[int(part) if isinstance(target, list) else part]
            except (KeyError, IndexError, TypeError, ValueError):
                raise UnsupportedSchema(f"$ref {ref!r} points nowhere") from None
        if target is True:
            return {}
        if not isinstance(target, dict):
            raise UnsupportedSchema(f"$ref {ref!r} does not point to a schema")
        return target

    def word(self) -> str:
        return self.rng.choice(WORDS)

    def object(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        rng = self.rng
        properties = schema.get("properties") or {}
        required = [name for name in schema.get("required", []) if isinstance(name, str)]
        extra = schema.get("additionalProperties", True)
        closed = extra is False or schema.get("unevaluatedProperties") is False
        out: dict[str, Any] = {}
        for name, sub in properties.items():
            if name in required or (depth < MAX_DEPTH and (closed or rng.random() < 0.5)):
                out[name] = self.value(sub, depth + 1)
        for name in required:
            if name not in out:
                out[name] = self.value(extra if isinstance(extra, dict) else {}, depth + 1)
        wanted = schema.get("minProperties", 0)
        if not properties and not closed and "patternProperties" not in schema:
            wanted = max(wanted, rng.randint(0, 3) if depth < MAX_DEPTH else 0)
        for name in properties:
            if len(out) >= wanted:
                break
            out.setdefault(name, self.value(properties[name], depth + 1))
        while len(out) < wanted and not closed:
            out.setdefault(self.word(), self.value(extra if isinstance(extra, dict) else {}, depth))
        return out

    def array(self, schema: dict[str, Any], depth: int) -> list[Any]:
        rng = self.rng
        items = schema.get("items", True)
        prefix = schema.get("prefixItems") or []
        if isinstance(items, list):  # drafts 4-7: a tuple of item schemas
            prefix, items = items, schema.get("additionalItems", True)
        least = schema.get("minItems", 0)
        most = min(schema.get("maxItems", least + 3), least + 3)
        if depth >= MAX_DEPTH:
            most = least
        count = rng.randint(least, max(least, most))
        if items is False:
            count = min(count, len(prefix))
        out: list[Any] = []
        for index in range(count):
            sub = prefix[index] if index < len(prefix) else items
            value = self.value(sub, depth + 1)
            for _ in range(ATTEMPTS if schema.get("uniqueItems") else 0):
                if value not in out:
                    break
                value = self.value(sub, depth + 1)
            out.append(value)
        return out

    def string(self, schema: dict[str, Any]) -> str:
        rng = self.rng
        least, most = schema.get("minLength", 0), schema.get("maxLength")
        if "pattern" in schema:
            try:
                pattern = regexgen.compile_pattern(schema["pattern"])
            except regexgen.UnsupportedPattern as exc:
                raise UnsupportedSchema(str(exc)) from None
            # jsonschema's `pattern` is a search, not a full match: a full match satisfies it
            for _ in range(ATTEMPTS):
                text = regexgen.matching(pattern, rng)
                if least <= len(text) <= (most if most is not None else len(text)):
                    return text
            return text
        formatted = _FORMATS.get(schema.get("format", ""))
        if formatted is not None:
            return formatted(rng)
        text = " ".join(self.word() for _ in range(rng.randint(1, 3)))
        while len(text) < least:
            text += " " + self.word()
        if most is not None and len(text) > most:
            text = text[:most]
            if len(text.rstrip()) >= least:
                text = text.rstrip()
        return text

    def integer(self, schema: dict[str, Any]) -> int:
        (low, low_open), (high, high_open) = _bounds(schema)
        first = math.floor(low) + 1 if low_open else math.ceil(low)
        last = math.ceil(high) - 1 if high_open else math.floor(high)
        step = schema.get("multipleOf")
        if isinstance(step, int) and step > 0:
            first, last = -(-first // step), last // step
            return step * self.rng.randint(first, max(first, last))
        return self.rng.randint(first, max(first, last))

    def number(self, schema: dict[str, Any]) -> float:
        (low, low_open), (high, high_open) = _bounds(schema)
        step = schema.get("multipleOf")
        if isinstance(step, int | float) and step > 0:
            first, last = math.ceil(low / step), math.floor(high / step)
            return round(step * self.rng.randint(first, max(first, last)), 10)
        value = round(self.rng.uniform(low, high), 2)
        if not low <= value <= high or (low_open and value == low) or (high_open and value == high):
            value = (low + high) / 2
        return value


Bound = tuple[float, bool]
"""A numeric bound and whether it is exclusive."""


def _bounds(schema: dict[str, Any]) -> tuple[Bound, Bound]:
    """The numeric range a schema allows, a span of 100 where it leaves a side open."""
    low = _bound(schema, "minimum", "exclusiveMinimum", lower=True)
    high = _bound(schema, "maximum", "exclusiveMaximum", lower=False)
    if low is None and high is None:
        return (0.0, False), (100.0, False)
    if low is None:
        assert high is not None
        return (high[0] - 100, False), high
    if high is None:
        return low, (low[0] + 100, False)
    return low, high


def _bound(schema: dict[str, Any], inclusive: str, exclusive: str, lower: bool) -> Bound | None:
    """The tighter of a side's inclusive and exclusive bounds (draft 4's boolean form too)."""
    value, open_value = schema.get(inclusive), schema.get(exclusive)
    if isinstance(open_value, bool):
        return (float(value), open_value) if _number(value) else None
    found = [(float(v), is_open) for v, is_open in ((value, False), (open_value, True))
             if _number(v)]  # fmt: skip
    if not found:
        return None
    # the tighter bound: the higher low (the lower high), exclusive on a tie
    return max(found) if lower else min(found, key=lambda bound: (bound[0], not bound[1]))


def _number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _inferred_type(schema: dict[str, Any]) -> str:
    """The type a schema without `type` implies by its keywords (a word when none)."""
    keys = schema.keys()
    if keys & {"properties", "required", "additionalProperties", "minProperties"}:
        return "object"
    if keys & {"items", "prefixItems", "minItems", "maxItems"}:
        return "array"
    if keys & {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}:
        return "number"
    return "string"


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Two schemas that both apply, as one (properties joined, required united)."""
    merged = dict(base)
    for key, value in extra.items():
        if key == "properties" and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        elif key == "required" and isinstance(merged.get(key), list):
            merged[key] = list(dict.fromkeys([*merged[key], *value]))
        else:
            merged[key] = value
    return merged


def _date(rng: random.Random) -> str:
    return f"20{rng.randint(10, 29)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


def _time(rng: random.Random) -> str:
    return f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z"


_FORMATS: dict[str, Callable[[random.Random], str]] = {
    "date": _date,
    "time": _time,
    "date-time": lambda rng: f"{_date(rng)}T{_time(rng)}",
    "email": lambda rng: f"{rng.choice(WORDS)}@{rng.choice(WORDS)}.example",
    "uuid": lambda rng: "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}".format(
        *(rng.getrandbits(bits) for bits in (32, 16, 12, 12, 48))
    ),
    "uri": lambda rng: f"https://{rng.choice(WORDS)}.example/{rng.choice(WORDS)}",
    "ipv4": lambda rng: ".".join(str(rng.randint(1, 254)) for _ in range(4)),
}
