"""Pure functions that build request bodies and fold OpenAI-style responses into an Outcome."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import orjson

from soakgate.errors import UsageError
from soakgate.prompts import Prompt, Structure
from soakgate.targets.spec import Outcome, RequestSpec


class ResponseFormatError(ValueError):
    """The body was JSON but not an OpenAI-style response (classified as malformed_json)."""


class ServerDeclaredError(ValueError):
    """The server answered 200 but declared an error in the body or stream."""


class UnexpectedChoices(ValueError):
    """The answer had choices that were not asked for, or choices with a bad index."""


def build_payload(spec: RequestSpec, prompt: Prompt, model: str) -> dict[str, Any]:
    """The JSON body for one request."""
    body: dict[str, Any] = {"model": model, "max_tokens": spec.max_tokens}
    if spec.endpoint == "chat":
        body["messages"] = prompt.messages()
    else:
        body["prompt"] = prompt.text
    body["temperature"] = spec.temperature
    if spec.top_p is not None:
        body["top_p"] = spec.top_p
    if spec.seed is not None:
        body["seed"] = spec.seed
    if spec.ignore_eos:
        body["ignore_eos"] = True
    if spec.return_token_ids:
        body["return_token_ids"] = True
    if spec.logprobs:
        if spec.endpoint == "chat":
            body["logprobs"] = True
            if spec.top_logprobs:
                body["top_logprobs"] = spec.top_logprobs
        else:
            body["logprobs"] = max(1, spec.top_logprobs)
    if spec.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    if prompt.structure is not None:
        body.update(structure_fields(prompt.structure, spec.structure_via, spec.endpoint))
    body.update(spec.extra)
    return body


def check_structures(prompts: Iterable[Prompt], spec: RequestSpec) -> bool:
    """Whether any prompt asks for a structure; a UsageError, before any load, when one cannot
    be sent the way `spec` makes requests."""
    structures = {p.structure for p in prompts if p.structure is not None}
    for structure in structures:
        structure_fields(structure, spec.structure_via, spec.endpoint)
    return bool(structures)


def structure_fields(structure: Structure, via: str, endpoint: str) -> dict[str, Any]:
    """The body fields that ask for a structured answer, in the dialect `via` names
    (`targets.spec.STRUCTURE_VIA`); a UsageError when that dialect cannot ask for it."""
    if structure.kind == "tools":
        if endpoint != "chat":
            raise UsageError("tool calls are a chat feature: use --endpoint chat")
        fields: dict[str, Any] = {"tools": structure.value()}
        if structure.tool_choice:
            fields["tool_choice"] = structure.choice()
        return fields
    value = structure.value()
    if structure.kind == "json_schema":
        if via == "openai":
            schema = {"name": "soakgate", "schema": value, "strict": True}
            return {"response_format": {"type": "json_schema", "json_schema": schema}}
        if via == "llamacpp":
            return {"json_schema": value}
        return {"structured_outputs": {"json": value}} if via == "vllm" else {"guided_json": value}
    if via == "vllm":
        return {"structured_outputs": {"regex": value}}
    if via == "guided":
        return {"guided_regex": value}
    raise UsageError(
        f"a regex cannot be asked for via {via} (no such field there): "
        "use --structure-via vllm or guided, or a JSON schema with a pattern"
    )


def decode_event(data: bytes) -> Any:
    """Decode one SSE payload (or a whole JSON body) with orjson, a third of json.loads' cost.

    orjson is strict JSON; on its rare refusal the stdlib decides, so what Python's json accepts
    (NaN, Infinity) is never misclassified as malformed.
    """
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data.decode("utf-8"))


def check_error(body: Any) -> None:
    """Raise ServerDeclaredError when a 200 body carries an error object."""
    if isinstance(body, dict) and body.get("error"):
        error = body["error"]
        message = error.get("message", error) if isinstance(error, dict) else error
        raise ServerDeclaredError(str(message)[:300])


class Answer:
    """One response being folded into its outcome, choices assembled by `index`.

    Only choice 0 was asked for: its text is kept as pieces and joined once by `close`
    (appending to a str would copy the whole text on every event); any other choice is
    counted, never mixed in, and makes the answer an `UnexpectedChoices` error.
    """

    __slots__ = ("chat", "content", "others", "outcome", "pieces")

    def __init__(self, outcome: Outcome, chat: bool) -> None:
        self.outcome = outcome
        self.chat = chat
        self.pieces: list[str] = []
        self.content = False
        """Some streamed event carried content (set by `fold_payloads`)."""
        self.others: dict[str, int] = {}
        """Index of each choice not asked for (or not valid) -> characters of text it had."""

    def close(self, keep: int | None = None) -> int:
        """Put choice 0's text into the outcome (also after a failure: what came is kept), its
        first `keep` characters when given; returns the characters that had come."""
        if not self.pieces:
            return len(self.outcome.text)
        text = self.outcome.text + "".join(self.pieces)
        self.pieces = []
        self.outcome.text = text if keep is None else text[:keep]
        return len(text)

    def check(self) -> None:
        """Raise UnexpectedChoices when choices not asked for came."""
        if self.others:
            listed = ", ".join(f"{i} ({n} chars)" for i, n in self.others.items())
            raise UnexpectedChoices(f"choices besides index 0, the one asked for: {listed}")


def fold_choices(answer: Answer, choices: list[Any], streaming: bool) -> bool:
    """Fold one body's or event's choices by their `index` (a missing index is the choice's
    position); True when choice 0 carried content."""
    if len(choices) == 1:  # the common case: one choice, index 0
        choice = choices[0]
        if choice.__class__ is dict:
            index = choice.get("index", 0)
            if index == 0 and index.__class__ is int:
                return fold_choice(answer, choice, streaming)
    content, seen = False, set()
    for position, choice in enumerate(choices):
        if not isinstance(choice, dict):
            raise ResponseFormatError("choice is not an object")
        index = choice.get("index", position)
        key = str(index) if type(index) is int and index >= 0 else repr(index)
        if key in seen:
            key = f"{key} again"
        seen.add(key)
        if key == "0":
            content = fold_choice(answer, choice, streaming) or content
        else:
            other = Answer(Outcome(started_at=0), answer.chat)
            fold_choice(other, choice, streaming)
            answer.others[key] = answer.others.get(key, 0) + sum(map(len, other.pieces))
    return content


def fold_choice(answer: Answer, choice: dict[str, Any], streaming: bool) -> bool:
    """Add choice 0 (whole or a stream delta) to the answer; True when it carried content.

    Runs for every streamed event, so it calls nothing it does not need (most events carry
    no logprobs and no ids)."""
    outcome = answer.outcome
    calls = None
    if answer.chat:
        message = choice.get("delta" if streaming else "message") or {}
        piece = message.get("content") if isinstance(message, dict) else None
        if message.__class__ is dict and "tool_calls" in message:
            calls = _fold_tool_calls(outcome, message["tool_calls"], streaming)
    else:
        piece = choice.get("text")
    if piece is not None and not isinstance(piece, str):
        raise ResponseFormatError("content is not a string")
    ids = choice.get("token_ids")
    if ids is not None and outcome.prompt_token_ids is None and "prompt_token_ids" in choice:
        fold_prompt_ids(outcome, choice["prompt_token_ids"])  # vLLM completions: in the choice
    logprobs = choice.get("logprobs")
    if ids.__class__ is not list:
        ids = _fold_logprobs(outcome, logprobs) if logprobs else None
    elif logprobs:
        _fold_logprobs(outcome, logprobs)
    if ids:
        if outcome.token_ids is None:
            outcome.token_ids = []
        outcome.token_ids.extend(int(i) for i in ids)
    finish_reason = choice.get("finish_reason")
    if finish_reason:
        outcome.finish_reason = str(finish_reason)
    if piece:
        answer.pieces.append(piece)
        return True
    return bool(ids) or bool(calls)


def _fold_tool_calls(outcome: Outcome, calls: Any, streaming: bool) -> int:
    """Add a message's tool calls (streamed: fragments, assembled by `index`) to the outcome's
    `tool_calls`; returns how many pieces came."""
    if calls is None:
        return 0
    if not isinstance(calls, list):
        raise ResponseFormatError("tool_calls is not a list")
    found = outcome.tool_calls if outcome.tool_calls is not None else []
    outcome.tool_calls = found
    for position, call in enumerate(calls):
        if not isinstance(call, dict):
            raise ResponseFormatError("a tool call is not an object")
        function = call.get("function") or {}
        if not isinstance(function, dict):
            raise ResponseFormatError("a tool call's function is not an object")
        index = call.get("index", position) if streaming else len(found)
        if not isinstance(index, int) or index < 0 or index > len(found):
            raise ResponseFormatError(f"tool call index {index!r} out of order")
        if index == len(found):
            found.append({"id": "", "name": "", "arguments": ""})
        entry = found[index]
        if isinstance(call.get("id"), str) and call["id"]:
            entry["id"] = call["id"]
        name, arguments = function.get("name"), function.get("arguments")
        if isinstance(name, str):  # a stream names the call once (some servers repeat it)
            repeated = not streaming or name == entry["name"] or not entry["name"]
            entry["name"] = name if repeated else entry["name"] + name
        if arguments is not None:
            text = arguments if isinstance(arguments, str) else json.dumps(arguments)
            entry["arguments"] = text if not streaming else entry["arguments"] + text
    return len(calls)


def _fold_logprobs(outcome: Outcome, logprobs: Any) -> list[int] | None:
    """Count logprob entries; return llama.cpp-style per-entry token ids when all have one."""
    if not isinstance(logprobs, dict):
        return None
    if outcome.logprob_parts is None:
        outcome.logprob_parts = [logprobs]
    else:
        outcome.logprob_parts.append(logprobs)
    content = logprobs.get("content")
    if isinstance(content, list):
        outcome.logprobs_count += len(content)
        ids = [e["id"] for e in content if isinstance(e, dict) and isinstance(e.get("id"), int)]
        return ids if ids and len(ids) == len(content) else None
    if isinstance(logprobs.get("tokens"), list):
        outcome.logprobs_count += len(logprobs["tokens"])
    return None


def fold_usage(outcome: Outcome, usage: Any) -> None:
    """Take prompt and completion token counts from a usage object."""
    if isinstance(usage, dict):
        prompt, completion = (
            _count(usage.get("prompt_tokens")),
            _count(usage.get("completion_tokens")),
        )
        if prompt is not None:
            outcome.prompt_tokens = prompt
        if completion is not None:
            outcome.completion_tokens = completion


def _count(value: Any) -> int | None:
    """A token count as an int; orjson turns an integer past 64 bits into a float, which is
    taken back as the integer it stands for (the store keeps what it cannot hold in details)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def fold_body(answer: Answer, body: Any) -> None:
    """Fold a whole non-streaming response body into the answer."""
    check_error(body)
    if not isinstance(body, dict) or not isinstance(body.get("choices"), list):
        raise ResponseFormatError("response has no choices list")
    if not body["choices"]:
        raise ResponseFormatError("response has an empty choices list")
    fold_prompt_ids(answer.outcome, body.get("prompt_token_ids"))  # vLLM chat: top level
    fold_choices(answer, body["choices"], streaming=False)
    fold_usage(answer.outcome, body.get("usage"))


