"""Prompt records, the JSONL loader and the round-robin / seeded-random picker."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soakgate.errors import ConfigError

STRUCTURE_KINDS = ("json_schema", "regex", "tools")
"""What a structured request constrains: a JSON schema, a regular expression, or tool calls."""


@dataclass(frozen=True, slots=True)
class Structure:
    """What a structured request asks its answer to be (`checks.structure` validates it).

    Held as canonical JSON text, so prompts stay hashable and equal when their structures are.
    """

    kind: str
    """One of STRUCTURE_KINDS."""
    spec: str
    """`json_schema`: the schema as JSON; `regex`: the pattern itself; `tools`: the tools
    list as JSON (OpenAI's `[{"type": "function", "function": {...}}]`)."""
    tool_choice: str = ""
    """`tools` only: the request's `tool_choice` as JSON ("": not sent, the server's auto)."""

    def value(self) -> Any:
        """The schema or tools list as parsed JSON (the pattern as a string)."""
        return self.spec if self.kind == "regex" else json.loads(self.spec)

    def choice(self) -> Any:
        """`tool_choice` as parsed JSON (None: not sent)."""
        return json.loads(self.tool_choice) if self.tool_choice else None

    @classmethod
    def of(cls, kind: str, value: Any, tool_choice: Any = None) -> Structure:
        """A structure from parsed values; a ConfigError says what is wrong with them."""
        if kind == "regex":
            import regex

            if not isinstance(value, str) or not value:
                raise ConfigError("a regex must be a non-empty string")
            try:
                regex.compile(value)
            except regex.error as exc:
                raise ConfigError(f"regex {value!r} does not compile: {exc}") from exc
            return cls(kind, value)
        if kind == "json_schema":
            value = _schema_of(value)
            _check_schema(value)
            return cls(kind, _canonical(value))
        if kind == "tools":
            _check_tools(value, tool_choice)
            choice = "" if tool_choice is None else _canonical(tool_choice)
            return cls(kind, _canonical(value), choice)
        kinds = ", ".join(STRUCTURE_KINDS)
        raise ConfigError(f"structure kind must be one of {kinds}, not {kind!r}")


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _schema_of(value: Any) -> Any:
    """A JSON schema from a bare schema or an OpenAI `response_format` object around one."""
    if isinstance(value, dict) and value.get("type") == "json_schema":
        inner = value.get("json_schema")
        if isinstance(inner, dict) and isinstance(inner.get("schema"), dict):
            return inner["schema"]
        raise ConfigError("a response_format of type json_schema needs json_schema.schema")
    return value


def _check_schema(schema: Any) -> None:
    """A ConfigError when `schema` is not a valid JSON schema (its own metaschema says)."""
    import jsonschema_rs

    if not isinstance(schema, dict):
        raise ConfigError("a JSON schema must be an object")
    try:
        jsonschema_rs.validator_for(schema)
    except (jsonschema_rs.ValidationError, ValueError) as exc:
        message = getattr(exc, "message", str(exc)).splitlines()[0]
        raise ConfigError(f"not a valid JSON schema: {message}") from exc


def _check_tools(tools: Any, tool_choice: Any) -> None:
    """A ConfigError when `tools` is not a list of function tools with valid parameter
    schemas, or `tool_choice` names none of them."""
    if not isinstance(tools, list) or not tools:
        raise ConfigError("tools must be a non-empty list of function tools")
    names = []
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ConfigError('each tool needs {"type": "function", "function": {"name": ...}}')
        names.append(function["name"])
        if "parameters" in function:
            _check_schema(function["parameters"])
    if tool_choice is None or tool_choice in ("auto", "required", "none"):
        return
    named = tool_choice.get("function", {}).get("name") if isinstance(tool_choice, dict) else None
    if named not in names:
        listed = ", ".join(names)
        raise ConfigError(f"tool_choice {tool_choice!r} names none of the tools ({listed})")


@dataclass(frozen=True, slots=True)
class Prompt:
    """One prompt, usable on both the completions and the chat endpoint."""

    prompt_id: str
    """Stable id stored with every generation that used it."""
    text: str
    """The prompt text (completions) and the user message (chat)."""
    system: str | None = None
    """Optional system message for the chat endpoint."""
    structure: Structure | None = None
    """What the answer must be (a JSON schema, a regex, tool calls); None: free text."""

    def with_text(self, text: str) -> Prompt:
        """This prompt with another text (what a canary makes of it on every request: a third
        of `dataclasses.replace`'s cost; every other field kept, as a test checks)."""
        return Prompt(self.prompt_id, text, self.system, self.structure)

    def messages(self) -> list[dict[str, str]]:
        """The chat messages for this prompt."""
        user = [{"role": "user", "content": self.text}]
        return [{"role": "system", "content": self.system}, *user] if self.system else user


@dataclass(frozen=True, slots=True)
class MarkedPrompt(Prompt):
    """A prompt as one request sends it: `base`'s text with a marker appended (a canary); the
    client encodes `base` once and splices the marker into its body per request."""

    base: Prompt | None = None
    """The prompt whose text this one's text begins with (None: built without one)."""


def load_prompts(path: str | Path) -> list[Prompt]:
    """Read a JSONL file of {"prompt": ...} or {"messages": [...]} lines (optional "id"; at
    most one of "response_format" (a JSON schema), "regex", "tools" with "tool_choice")."""
    file = Path(path)
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read prompts file {file}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"prompts file {file} is not UTF-8") from exc
    prompts = [_parse_line(line, file, n) for n, line in enumerate(lines, 1) if line.strip()]
    if not prompts:
        raise ConfigError(f"prompts file {file} has no prompts")
    _check_unique_ids(prompts, file)
    return prompts


