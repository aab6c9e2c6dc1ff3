"""Structured-output requests: the dialects real servers accept, answers valid under them, and
answers broken in one named way (`--invalid-structure-rate`).

Dialects (one per request; two different fields are answered HTTP 400, as vLLM does):
OpenAI's `response_format` (`json_schema` with its `schema`, or `json_object`), llama.cpp's
`json_schema`, vLLM's `structured_outputs` (`json`, `regex`, `json_object`), older vLLM's
`guided_json` and `guided_regex`, and chat `tools` with `tool_choice` (absent, "auto",
"required" or a named function call a tool; "none" answers free text).
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from typing import Any

from soakgate.mockserver import jsongen, regexgen
from soakgate.mockserver.jsongen import WORDS, Schema
from soakgate.mockserver.violate import violate

STRUCTURE_FIELDS = frozenset(
    {"response_format", "json_schema", "structured_outputs", "guided_json", "guided_regex",
     "guided_choice", "guided_grammar", "tools"}
)  # fmt: skip
"""Body fields that ask for structure: a request naming none of them costs nothing more."""
_UNSUPPORTED = ("choice", "grammar", "structural_tag")
"""vLLM constraints the mock does not serve (answered HTTP 400, not ignored)."""
_ANY_OBJECT = {"type": "object"}
"""`json_object`, and a tool's arguments when it declares no parameters."""
_PIECE = re.compile(r"\s?[A-Za-z]+|\s?\d{1,3}|\s?[^\sA-Za-z\d]+|\s+")
"""How a structured answer is cut into tokens: words, short digit runs and punctuation runs,
each with the space before it (as a BPE tokenizer cuts JSON)."""


class BadStructure(ValueError):
    """A structure field the mock cannot serve (answered HTTP 400 with this message)."""


@dataclass(frozen=True, slots=True)
class Tool:
    """A function tool: its name and the schema of its arguments."""

    name: str
    parameters: Schema


