"""A sidecar record checked field by field against the schema before it becomes a row (pure).

A sidecar (`store.unstored`) is a text file anyone can edit, so every field of every record is
checked for its type and range: a `seq` of "abc", a text of 12345, details that are a list, a
count past 64 bits where soakgate writes its own counters (seq, incarnation, attempts), token ids
that are not a list of integers, a field the record does not have. Values a server may send
that SQLite cannot hold as they are (a usage count past 64 bits, a token id past 32 bits, a lone
surrogate) are the server's: they pass here and are stored repaired (`store.repair`), as in a
soak. Each check raises ValueError with one line naming the field.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from soakgate.records import ERROR_CLASSES, Event, Generation, Run

INT64_MAX = 2**63 - 1
Check = Callable[[Any], bool]


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _name(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _counter(value: Any) -> bool:
    """One of soakgate's own counters: 0 .. 2^63 - 1."""
    return _integer(value) and 0 <= value <= INT64_MAX


def _time(value: Any) -> bool:
    """A finite number of seconds (Unix time, or a duration), never negative."""
    number = (isinstance(value, float) or _integer(value)) and not isinstance(value, bool)
    return number and math.isfinite(float(value)) and float(value) >= 0


def _number(value: Any) -> bool:
    return isinstance(value, float | int) and not isinstance(value, bool)


def _flag(value: Any) -> bool:
    return isinstance(value, bool)


def _optional(check: Check) -> Check:
    return lambda value: value is None or check(value)


def _list_of(check: Check) -> Check:
    return lambda value: isinstance(value, list) and all(check(v) for v in value)


def _object(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) for k in value)


def _scores(value: Any) -> bool:
    return _object(value) and all(_number(v) or v is None for v in value.values())


def _one_of(*allowed: str) -> Check:
    return lambda value: value in allowed


GENERATION: dict[str, tuple[Check, str]] = {
    "run_id": (_name, "a non-empty string"), "request_id": (_name, "a non-empty string"),
    "target": (_name, "a non-empty string"), "label": (_text, "a string"),
    "seq": (_counter, "an integer 0 .. 2^63-1"), "prompt_id": (_text, "a string"),
    "endpoint": (_one_of("completions", "chat"), "completions or chat"),
    "stream": (_flag, "true or false"), "started_at": (_time, "a time in seconds"),
    "ended_at": (_time, "a time in seconds"), "ttft_s": (_optional(_time), "seconds or null"),
    "prompt_tokens": (_optional(_integer), "an integer or null"),
    "completion_tokens": (_optional(_integer), "an integer or null"),
    "finish_reason": (_optional(_text), "a string or null"),
    "http_status": (_optional(lambda v: _integer(v) and 0 <= v <= 999), "an HTTP status or null"),
    "error_class": (_optional(_one_of(*ERROR_CLASSES)), "a known error class or null"),
    "error_detail": (_optional(_text), "a string or null"),
    "text": (_optional(_text), "a string or null"), "text_sha256": (_text, "a string"),
    "token_ids": (_optional(_list_of(_integer)), "a list of integers or null"),
    "scores": (_scores, "an object of numbers"), "details": (_object, "an object"),
    "flags": (_list_of(_text), "a list of strings"),
    "incarnation": (_counter, "an integer 0 .. 2^63-1"),
    "reference_divergence": (
        _optional(lambda v: _integer(v) and -1 <= v <= INT64_MAX), "an integer >= -1 or null"
    ),
    "attempts": (lambda v: _counter(v) and v >= 1, "an integer 1 .. 2^63-1"),
    "reference_score": (_optional(_number), "a number or null"),
    "suspect": (_optional(_flag), "true, false or null"),
    "gateway_retries": (_optional(_counter), "an integer 0 .. 2^63-1 or null"),
    "checks": (_list_of(_text), "a list of strings"),
}  # fmt: skip
RUN: dict[str, tuple[Check, str]] = {
    "run_id": (_name, "a non-empty string"), "label": (_text, "a string"),
    "targets": (_list_of(_name), "a list of names"), "started_at": (_time, "a time in seconds"),
    "load": (_object, "an object"), "detectors": (_object, "an object"),
    "software": (_object, "an object"), "ended_at": (_optional(_time), "a time or null"),
    "status": (_one_of("running", "completed", "interrupted", "failed"), "a run status"),
    "plan_sha256": (_optional(_text), "a string or null"),
    "campaign": (_optional(_text), "a string or null"),
}  # fmt: skip
EVENT: dict[str, tuple[Check, str]] = {
    "run_id": (_name, "a non-empty string"), "at": (_time, "a time in seconds"),
    "kind": (_name, "a non-empty string"), "target": (_optional(_text), "a string or null"),
    "data": (_object, "an object"),
}  # fmt: skip
_REQUIRED = {
    "generation": ("run_id", "request_id", "target", "label", "seq", "prompt_id", "endpoint",
                   "stream", "started_at", "ended_at"),
    "run": ("run_id", "label", "targets", "started_at"),
    "event": ("run_id", "at", "kind"),
}  # fmt: skip


def checked(kind: str, data: Any) -> Run | Generation | Event:
    """The record a sidecar line holds (`kind`: run, generation or event), every field checked;
    ValueError naming the first field that is missing, unknown or out of its type and range."""
    fields = {"generation": GENERATION, "run": RUN, "event": EVENT}.get(kind)
    if fields is None:
        raise ValueError(f"unknown record {kind!r} (expected run, generation or event)")
    if not isinstance(data, Mapping):
        raise ValueError(f"a {kind} must be an object, not {type(data).__name__}")
    for name in _REQUIRED[kind]:
        if name not in data:
            raise ValueError(f"{kind} field {name!r} is missing")
    for name, value in data.items():
        if name not in fields:
            raise ValueError(f"{kind} has no field {name!r}")
        check, expected = fields[name]
        if not check(value):
            raise ValueError(f"{kind} field {name!r} must be {expected}, not {_shown(value)}")
    record = {"generation": Generation, "run": Run, "event": Event}[kind]
    return record(**data)  # type: ignore[no-any-return]


def _shown(value: Any) -> str:
    """A short picture of a bad value for the one-line message."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