def _check_unique_ids(prompts: list[Prompt], file: Path) -> None:
    """A ConfigError when two different prompts share an id: each row stores only the id, so
    the prompt it was sent could not be told (`soakgate replay` sends it again)."""
    seen: dict[str, Prompt] = {}
    for prompt in prompts:
        first = seen.setdefault(prompt.prompt_id, prompt)
        if first != prompt:
            raise ConfigError(
                f"prompts file {file}: id {prompt.prompt_id!r} names two different prompts "
                "(give each prompt its own id)"
            )


def _parse_line(line: str, file: Path, number: int) -> Prompt:
    """One JSONL line as a Prompt; any problem names the file and line."""
    where = f"{file}:{number}"
    try:
        item = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: not JSON ({exc.msg})") from exc
    if not isinstance(item, dict):
        raise ConfigError(f"{where}: expected an object")
    prompt_id = str(item.get("id", f"{file.stem}-{number}"))
    try:
        structure = structure_of(item)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from exc
    if isinstance(item.get("prompt"), str):
        return Prompt(prompt_id, item["prompt"], structure=structure)
    messages = item.get("messages")
    if isinstance(messages, list) and messages and all(isinstance(m, dict) for m in messages):
        system = next((m.get("content") for m in messages if m.get("role") == "system"), None)
        user = [str(m.get("content", "")) for m in messages if m.get("role") != "system"]
        return Prompt(prompt_id, "\n\n".join(user), str(system) if system else None, structure)
    raise ConfigError(f"{where}: needs a string 'prompt' or a list of 'messages'")


_STRUCTURE_KEYS = {"response_format": "json_schema", "regex": "regex", "tools": "tools"}


def structure_of(item: dict[str, Any]) -> Structure | None:
    """The structure a prompt line asks for (None: free text); a ConfigError when it asks for
    more than one or the one it asks for is not valid."""
    given = [key for key in _STRUCTURE_KEYS if key in item]
    if len(given) > 1:
        raise ConfigError(f"one structure per prompt, not {' and '.join(given)}")
    if "tool_choice" in item and given != ["tools"]:
        raise ConfigError("tool_choice needs tools")
    if not given:
        return None
    return Structure.of(_STRUCTURE_KEYS[given[0]], item[given[0]], item.get("tool_choice"))


class PromptPicker:
    """Assigns prompts to requests by sequence number: round-robin, or seeded random."""

    def __init__(self, prompts: list[Prompt], order: str = "round-robin", seed: int = 0) -> None:
        if not prompts:
            raise ConfigError("no prompts to send")
        if order not in ("round-robin", "random"):
            raise ConfigError(f"prompt order must be round-robin or random, not {order!r}")
        self.prompts = prompts
        self.order = order
        self.seed = seed

    def pick(self, seq: int) -> Prompt:
        """The prompt for request number `seq`: reproducible from (order, seed, seq) alone."""
        if self.order == "round-robin":
            return self.prompts[seq % len(self.prompts)]
        return self.prompts[random.Random(self.seed * 1_000_003 + seq).randrange(len(self.prompts))]