@dataclass(frozen=True, slots=True)
class Structure:
    """What a request asks its answer to be."""

    kind: str
    """`json_schema`, `regex` or `tools` (the ground truth's `structured`)."""
    schema: Schema | None = None
    pattern: regexgen.Pattern | None = None
    tools: tuple[Tool, ...] = ()
    named: str | None = None
    """The tool `tool_choice` names; None: the answer picks one."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """The tool call an answer makes (its arguments are the answer's text)."""

    call_id: str
    name: str


@dataclass(frozen=True, slots=True)
class Answer:
    """A structured answer before it is cut into tokens."""

    text: str
    """The document, the matching string, or the tool call's arguments."""
    tool_call: ToolCall | None
    violation: str | None
    """How the answer was made invalid (the ground truth's `invalid_structure`); None: valid."""


def asks_structure(body: dict[str, Any]) -> bool:
    """Whether the body names a structure field (cheap: one pass over its keys)."""
    return not STRUCTURE_FIELDS.isdisjoint(body)


def parse_structure(endpoint: str, body: dict[str, Any]) -> Structure | None:
    """The structure a body asks for (None: free text); BadStructure says why it cannot be
    served."""
    given = {name: body[name] for name in sorted(STRUCTURE_FIELDS) if body.get(name) is not None}
    format_ = given.get("response_format")
    if isinstance(format_, dict) and format_.get("type") == "text":
        del given["response_format"]
    if body.get("tool_choice") == "none":
        given.pop("tools", None)
    if len(given) > 1:
        raise BadStructure(f"one structure per request, not {' and '.join(given)}")
    if not given:
        return None
    name, value = given.popitem()
    if name == "tools":
        if endpoint != "chat":
            raise BadStructure("tools are a chat feature: use /v1/chat/completions")
        return _tools(value, body.get("tool_choice"))
    if name == "guided_regex":
        return _regex(value, name)
    if name in ("json_schema", "guided_json"):
        return _schema(value, name)
    if name == "response_format":
        return _response_format(value)
    if name == "structured_outputs":
        return _structured_outputs(value)
    raise BadStructure(f"{name} is not supported by the mock (json schemas, regexes, tools)")


def _response_format(value: Any) -> Structure:
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "json_object":
        return _schema(_ANY_OBJECT, "response_format")
    inner = value.get("json_schema") if kind == "json_schema" else None
    if not isinstance(inner, dict) or "schema" not in inner:
        raise BadStructure(
            'response_format must be {"type": "json_schema", "json_schema": {"name": ..., '
            '"schema": ...}}, {"type": "json_object"} or {"type": "text"}'
        )
    return _schema(inner["schema"], "response_format.json_schema.schema")


def _structured_outputs(value: Any) -> Structure:
    if not isinstance(value, dict):
        raise BadStructure("structured_outputs must be an object")
    given = [k for k in ("json", "regex", "json_object", *_UNSUPPORTED) if value.get(k)]
    if len(given) != 1:
        raise BadStructure(
            "structured_outputs needs exactly one of json, regex, json_object"
            + (f", not {' and '.join(given)}" if given else "")
        )
    key = given[0]
    if key in _UNSUPPORTED:
        raise BadStructure(f"structured_outputs.{key} is not supported by the mock")
    if key == "regex":
        return _regex(value[key], "structured_outputs.regex")
    return _schema(_ANY_OBJECT if key == "json_object" else value[key], f"structured_outputs.{key}")


def _schema(value: Any, field: str) -> Structure:
    return Structure("json_schema", schema=_compiled_schema(value, field))


def _compiled_schema(value: Any, field: str) -> Schema:
    if isinstance(value, str):  # vLLM takes a schema as JSON text too
        try:
            value = json.loads(value)
        except ValueError:
            raise BadStructure(f"{field} is not valid JSON") from None
    if not isinstance(value, dict | bool):
        raise BadStructure(f"{field} must be a JSON schema (an object)")
    try:
        return jsongen.compile_schema(json.dumps(value, separators=(",", ":")))
    except jsongen.UnsupportedSchema as exc:
        raise BadStructure(f"{field}: {exc}") from None


def _regex(value: Any, field: str) -> Structure:
    if not isinstance(value, str):
        raise BadStructure(f"{field} must be a string")
    try:
        return Structure("regex", pattern=regexgen.compile_pattern(value))
    except regexgen.UnsupportedPattern as exc:
        raise BadStructure(f"{field}: {exc}") from None


def _tools(value: Any, choice: Any) -> Structure:
    if not isinstance(value, list) or not value:
        raise BadStructure("tools must be a non-empty list")
    tools = []
    for tool in value:
        function = tool.get("function") if isinstance(tool, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not name or tool.get("type", "function") != "function":
            raise BadStructure('each tool must be {"type": "function", "function": {"name": ...}}')
        assert isinstance(function, dict)
        parameters = function.get("parameters", _ANY_OBJECT)
        tools.append(Tool(name, _compiled_schema(parameters, f"tool {name}'s parameters")))
    named = None
    if isinstance(choice, dict):
        function = choice.get("function")
        named = function.get("name") if isinstance(function, dict) else None
        if choice.get("type") != "function" or named not in {t.name for t in tools}:
            raise BadStructure(f"tool_choice {json.dumps(choice)} names none of the tools")
    elif choice not in (None, "auto", "required"):
        raise BadStructure('tool_choice must be "none", "auto", "required" or a named function')
    return Structure("tools", tools=tuple(tools), named=named)


def answer(structure: Structure, rng: random.Random, invalid: bool) -> Answer:
    """A valid answer drawn from the request's `rng`; with `invalid`, broken in a way drawn
    from it among those that apply (still valid, violation None, when none applies)."""
    if structure.pattern is not None:
        pattern = structure.pattern
        text = regexgen.matching(pattern, rng)
        if invalid and (broken := regexgen.mismatching(pattern, text, rng)) is not None:
            return Answer(broken, None, "mismatch")
        return Answer(text, None, None)
    if structure.schema is not None:
        return _document(structure.schema, rng, invalid, None)
    tool = next((t for t in structure.tools if t.name == structure.named), None)
    tool = tool or rng.choice(structure.tools)
    call = ToolCall(f"call_{rng.getrandbits(96):024x}", tool.name)
    if not invalid:
        return _document(tool.parameters, rng, False, call)
    if rng.random() < 0.5:
        arguments = _document(tool.parameters, rng, True, call)
        if arguments.violation is not None:
            return Answer(arguments.text, call, "bad_arguments")
    valid = _document(tool.parameters, rng, False, call)
    names = {t.name for t in structure.tools}
    unknown = f"{rng.choice(WORDS)}_{rng.choice(WORDS)}"
    while unknown in names:
        unknown += "_" + rng.choice(WORDS)
    return Answer(valid.text, ToolCall(call.call_id, unknown), "unknown_tool")


def _document(schema: Schema, rng: random.Random, invalid: bool, call: ToolCall | None) -> Answer:
    value = schema.instance(rng)
    if invalid and (broken := violate(schema, value, rng)) is not None:
        return Answer(broken[1], call, broken[0])
    return Answer(jsongen.dumps(value), call, None)


def pieces_of(text: str) -> list[str]:
    """The answer's text as tokens (they join back to it exactly)."""
    return _PIECE.findall(text)
