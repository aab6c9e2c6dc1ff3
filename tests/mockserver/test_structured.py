"""Structured output through the real mock process: every dialect, valid answers, injected
invalid ones named in the ground truth, and the requests it refuses."""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections.abc import Iterator
from typing import Any

import aiohttp
import jsonschema
import pytest

from soakgate.errors import UsageError
from soakgate.mockserver import MockConfig, MockProcess
from soakgate.mockserver.inject import Injector
from soakgate.mockserver.jsongen import compile_schema
from soakgate.mockserver.regexgen import UnsupportedPattern, compile_pattern, matching, mismatching
from tests.mockserver.helpers import chat, completion, parse_stream, post

STRICT = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 3, "maxLength": 24},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
    },
    "required": ["city", "days", "unit", "tags"],
    "additionalProperties": False,
}
RICH = {
    "$defs": {"code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"}},
    "definitions": {"point": {"type": "object", "properties": {"x": {"type": "number"}},
                              "required": ["x"]}},
    "type": "object",
    "properties": {
        "kind": {"const": "report"},
        "code": {"$ref": "#/$defs/code"},
        "at": {"$ref": "#/definitions/point"},
        "score": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "note": {"type": ["string", "null"]},
        "value": {"anyOf": [{"type": "integer", "maximum": -1}, {"type": "boolean"}]},
        "pick": {"oneOf": [{"type": "string", "maxLength": 4}, {"type": "integer"}]},
        "rows": {"type": "array", "minItems": 2, "items": {"type": "array", "maxItems": 2,
                                                          "items": {"type": "integer"}}},
    },
    "required": ["kind", "code", "at", "score", "value", "pick", "rows"],
}  # fmt: skip
PATTERN = r"[A-Z][a-z]{2,6} (is|was) \d{1,3}(\.\d)?%"
TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": "get_weather", "parameters": STRICT}},
    {"type": "function", "function": {"name": "lookup", "parameters": RICH}},
    {"type": "function", "function": {"name": "ping"}},
]
_NAMED = {"type": "function", "function": {"name": "lookup"}}
JSON_DIALECTS: dict[str, Any] = {
    "openai": lambda s: {"response_format": {"type": "json_schema",
                                             "json_schema": {"name": "a", "schema": s, "strict": True}}},
    "llamacpp": lambda s: {"json_schema": s},
    "vllm": lambda s: {"structured_outputs": {"json": s}},
    "guided": lambda s: {"guided_json": s},
}  # fmt: skip
REGEX_DIALECTS: dict[str, Any] = {
    "vllm": lambda r: {"structured_outputs": {"regex": r}},
    "guided": lambda r: {"guided_regex": r},
}
TOOL_CHOICES: dict[str, Any] = {"absent": None, "auto": "auto", "required": "required",
                                "named": _NAMED}  # fmt: skip
ANY_OBJECT = {"type": "object"}


def structured_requests() -> Iterator[tuple[str, dict[str, Any], Any]]:
    """(path, body, what the answer must be) over every dialect, endpoint and streaming."""
    for stream in (False, True):
        extra: dict[str, Any] = {"max_tokens": 400, "stream": stream}
        if stream:
            extra["stream_options"] = {"include_usage": True}
        for path, make in (("/v1/completions", completion), ("/v1/chat/completions", chat)):
            for n in range(8):  # 40 JSON documents and 16 strings per endpoint and streaming
                for name, dialect in JSON_DIALECTS.items():
                    schema = STRICT if n % 2 else RICH
                    yield path, make(f"{name} {n}", **extra, **dialect(schema)), ("json", schema)
                yield path, make(f"object {n}", **extra, response_format={"type": "json_object"}),\
                    ("json", ANY_OBJECT)  # fmt: skip
                for name, dialect in REGEX_DIALECTS.items():
                    yield path, make(f"{name} {n}", **extra, **dialect(PATTERN)), ("regex", PATTERN)
        for n in range(5):
            for name, choice in TOOL_CHOICES.items():
                fields = {"tools": TOOLS} | ({"tool_choice": choice} if choice else {})
                yield "/v1/chat/completions", chat(f"{name} {n}", **extra, **fields),\
                    ("tools", choice)  # fmt: skip


