"""Rows as SQLite can hold them: a server's impossible values become storable, with the raw
value kept in the row's details, so one bad answer never costs more than its own fidelity.

A server can send what JSON allows and SQLite refuses: a lone surrogate escape (`"\\ud800"`)
in a text, a count past 64 bits, a token id past 32 bits. The store first writes a batch as it
is (no cost on the ordinary path) and only on refusal stores each row through `storable`.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from soakgate.records import Event, Generation

SQLITE_INT_MIN, SQLITE_INT_MAX = -(2**63), 2**63 - 1
TOKEN_ID_MIN, TOKEN_ID_MAX = -(2**31), 2**31 - 1  # token ids are stored as int32
_SURROGATE = re.compile("[\ud800-\udfff]")  # in a Python str every surrogate is a lone one
_TEXT_FIELDS = ("text", "error_detail", "finish_reason", "prompt_id", "target", "label")
_INT_FIELDS = ("prompt_tokens", "completion_tokens", "http_status", "reference_divergence")
REPAIR_KEY = "unstorable"
"""The details key under which a repaired row keeps what was changed and the raw values."""


def without_surrogates(text: str) -> tuple[str, int]:
    """The text with each lone surrogate replaced by U+FFFD, and how many there were."""
    return _SURROGATE.subn("\ufffd", text)


def storable(generation: Generation) -> Generation:
    """A copy of the row that SQLite can store; what had to change is in `details`."""
    row = copy.copy(generation)
    row.details = dict(generation.details)
    notes: dict[str, Any] = {}
    for name in _TEXT_FIELDS:
        value = getattr(row, name)
        if isinstance(value, str):
            fixed, count = without_surrogates(value)
            if count:
                setattr(row, name, fixed)
                notes[name] = {"lone_surrogates": count}
    for name in _INT_FIELDS:
        value = getattr(row, name)
        if isinstance(value, int) and not SQLITE_INT_MIN <= value <= SQLITE_INT_MAX:
            setattr(row, name, None)
            notes[name] = str(value)
    ids = row.token_ids
    if ids is not None:
        bad = [i for i in ids if not TOKEN_ID_MIN <= i <= TOKEN_ID_MAX]
        if bad:
            row.token_ids = None
            notes["token_ids"] = {"count": len(ids), "out_of_range": len(bad), "first": str(bad[0])}
    row.details = storable_json(row.details)
    row.scores = storable_json(row.scores)
    if notes:
        row.details[REPAIR_KEY] = notes
    return row


def storable_event(event: Event) -> Event:
    """A copy of the event whose data SQLite can store."""
    return Event(event.run_id, event.at, event.kind, event.target, storable_json(event.data))


def storable_json(value: Any) -> Any:
    """A JSON value with lone surrogates replaced in its strings and keys, and integers past
    64 bits written as strings (so the stored JSON is valid UTF-8 and readable by any tool)."""
    if isinstance(value, str):
        return without_surrogates(value)[0]
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return value
    if isinstance(value, int):
        return value if SQLITE_INT_MIN <= value <= SQLITE_INT_MAX else str(value)
    if isinstance(value, dict):
        return {storable_json(str(k)): storable_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [storable_json(v) for v in value]
    return storable_json(str(value))