def fold_prompt_ids(outcome: Outcome, ids: Any) -> None:
    """Keep the prompt's token ids (vLLM `return_token_ids`), what reference scoring sends."""
    fresh = ids.__class__ is list and outcome.prompt_token_ids is None
    if fresh and all(i.__class__ is int for i in ids):
        outcome.prompt_token_ids = ids


def fold_event(answer: Answer, event: Any) -> bool:
    """Fold one streamed chunk; True when it carried content (for time to first token)."""
    if event.__class__ is not dict:
        check_error(event)
        if not isinstance(event, dict):
            raise ResponseFormatError("stream event is not an object")
    if event.get("error"):
        check_error(event)
    usage = event.get("usage")
    if usage is not None:
        fold_usage(answer.outcome, usage)
    if answer.outcome.prompt_token_ids is None and "prompt_token_ids" in event:
        fold_prompt_ids(answer.outcome, event["prompt_token_ids"])
    choices = event.get("choices")
    if not choices:
        return False
    if not isinstance(choices, list):
        raise ResponseFormatError("stream choices is not a list")
    return fold_choices(answer, choices, streaming=True)


_PROBE = "\x00soakgate template probe\x00"  # a piece no server sends, to locate the text
_FREE_LEARNS = 3  # a stream's templates learnt beyond its fast folds: past this, no more