def answer_of(path: str, body: dict[str, Any], raw: bytes) -> dict[str, Any]:
    """The answer's text (or its tool calls), finish_reason and usage, streamed or not."""
    chat_answer = path.endswith("chat/completions")
    if not body.get("stream"):
        data = json.loads(raw)
        choice = data["choices"][0]
        message = choice.get("message") or {}
        text = message.get("content") if chat_answer else choice["text"]
        return {"text": text, "calls": message.get("tool_calls"),
                "finish": choice["finish_reason"], "usage": data["usage"]}  # fmt: skip
    chunks, done = parse_stream(raw)
    assert done
    texts, calls, finish, usage = [], list[dict[str, Any]](), None, None
    for chunk in chunks:
        usage = chunk.get("usage") or usage
        for choice in chunk["choices"]:
            finish = choice["finish_reason"] or finish
            if not chat_answer:
                texts.append(choice["text"])
                continue
            delta = choice["delta"]
            texts.append(delta.get("content") or "")
            for call in delta.get("tool_calls") or []:
                if "id" in call:
                    assert call["index"] == len(calls) and call["function"]["arguments"] == ""
                    calls.append({"id": call["id"], "type": call["type"],
                                  "function": {"name": call["function"]["name"], "arguments": ""}})  # fmt: skip
                else:
                    calls[call["index"]]["function"]["arguments"] += call["function"]["arguments"]
    return {"text": "".join(texts) if not calls else None, "calls": calls or None,
            "finish": finish, "usage": usage, "chunks": chunks}  # fmt: skip


def violation(answer: dict[str, Any], expected: Any) -> str | None:
    """Why the answer breaks what it was asked to be; None when it is valid."""
    kind, spec = expected
    if kind == "regex":
        return None if re.fullmatch(spec, answer["text"]) else "mismatch"
    if kind == "json":
        return _json_error(answer["text"], spec)
    calls = answer["calls"]
    if not calls or len(calls) != 1 or answer["text"] is not None:
        return "no single tool call"
    call = calls[0]
    assert re.fullmatch("call_[0-9a-f]{24}", call["id"]) and call["type"] == "function"
    tools = {t["function"]["name"]: t["function"] for t in TOOLS}
    name = call["function"]["name"]
    if name not in tools or (spec == _NAMED and name != "lookup"):
        return "unknown_tool"
    return _json_error(call["function"]["arguments"], tools[name].get("parameters", ANY_OBJECT))


def _json_error(text: str, schema: Any) -> str | None:
    try:
        value = json.loads(text)
    except ValueError:
        return "not JSON"
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(schema).iter_errors(value)
    )
    return None if error is None else error.message


