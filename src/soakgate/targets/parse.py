"""Pure functions that build request bodies and fold OpenAI-style responses into an Outcome."""

from __future__ import annotations

import json
from typing import Any

import orjson

from soakgate.prompts import Prompt
from soakgate.targets.spec import Outcome, RequestSpec


class ResponseFormatError(ValueError):
    """The body was JSON but not an OpenAI-style response (classified as malformed_json)."""


class ServerDeclaredError(ValueError):
    """The server answered 200 but declared an error in the body or stream."""


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
        else:
            body["logprobs"] = 1
    if spec.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    body.update(spec.extra)
    return body


def decode_event(data: bytes) -> Any:
    """Decode one SSE payload (or a whole JSON body) with orjson, a third of json.loads' cost.

    orjson is strict JSON; on its rare refusal the stdlib decides, so what Python's json accepts
    (NaN, Infinity) is never misclassified as malformed.
    """
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data.decode("utf-8"))


class SseSplitter:
    """Incremental server-sent-events framing: feed raw chunks, get each complete event's data.

    Reading whole chunks and splitting here costs far less than one awaited readline per line.
    """

    def __init__(self) -> None:
        self._partial = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        """The data payloads of the events completed by this chunk (multi-line data joined)."""
        lines = (self._partial + chunk).split(b"\n") if self._partial else chunk.split(b"\n")
        self._partial = lines.pop()
        return self._events(lines)

    def close(self) -> list[bytes]:
        """At the end of the stream: the last event, even without its closing blank line."""
        lines, self._partial = [self._partial], b""
        events = self._events(lines)
        if self._data:
            events.append(b"\n".join(self._data))
            self._data = []
        return events

    def _events(self, lines: list[bytes]) -> list[bytes]:
        events: list[bytes] = []
        data = self._data
        for raw in lines:
            line = raw.rstrip(b"\r")
            if line[:5] == b"data:":
                data.append(line[5:].lstrip(b" "))
            elif not line and data:  # a blank line ends an event; comments and ids are skipped
                events.append(data[0] if len(data) == 1 else b"\n".join(data))
                data = self._data = []
        return events


def check_error(body: Any) -> None:
    """Raise ServerDeclaredError when a 200 body carries an error object."""
    if isinstance(body, dict) and body.get("error"):
        error = body["error"]
        message = error.get("message", error) if isinstance(error, dict) else error
        raise ServerDeclaredError(str(message)[:300])


def fold_choice(outcome: Outcome, choice: Any, chat: bool, streaming: bool) -> bool:
    """Add one choice (whole or a stream delta) to the outcome; True when it carried content."""
    if not isinstance(choice, dict):
        raise ResponseFormatError("choice is not an object")
    if chat:
        message = choice.get("delta" if streaming else "message") or {}
        piece = message.get("content") if isinstance(message, dict) else None
    else:
        piece = choice.get("text")
    if piece is not None and not isinstance(piece, str):
        raise ResponseFormatError("content is not a string")
    ids = choice.get("token_ids")
    if not isinstance(ids, list):
        ids = _fold_logprobs(outcome, choice.get("logprobs"))
    else:
        _fold_logprobs(outcome, choice.get("logprobs"))
    if ids:
        if outcome.token_ids is None:
            outcome.token_ids = []
        outcome.token_ids.extend(int(i) for i in ids)
    if choice.get("finish_reason"):
        outcome.finish_reason = str(choice["finish_reason"])
    if piece:
        outcome.text += piece
        return True
    return bool(ids)


def _fold_logprobs(outcome: Outcome, logprobs: Any) -> list[int] | None:
    """Count logprob entries; return llama.cpp-style per-entry token ids when all have one."""
    if not isinstance(logprobs, dict):
        return None
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


def fold_body(outcome: Outcome, body: Any, chat: bool) -> None:
    """Fold a whole non-streaming response body into the outcome."""
    check_error(body)
    if not isinstance(body, dict) or not isinstance(body.get("choices"), list):
        raise ResponseFormatError("response has no choices list")
    if not body["choices"]:
        raise ResponseFormatError("response has an empty choices list")
    fold_choice(outcome, body["choices"][0], chat, streaming=False)
    fold_usage(outcome, body.get("usage"))


def fold_event(outcome: Outcome, event: Any, chat: bool) -> bool:
    """Fold one streamed chunk; True when it carried content (for time to first token)."""
    check_error(event)
    if not isinstance(event, dict):
        raise ResponseFormatError("stream event is not an object")
    fold_usage(outcome, event.get("usage"))
    choices = event.get("choices")
    if not choices:
        return False
    if not isinstance(choices, list):
        raise ResponseFormatError("stream choices is not a list")
    return fold_choice(outcome, choices[0], chat, streaming=True)


def finish(outcome: Outcome) -> None:
    """Fill completion_tokens from token ids when the server reported no usage; drop token ids
    that do not account for every reported token (llama.cpp leaves out the logprob entries of
    tokens that end inside a UTF-8 character, so its ids can have gaps)."""
    ids = outcome.token_ids
    if ids is not None and outcome.completion_tokens not in (None, len(ids)):
        outcome.token_ids = None
    if outcome.completion_tokens is None and outcome.token_ids is not None:
        outcome.completion_tokens = len(outcome.token_ids)
