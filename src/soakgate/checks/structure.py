"""Structured output (`invalid_structure`): an answer that breaks the structure its request asked
for — a JSON schema, a regular expression, tool calls.

Serving stacks constrain such answers while decoding (a grammar, a token mask); under load the
constraint is one more piece of state per request, and when it is lost or applied to the wrong
request the answer stops matching while the request still returns HTTP 200. Every answer to a
structured prompt (`prompts.Structure`) is validated here:

- **JSON schema**: the answer's text parsed as strict JSON (`orjson`: no NaN, no trailing text)
  and validated with `jsonschema_rs` (the schema's own draft; 0.2 us per answer where the
  Python `jsonschema` took 36 us); the first error is the evidence.
- **regex**: the whole answer must match the pattern (`re.fullmatch`).
- **tools**: every tool call names one of the tools (the one `tool_choice` names, when it names
  one), and its arguments parse as a JSON object valid under that tool's `parameters`;
  `tool_choice` "required" or a named tool needs at least one call.

An answer the budget cut (`finish_reason` "length") is judged on what it holds: flagged only
when no continuation could make it valid — text that cannot be completed to JSON
(`checks.jsonprefix`) or only to a document of a type the schema's top does not allow, a prefix
no string of the pattern starts with (`regex`'s partial matching), tool arguments that cannot be
completed to JSON. A cut is the client's budget; a cut document's
schema is not judged (a missing required property may still have come). An answer to a free
prompt of a run that mixes both is not judged: it carries `-invalid_structure` in its checks
(`records.UNJUDGED`), so the report's rate counts only the answers to structured prompts.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from soakgate.prompts import Prompt, Structure
from soakgate.records import UNJUDGED, Generation, Run

INVALID_STRUCTURE = "invalid_structure"
_NOT_JUDGED = UNJUDGED + INVALID_STRUCTURE
EVIDENCE_CHARS = 300
"""Characters of an error message kept as evidence."""

Validate = Callable[[Generation], dict[str, Any] | None]
"""A structure's validator: None when the answer is valid, else its evidence."""


class StructureCheck:
    """Validates every answer to a structured prompt (a `load.spec.AnswerCheck`)."""

    def __init__(self) -> None:
        self._validators: dict[str, Validate | None] = {}

    def sent(self, seq: int, prompt: Prompt, same_as: int | None = None) -> Prompt:
        """Know the prompt's structure (validators are built once per prompt)."""
        if prompt.prompt_id not in self._validators:
            structure = prompt.structure
            self._validators[prompt.prompt_id] = None if structure is None else validator(structure)
        return prompt

    def judge(self, generations: Sequence[Generation]) -> None:
        """Nothing: every answer was judged as it came (`answered`)."""

    def answered(self, generation: Generation, outcome: Any = None) -> None:
        """Judge a clean answer: a failure is named in `generation.checks` with its evidence in
        its details; an answer not judged is marked so."""
        if generation.error_class is not None:
            return
        validate = self._validators.get(generation.prompt_id)
        if validate is None:
            generation.checks.append(_NOT_JUDGED)
            return
        evidence = validate(generation)
        if evidence is not None:
            generation.checks.append(INVALID_STRUCTURE)
            generation.details[INVALID_STRUCTURE] = evidence


def validator(structure: Structure) -> Validate:
    """The validator of one structure."""
    if structure.kind == "regex":
        import regex

        pattern = regex.compile(structure.spec)

        def match(generation: Generation) -> dict[str, Any] | None:
            text, cut = generation.text or "", generation.finish_reason == "length"
            if pattern.fullmatch(text, partial=cut):
                return None
            if cut:
                return {"kind": "regex", "error": f"no match of {_cut(structure.spec)} starts so"}
            return {"kind": "regex", "error": f"does not match {_cut(structure.spec)}"}

        return match
    if structure.kind == "json_schema":
        check = _schema_check(structure.value())

        def document(generation: Generation) -> dict[str, Any] | None:
            error = check(generation.text or "", generation.finish_reason == "length")
            return None if error is None else {"kind": "json_schema", **error}

        return document
    return _tools_validator(structure)


def _schema_check(schema: Any) -> Callable[[str, bool], dict[str, Any] | None]:
    """Parse a text as strict JSON and validate it under `schema`: None, or the first error. A
    text the budget cut (True) that is not yet a whole document is only asked whether it can
    still be completed to one."""
    import jsonschema_rs

    checker = jsonschema_rs.validator_for(schema)
    types, allowed = _top_types(schema), _top_keys(schema)

    def check(text: str, cut: bool) -> dict[str, Any] | None:
        try:
            value = _loads(text)
        except ValueError as exc:
            if cut and "after document" not in str(exc) and "Extra data" not in str(exc):
                return _unfinishable(text, types, allowed)
            return {"error": f"not JSON: {_cut(str(exc))}"}
        if checker.is_valid(value):
            return None
        error = next(iter(checker.iter_errors(value)))
        at = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.instance_path)
        return {"error": _cut(error.message), "at": at}

    return check