async def _send(
    url: str, requests: list[tuple[str, dict[str, Any], Any]], concurrency: int
) -> list[tuple[int, bytes]]:
    semaphore = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession(url, timeout=aiohttp.ClientTimeout(total=20)) as session:

        async def one(index: int, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
            async with semaphore:
                return await post(session, path, body, f"req-{index}")

        return await asyncio.gather(*(one(i, p, b) for i, (p, b, _) in enumerate(requests)))


def soak(mock: MockProcess, requests: list[Any], concurrency: int = 8) -> list[Any]:
    """Send the requests; (answer, expected, ground truth) of each, in order."""
    results = asyncio.run(_send(mock.url, requests, concurrency))
    truth = {r["request_id"]: r for r in mock.ground_truth()}
    out = []
    for index, ((path, body, expected), (status, raw)) in enumerate(
        zip(requests, results, strict=True)
    ):
        assert status == 200, raw
        out.append((answer_of(path, body, raw), expected, truth[f"req-{index}"]))
    return out


@pytest.fixture(scope="module")
def healthy() -> Iterator[MockProcess]:
    with MockProcess(["--seed", "2"]) as mock:
        yield mock


def test_every_dialect_answers_valid_structure(healthy: MockProcess) -> None:
    requests = list(structured_requests())
    results = soak(healthy, requests)
    texts = set()
    for answer, expected, truth in results:
        assert violation(answer, expected) is None, (answer, expected)
        kind = {"json": "json_schema"}.get(expected[0], expected[0])
        assert truth["structured"] == kind and truth["invalid_structure"] is None
        finish = "tool_calls" if kind == "tools" else "stop"
        assert answer["finish"] == finish and answer["usage"]["completion_tokens"] > 0
        texts.add(answer["text"] or answer["calls"][0]["function"]["arguments"])
        if kind == "tools" and "chunks" in answer:  # OpenAI's order: call, fragments, finish
            last = answer["chunks"][-2]["choices"][0]
            assert last == {
                "index": 0,
                "delta": {},
                "logprobs": None,
                "finish_reason": "tool_calls",
            }
            fragments = len(answer["chunks"]) - 3  # one per token, between call and finish
            assert fragments == answer["usage"]["completion_tokens"] >= 1
            assert answer["chunks"][-1]["choices"] == []
    assert len(results) == 264 and len(texts) > 0.9 * len(results)  # drawn per request


def test_tool_choice_none_answers_text_and_no_structure_costs_nothing(healthy: MockProcess) -> None:
    requests = [("/v1/chat/completions", chat("plain", tools=TOOLS, tool_choice="none"), None),
                ("/v1/completions", completion("plain", response_format={"type": "text"}), None),
                ("/v1/completions", completion("plain"), None)]  # fmt: skip
    for answer, _, truth in soak(healthy, requests):
        assert answer["calls"] is None and answer["text"] and answer["finish"] == "length"
        assert truth["structured"] is None and truth["invalid_structure"] is None


def test_max_tokens_cuts_a_structured_answer_with_length(healthy: MockProcess) -> None:
    requests = [("/v1/chat/completions", chat("cut", max_tokens=5, stream=stream, **fields), None)
                for stream in (False, True)
                for fields in ({"guided_json": STRICT}, {"tools": TOOLS, "tool_choice": _NAMED})]  # fmt: skip
    for answer, _, _ in soak(healthy, requests):
        assert answer["finish"] == "length"
        text = answer["text"] or answer["calls"][0]["function"]["arguments"]
        assert text.startswith("{") and _json_error(text, ANY_OBJECT) == "not JSON"


@pytest.mark.parametrize(
    ("path", "fields", "message"),
    [
        ("/v1/completions", {"guided_json": STRICT, "json_schema": STRICT}, "one structure"),
        ("/v1/chat/completions", {"response_format": {"type": "json_object"},
                                  "structured_outputs": {"regex": "a+"}}, "one structure"),
        ("/v1/chat/completions", {"tools": TOOLS, "guided_regex": "a+"}, "one structure"),
        ("/v1/completions", {"structured_outputs": {"json": STRICT, "regex": "a+"}}, "exactly one"),
        ("/v1/completions", {"guided_regex": "(?<=a)b"}, "lookahead/lookbehind"),
        ("/v1/completions", {"structured_outputs": {"regex": "(a)\\1"}}, "backreference"),
        ("/v1/completions", {"guided_regex": "[a-"}, "invalid regex"),
        ("/v1/completions", {"json_schema": {"type": "nope"}}, "invalid JSON schema"),
        ("/v1/completions", {"tools": TOOLS}, "chat feature"),
        ("/v1/chat/completions", {"tools": TOOLS, "tool_choice": {"type": "function",
                                  "function": {"name": "nope"}}}, "names none"),
        ("/v1/completions", {"guided_grammar": "root ::= x"}, "not supported"),
    ],
)  # fmt: skip
def test_refused_with_400(healthy: MockProcess, path: str, fields: Any, message: str) -> None:
    make = chat if "chat" in path else completion

    async def main() -> tuple[int, bytes]:
        async with aiohttp.ClientSession(healthy.url) as session:
            return await post(session, path, make(**fields))

    status, raw = asyncio.run(main())
    assert status == 400 and message in json.loads(raw)["error"]["message"]


def test_every_answer_invalid_at_rate_one_and_the_kind_is_logged() -> None:
    requests = list(structured_requests())
    with MockProcess(["--invalid-structure-rate", "1", "--seed", "3"]) as mock:
        results = soak(mock, requests)
    kinds = set()
    for answer, expected, truth in results:
        kind = truth["invalid_structure"]
        kinds.add(kind)
        found = violation(answer, expected)
        assert kind is not None and found is not None, (answer, truth)
        assert answer["finish"] in ("stop", "tool_calls")  # a truncated document says stop
        if kind == "unknown_tool":
            assert found == "unknown_tool"
        elif kind == "mismatch":
            assert expected[0] == "regex"
        elif kind == "bad_arguments":
            assert expected[0] == "tools" and found != "unknown_tool"
        elif kind == "missing_required":
            assert "required property" in found
        elif kind == "extra_property":
            assert "Additional properties" in found
    assert kinds == {"truncated", "wrong_type", "missing_required", "extra_property", "not_json",
                     "mismatch", "bad_arguments", "unknown_tool"}  # fmt: skip


def test_invalid_structure_only_under_concurrency() -> None:
    requests = [r for r in structured_requests() if not r[1]["stream"]][::4]
    args = ["--invalid-structure-rate", "1", "--invalid-structure-after-in-flight", "4"]
    with MockProcess([*args, "--latency-ms", "100"]) as mock:
        alone = soak(mock, requests[:12], concurrency=1)
        assert all(t["invalid_structure"] is None and violation(a, e) is None for a, e, t in alone)
        crowded = asyncio.run(_send(mock.url, requests[:12], concurrency=12))
        truth = mock.ground_truth()[len(alone) :]
    assert all(status == 200 for status, _ in crowded)
    assert 6 <= sum(t["invalid_structure"] is not None for t in truth) <= 9  # 4th to 12th arrival


@pytest.mark.parametrize(
    "pattern",
    [PATTERN, r"\d{3}-\d{4}", r"(?i)yes|no", r"^[^aeiou\s]{2,5}$", r"(ab)+?c*", r"\w+@\w+\.com",
     r"[\u0400-\u04ff]{3}", r"(?s).{2}", r"\bword\b", r"[.\-+]\S\D\W"],
)  # fmt: skip
def test_regex_generator_matches_and_mismatches(pattern: str) -> None:
    compiled, rng = compile_pattern(pattern), random.Random(1)
    for _ in range(100):
        text = matching(compiled, rng)
        assert re.fullmatch(pattern, text), text
        broken = mismatching(compiled, text, rng)
        assert broken is not None and not re.fullmatch(pattern, broken)


def test_regex_generator_refuses_what_it_cannot_generate() -> None:
    for pattern in (r"a(?=b)", r"a(?!b)", r"(?<=a)b", r"(a)\1", r"(?P<x>a)(?P=x)", "("):
        with pytest.raises(UnsupportedPattern):
            compile_pattern(pattern)


def test_schema_generator_documents_are_valid() -> None:
    for schema in (STRICT, RICH, ANY_OBJECT, {"type": "array", "prefixItems": [{"type": "integer"}],
                   "items": False, "minItems": 1}, {"type": "integer", "exclusiveMinimum": 3,
                   "maximum": 4}, {"type": "string", "format": "date-time"}):  # fmt: skip
        compiled, rng = compile_schema(json.dumps(schema)), random.Random(5)
        values = [compiled.instance(rng) for _ in range(100)]
        validator = jsonschema.Draft202012Validator(schema)
        assert all(validator.is_valid(v) for v in values)


def test_flags_are_validated_and_free_text_is_never_made_invalid() -> None:
    for bad in ({"invalid_structure_rate": 1.5}, {"invalid_structure_after_in_flight": -1}):
        with pytest.raises(UsageError):
            MockConfig(**bad)
    injector = Injector(MockConfig(invalid_structure_rate=1.0, invalid_structure_after_in_flight=2))
    assert not any(injector.decide(5).invalid_structure for _ in range(100))
    assert not any(injector.decide(1, structured=True).invalid_structure for _ in range(100))
    assert all(injector.decide(2, structured=True).invalid_structure for _ in range(100))
