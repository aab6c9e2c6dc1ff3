"""JSON documents broken in one named way (`--invalid-structure-rate`): each candidate is checked
with the schema's validator and kept only when it really is invalid."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterator
from typing import Any

from soakgate.mockserver.jsongen import JSON_KINDS, WORDS, Schema, dumps

STRAY_CHARS = "@#;}"
"""What a `not_json` violation slips into the document."""
TRIES = 24
"""Places tried per kind before the kind is given up for this document."""

_WRONG_VALUES: tuple[Any, ...] = ("text", 7, 2.5, True, None, [], {})


def violate(schema: Schema, value: Any, rng: random.Random) -> tuple[str, str] | None:
    """(kind, text): the valid document `value` broken in a way drawn from `rng` among those
    that apply to it (`jsongen.JSON_KINDS`); None when none does."""
    kinds = list(JSON_KINDS)
    rng.shuffle(kinds)
    for kind in kinds:
        text = _MAKERS[kind](schema, value, rng)
        if text is not None:
            return kind, text
    return None


def _truncated(schema: Schema, value: Any, rng: random.Random) -> str | None:
    """The document cut before its end (a number cut short may still be valid: then another
    cut)."""
    text = dumps(value)
    cuts = list(range(1, len(text)))
    rng.shuffle(cuts)
    for cut in cuts[:TRIES]:
        if not schema.accepts(text[:cut]):
            return text[:cut]
    return None


def _not_json(schema: Schema, value: Any, rng: random.Random) -> str | None:
    """A stray character slipped in (where it lands inside a string it is still JSON: another
    place is tried)."""
    text = dumps(value)
    places = list(range(len(text) + 1))
    rng.shuffle(places)
    for place in places[:TRIES]:
        broken = text[:place] + rng.choice(STRAY_CHARS) + text[place:]
        if not schema.accepts(broken):
            return broken
    return None


def _wrong_type(schema: Schema, value: Any, rng: random.Random) -> str | None:
    """One value (a property's, an item's; the whole document's last) of another JSON type."""
    document = copy.deepcopy(value)
    slots = list(_slots(document))
    rng.shuffle(slots)
    for container, key in [*slots, (None, None)]:
        current = document if container is None else container[key]
        replacements = [v for v in _WRONG_VALUES if _json_type(v) != _json_type(current)]
        rng.shuffle(replacements)
        for replacement in replacements:
            if container is None:
                candidate = replacement
            else:
                container[key] = replacement
                candidate = document
            text = dumps(candidate)
            if container is not None:
                container[key] = current
            if not schema.accepts(text):
                return text
    return None


def _missing_required(schema: Schema, value: Any, rng: random.Random) -> str | None:
    """A property removed whose absence the schema names (`required`)."""
    document = copy.deepcopy(value)
    places = [(obj, name) for obj in _values(document) if isinstance(obj, dict) for name in obj]
    rng.shuffle(places)
    for obj, name in places[:TRIES]:
        items = list(obj.items())
        del obj[name]
        text, failed = dumps(document), _fails_for(schema, document, {"required"})
        obj.clear()
        obj.update(items)
        if failed:
            return text
    return None


def _extra_property(schema: Schema, value: Any, rng: random.Random) -> str | None:
    """A property added where the schema allows none (`additionalProperties: false`)."""
    document = copy.deepcopy(value)
    objects = [obj for obj in _values(document) if isinstance(obj, dict)]
    rng.shuffle(objects)
    for obj in objects[:TRIES]:
        name = next((w for w in rng.sample(WORDS, 8) if w not in obj), None)
        if name is None:
            continue
        obj[name] = rng.choice(WORDS)
        text = dumps(document)
        failed = _fails_for(schema, document, {"additionalProperties", "unevaluatedProperties"})
        del obj[name]
        if failed:
            return text
    return None


def _fails_for(schema: Schema, document: Any, keywords: set[str]) -> bool:
    """Whether the document breaks the schema by one of `keywords` (inside anyOf/oneOf
    branches too)."""
    pending = list(schema.validator.iter_errors(document))
    while pending:
        error = pending.pop()
        if error.validator in keywords:
            return True
        pending.extend(error.context or ())
    return False


def _values(value: Any) -> Iterator[Any]:
    """The document and every value nested in it."""
    yield value
    children = (
        value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    )
    for child in children:
        yield from _values(child)


def _slots(value: Any) -> Iterator[tuple[Any, Any]]:
    """(container, key) of every value nested in the document."""
    if isinstance(value, dict):
        keys: Any = list(value)
    elif isinstance(value, list):
        keys = range(len(value))
    else:
        return
    for key in keys:
        yield value, key
        yield from _slots(value[key])


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    return type(value).__name__


_MAKERS: dict[str, Callable[[Schema, Any, random.Random], str | None]] = {
    "truncated": _truncated,
    "wrong_type": _wrong_type,
    "missing_required": _missing_required,
    "extra_property": _extra_property,
    "not_json": _not_json,
}