def _loads(text: str) -> Any:
    """Strict JSON (no NaN, no Infinity, nothing after the document). orjson first; a number
    past a double's range (JSON sets none, and a grammar's digit rule writes them: `1e999`, a
    400-digit integer) is read by the standard library instead, a float held at the largest
    double so that the schema still compares it."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        if "infinity" not in str(exc):
            raise
    return json.loads(text, parse_float=_held_float, parse_constant=_no_constant)


def _held_float(text: str) -> float:
    value = float(text)
    return math.copysign(sys.float_info.max, value) if math.isinf(value) else value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _unfinishable(
    text: str, types: set[str] | None, allowed: frozenset[str] | None
) -> dict[str, Any] | None:
    """None when the cut text can still be completed to a JSON document of one of the schema's
    top-level `types` (None: any) whose top-level keys are all `allowed` (None: any), else why
    not."""
    from soakgate.checks.jsonprefix import prefix_error  # regex: only where an answer was cut

    keys: list[str] = []
    error = prefix_error(text, keys)
    if error is not None:
        return {"error": f"cut, and cannot be completed to JSON: {error}"}
    extra = [key for key in keys if allowed is not None and key not in allowed]
    if extra:
        return {"error": f"cut, and has a property the schema does not allow: {_cut(extra[0])!r}"}
    start = text.lstrip(" \t\n\r")[:1]
    begun = _BEGINS.get(start)
    if types is not None and begun is not None and not begun & types:
        return {"error": f"cut, and a {'/'.join(sorted(begun))} where the schema asks for "
                         f"{'/'.join(sorted(types))}"}  # fmt: skip
    return None


_BEGINS = {"{": {"object"}, "[": {"array"}, '"': {"string"}, "t": {"boolean"},
           "f": {"boolean"}, "n": {"null"}, "-": {"number", "integer"},
           **{d: {"number", "integer"} for d in "0123456789"}}  # fmt: skip
"""The types a document beginning with each character can have."""


def _top_keys(schema: Any) -> frozenset[str] | None:
    """The only keys the schema's top object may have (None: any: it does not close them, or
    closes them in a way not read here)."""
    if _top_types(schema) is None or schema.get("additionalProperties") is not False:
        return None
    if "patternProperties" in schema or not isinstance(schema.get("properties", {}), dict):
        return None
    return frozenset(schema.get("properties", {}))


def _top_types(schema: Any) -> set[str] | None:
    """The types the schema allows at the top (None: it does not say, or says it in a way not
    read here: a combinator, a reference)."""
    if not isinstance(schema, dict) or any(
        k in schema for k in ("anyOf", "oneOf", "allOf", "$ref", "not", "if")
    ):
        return None
    kind = schema.get("type")
    kinds = {kind} if isinstance(kind, str) else set(kind) if isinstance(kind, list) else None
    if kinds is not None and "number" in kinds:
        kinds.add("integer")  # a number's digits may yet become an integer's, or not
    return kinds


_ANY_OBJECT = {"type": "object"}
"""A tool's arguments when it declares no parameters: still a JSON object."""


def _tools_validator(structure: Structure) -> Validate:
    tools = {t["function"]["name"]: t["function"] for t in structure.value()}
    checks = {name: _schema_check(f.get("parameters", _ANY_OBJECT)) for name, f in tools.items()}
    choice = structure.choice()
    named = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    needed = named is not None or choice == "required"

    def calls(generation: Generation) -> dict[str, Any] | None:
        made = generation.details.get("tool_calls") or []
        cut = generation.finish_reason == "length"
        if choice == "none" and made:
            return {"kind": "tools", "error": "tool calls made where tool_choice is none"}
        if needed and not made and not cut:
            return {"kind": "tools", "error": f"no tool call where tool_choice is {choice!r}"}
        for n, call in enumerate(made):
            name = call.get("name", "")
            if name not in tools or (named is not None and name != named):
                error_text = f"calls {_cut(name)!r}, not a tool asked for"
                return {"kind": "tools", "call": n, "error": error_text}
            error = checks[name](call.get("arguments", ""), cut)
            if error is not None:
                return {"kind": "tools", "call": n, "tool": name, **error}
        return None

    return calls


def _cut(text: str) -> str:
    return text if len(text) <= EVIDENCE_CHARS else text[: EVIDENCE_CHARS - 1] + "…"


def open_structure(run: Run, resumed: bool) -> StructureCheck:
    """The run's structure check (a `load.spec.OpenAnswerCheck`), recorded in its detectors so
    the report judges its rows."""
    run.detectors[INVALID_STRUCTURE] = {"judges": "answers to structured prompts, not cut"}
    return StructureCheck()