class StreamTemplate:
    """The bytes around choice 0's text in a plain streamed event, so that the events after it
    that differ from it only in that text are folded without decoding them whole.

    A server writes every event of a stream alike (vLLM, SGLang, llama.cpp, TGI: the same id,
    model and nulls, the text the only change), and decoding the whole event is most of what a
    streamed token costs the client. Sound by construction, whatever the server sends: an event
    is *plain* when folding it into a fresh answer adds choice 0's text, not empty, and changes
    nothing else (no error, usage, token ids, logprobs, finish reason or tool calls); the template
    is its bytes before and after one string token, checked by decoding them with a probe
    string in between and finding the probe at choice 0's text; an event folded by it must be
    exactly those bytes around one JSON string (decoded alone, strictly). JSON's grammar then
    makes it the plain event with that string as its text, so it folds as decoding it whole
    would. Anything else (a new `created`, the finish reason, usage, a malformed event) goes
    the whole way and may become the next template; a stream whose events never repeat stops
    learning after a few tries (each costs two folds of a scratch answer).
    """

    __slots__ = ("chat", "fast", "head", "learnt", "least", "tail")

    def __init__(self, chat: bool) -> None:
        self.chat = chat
        self.head: bytes | None = None
        self.tail = b""
        self.least = 0  # an event folded by the template is at least this long
        self.fast = 0  # events folded by a template in this stream
        self.learnt = 0  # templates learnt in this stream

    def learn(self, data: bytes, event: Any) -> None:
        """Take `data` (decoded whole as `event`, then folded) as the template when it is a
        plain event whose text is written once in it as orjson writes it."""
        self.head = None
        if self.learnt > self.fast + _FREE_LEARNS:
            return
        self.learnt += 1
        piece = _only_text(event, self.chat)
        if not piece:
            return
        token = orjson.dumps(piece)
        if data.count(token) != 1:
            return
        at = data.find(token)
        head, tail = data[:at], data[at + len(token) :]
        try:
            probed = orjson.loads(head + orjson.dumps(_PROBE) + tail)
        except orjson.JSONDecodeError:
            return
        if _only_text(probed, self.chat) == _PROBE:
            self.head, self.tail, self.least = head, tail, len(head) + len(tail) + 2


_UNTOUCHED = Outcome(started_at=0)


def _only_text(event: Any, chat: bool) -> str | None:
    """Choice 0's text when folding `event` into a fresh answer adds that text and changes
    nothing else (`fold_event` itself says what an event does); None otherwise."""
    answer = Answer(Outcome(started_at=0), chat)
    try:
        fold_event(answer, event)
    except (ValueError, TypeError):
        return None
    if len(answer.pieces) != 1 or answer.others or answer.outcome != _UNTOUCHED:
        return None
    return answer.pieces[0]


def fold_payloads(answer: Answer, payloads: list[bytes], template: StreamTemplate) -> bool:
    """Fold a stream's SSE data payloads in order; True when one was the [DONE] sentinel.
    `answer.content` turns True once a payload carried content (for time to first token).

    One call per piece of the stream read, the template's match written out in the loop: this
    runs for every streamed token, and a call per event was a tenth of the client's CPU."""
    done = False
    head, tail, least = template.head, template.tail, template.least
    for data in payloads:
        if (
            head is not None
            and len(data) >= least
            and data.startswith(head)
            and data.endswith(tail)
        ):
            try:
                piece = orjson.loads(data[len(head) : len(data) - len(tail)])
            except orjson.JSONDecodeError:
                piece = None
            if piece.__class__ is str:
                template.fast += 1
                if piece:
                    answer.pieces.append(piece)
                    answer.content = True
                continue
        if data == b"[DONE]":
            done = True
            continue
        try:
            event = decode_event(data)
        except ValueError:
            if data.strip() == b"[DONE]":  # with stray spaces
                done = True
                continue
            raise
        if fold_event(answer, event):
            answer.content = True
        template.learn(data, event)
        head, tail, least = template.head, template.tail, template.least
    return done


def finish(outcome: Outcome) -> None:
    """Fill completion_tokens from token ids when the server reported no usage; drop token ids
    that do not account for every reported token (llama.cpp leaves out the logprob entries of
    tokens that end inside a UTF-8 character, so its ids can have gaps)."""
    ids = outcome.token_ids
    if ids is not None and outcome.completion_tokens not in (None, len(ids)):
        outcome.token_ids = None
    if outcome.completion_tokens is None and outcome.token_ids is not None:
        outcome.completion_tokens = len(outcome.token_ids)
