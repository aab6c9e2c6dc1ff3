"""OpenAI-format response bodies and SSE events for a Plan (pure: bytes out, no I/O)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from soakgate.mockserver import lm
from soakgate.mockserver.logprobs import USAGE_EXCESS, TokenLogprob, answer_logprobs
from soakgate.mockserver.plan import Plan, Sampling
from soakgate.mockserver.text import VOCAB, prompt_token_ids

_TOKEN_JSON = tuple(json.dumps(piece) for piece in VOCAB)
DONE = b"data: [DONE]\n\n"


def error_body(message: str, kind: str, code: int) -> dict[str, Any]:
    """An OpenAI error object."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def unknown_model_body(model: str) -> dict[str, Any]:
    """vLLM's 404 for a model it does not serve (its OpenAI server's own wording)."""
    return {"object": "error", "message": f"The model `{model}` does not exist.",
            "type": "NotFoundError", "param": "model", "code": 404}  # fmt: skip


def _usage(plans: Sequence[Plan]) -> dict[str, int]:
    """Usage of a request: its prompt once, the tokens of every choice (a few too many when a
    `usage_mismatch` was injected)."""
    completion = sum(len(plan.token_ids) for plan in plans)
    broken = plans[0].inconsistency
    if broken is not None and broken.kind == "usage_mismatch":
        completion += USAGE_EXCESS
    prompt_tokens = plans[0].prompt_tokens
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": prompt_tokens + completion,
    }


def plan_logprobs(plan: Plan) -> list[TokenLogprob]:
    """The log-probabilities of every output position of a plan that asks for them, its
    injected impossible number (if any) in place."""
    sampling = plan.sampling
    entries = answer_logprobs(sampling.last_prompt_token(), plan.token_ids,
                              sampling.logprobs or 0, sampling.temperature == 0)  # fmt: skip
    broken = plan.inconsistency
    if broken is not None and broken.entry is not None and broken.at is not None:
        entries[broken.at] = broken.entry
    return entries


def completion_logprobs(entries: Sequence[TokenLogprob], text_offset: int) -> dict[str, Any]:
    """Completions-style logprobs of `entries`, the first at `text_offset` in the text."""
    tokens, values, tops, offsets = [], [], [], []
    for lp in entries:
        tokens.append(VOCAB[lp.token_id])
        values.append(lp.logprob)
        tops.append({VOCAB[t]: v for t, v in lp.top})
        offsets.append(text_offset)
        text_offset += len(VOCAB[lp.token_id])
    return {
        "tokens": tokens,
        "token_logprobs": values,
        "top_logprobs": tops,
        "text_offset": offsets,
    }


def prompt_logprobs(ids: list[int], top_n: int) -> list[dict[str, dict[str, Any]] | None]:
    """vLLM's `prompt_logprobs` under the mock's bigram model: None for the first position, then
    for each position a dict keyed by token id (as a string) holding the `top_n` most likely
    tokens and the prompt's own token, each with its rank, in rank order (vLLM puts the prompt's
    token first whatever its rank; readers go by key, and a checker of the order need not know)."""
    out: list[dict[str, dict[str, Any]] | None] = [None]
    for context, token in pairwise(ids):
        entry = {
            str(alternative): {"logprob": value, "rank": rank, "decoded_token": VOCAB[alternative]}
            for rank, (alternative, value) in enumerate(lm.top(context, top_n), start=1)
        }
        if str(token) not in entry:  # outside the top: ranked below every listed token
            logprob, rank = lm.logprob_and_rank(context, token)
            entry[str(token)] = {"logprob": logprob, "rank": rank, "decoded_token": VOCAB[token]}
        out.append(entry)
    return out


def _prompt_ids(sampling: Sampling) -> list[int]:
    return (
        sampling.prompt_ids
        if sampling.prompt_ids is not None
        else prompt_token_ids(sampling.prompt)
    )


def _entry(token: int, logprob: float) -> dict[str, Any]:
    piece = VOCAB[token]
    return {"token": piece, "logprob": logprob, "bytes": list(piece.encode("utf-8"))}


def chat_logprobs(entries: Sequence[TokenLogprob], with_ids: bool = False) -> dict[str, Any]:
    """Chat-style logprobs ({"content": [...]}) of `entries`.

    `with_ids` adds llama-server's per-entry token `id`, which clients can read token ids from.
    """
    content = []
    for lp in entries:
        entry = _entry(lp.token_id, lp.logprob)
        if with_ids:
            entry["id"] = lp.token_id
        entry["top_logprobs"] = [_entry(t, v) for t, v in lp.top]
        content.append(entry)
    return {"content": content}


def _logprobs(plan: Plan, entries: Sequence[TokenLogprob], offset: int, chat_style: bool) -> Any:
    if plan.sampling.logprobs is None:
        return None
    if chat_style or plan.sampling.endpoint == "chat":
        return chat_logprobs(entries, with_ids=chat_style)
    return completion_logprobs(entries, offset)


def _choice(plan: Plan, chat_style: bool) -> dict[str, Any]:
    """One choice of a non-streamed response."""
    ids, sampling = plan.token_ids, plan.sampling
    choice: dict[str, Any] = {"index": plan.index}
    if plan.tool_call is not None:
        choice["message"] = {"role": "assistant", "content": None, "tool_calls": [tool_call(plan)]}
    elif sampling.endpoint == "chat":
        choice["message"] = {"role": "assistant", "content": plan.text}
    else:
        choice["text"] = (sampling.prompt if sampling.echo else "") + plan.text
    entries = plan_logprobs(plan) if sampling.logprobs is not None else []
    choice["logprobs"] = _logprobs(plan, entries, 0, chat_style)
    choice["finish_reason"] = plan.finish_reason
    if sampling.prompt_logprobs is not None:
        choice["prompt_logprobs"] = prompt_logprobs(_prompt_ids(sampling), sampling.prompt_logprobs)
    if sampling.return_token_ids:
        choice["token_ids"] = ids
        if sampling.endpoint != "chat":  # vLLM puts the prompt ids in the choice for completions
            choice["prompt_token_ids"] = _prompt_ids(sampling)
    return choice


def tool_call(plan: Plan, arguments: str | None = None) -> dict[str, Any]:
    """The OpenAI tool call of a plan that makes one, with its arguments (the plan's text unless
    given)."""
    assert plan.tool_call is not None
    function = {
        "name": plan.tool_call.name,
        "arguments": plan.text if arguments is None else arguments,
    }
    return {"id": plan.tool_call.call_id, "type": "function", "function": function}


def response_body(
    plans: Plan | Sequence[Plan], model: str, created: int, chat_style: bool = False
) -> dict[str, Any]:
    """The non-streamed response object (completions or chat) with one choice per plan."""
    plans = [plans] if isinstance(plans, Plan) else list(plans)
    first = plans[0]
    sampling = first.sampling
    body: dict[str, Any]
    if sampling.endpoint == "chat":
        body = {"id": f"chatcmpl-{first.request_id}", "object": "chat.completion"}
    else:
        body = {"id": f"cmpl-{first.request_id}", "object": "text_completion"}
    choices = [_choice(plan, chat_style) for plan in plans]
    body.update(created=created, model=model, system_fingerprint=None, choices=choices,
                usage=_usage(plans))  # fmt: skip
    if sampling.return_token_ids and sampling.endpoint == "chat":
        body["prompt_token_ids"] = _prompt_ids(sampling)  # and at the top level for chat
    return body


class EventWriter:
    """Builds the SSE events of one streamed response; chunk templates are built once."""

    def __init__(self, plan: Plan, model: str, created: int, chat_style: bool = False) -> None:
        """Events of `plan`'s choice (its `index`)."""
        self.plan = plan
        self._chat = plan.sampling.endpoint == "chat"
        self._chat_style = chat_style
        self._offset = 0
        kind = (
            ("chatcmpl-", "chat.completion.chunk") if self._chat else ("cmpl-", "text_completion")
        )
        self._head = (
            f'data: {{"id":{json.dumps(kind[0] + plan.request_id)},"object":"{kind[1]}",'
            f'"created":{created},"model":{json.dumps(model)},"choices":[{{"index":{plan.index},'
        ).encode()
        self._text_key = b'"delta":{"content":' if self._chat else b'"text":'
        self._close_text = b"}" if self._chat else b""
        if plan.tool_call is not None:  # OpenAI's tool call deltas: argument fragments
            self._text_key = b'"delta":{"tool_calls":[{"index":0,"function":{"arguments":'
            self._close_text = b"}}]}"
        self._fast = plan.sampling.logprobs is None and not plan.sampling.return_token_ids
        self._entries = plan_logprobs(plan) if plan.sampling.logprobs is not None else []

    def token(self, position: int) -> bytes:
        """The event carrying output token number `position`; the last one carries the
        finish_reason too, as vLLM sends it (no separate empty event), except a tool call's:
        `finish` follows it."""
        token = self.plan.token_ids[position]
        pieces = self.plan.pieces
        text = (_TOKEN_JSON[token] if pieces is None else json.dumps(pieces[position])).encode()
        reason = b"null"
        if position == len(self.plan.token_ids) - 1 and self.plan.tool_call is None:
            reason = json.dumps(self.plan.finish_reason).encode()
        if self._fast:
            tail = b',"logprobs":null,"finish_reason":' + reason + b"}]}\n\n"
            return self._head + self._text_key + text + self._close_text + tail
        entries = self._entries[position : position + 1]
        lp = _logprobs(self.plan, entries, self._offset, self._chat_style)
        self._offset += len(VOCAB[token] if pieces is None else pieces[position])
        extra = ""
        if self.plan.sampling.return_token_ids:
            extra = f',"token_ids":[{token}]'
            if position == 0 and not self._chat:
                extra += f',"prompt_token_ids":{_prompt_ids(self.plan.sampling)}'
        ending = f',"logprobs":{json.dumps(lp)},"finish_reason":{reason.decode()}{extra}}}]}}\n\n'
        return self._head + self._text_key + text + self._close_text + ending.encode()

    def role(self) -> bytes:
        """Chat's first event, announcing the assistant role (carries prompt ids when asked);
        a tool call's announces the call too, its arguments still empty."""
        extra = b""
        if self.plan.sampling.return_token_ids:
            ids = json.dumps(_prompt_ids(self.plan.sampling))
            extra = f',"prompt_token_ids":{ids}'.encode()
        delta = b'{"role":"assistant","content":""}'
        if self.plan.tool_call is not None:
            call = {"index": 0, **tool_call(self.plan, "")}
            delta = json.dumps({"role": "assistant", "content": None, "tool_calls": [call]},
                               separators=(",", ":")).encode()  # fmt: skip
        return (
            self._head
            + b'"delta":'
            + delta
            + b',"logprobs":null,"finish_reason":null}]'
            + extra
            + b"}\n\n"
        )

    def finish(self) -> bytes:
        """The event carrying finish_reason of an answer with no token or of a tool call (empty
        text / delta)."""
        empty = b'"delta":{}' if self._chat else b'"text":""'
        reason = json.dumps(self.plan.finish_reason).encode()
        return self._head + empty + b',"logprobs":null,"finish_reason":' + reason + b"}]}\n\n"

    def usage(self, plans: Sequence[Plan] = ()) -> bytes:
        """The final usage event with empty choices (stream_options.include_usage), counting
        every choice of the request (`plans`; this writer's own when none are given)."""
        head = self._head[: self._head.index(b'"choices"')]
        usage = json.dumps(_usage(plans or [self.plan])).encode()
        return head + b'"choices":[],"usage":' + usage + b"}\n\n"

    def error(self, message: str) -> bytes:
        """A server-declared error event inside a 200 stream."""
        return (
            b"data: "
            + json.dumps(error_body(message, "InternalServerError", 500)).encode()
            + b"\n\n"
        )

    def malformed(self) -> bytes:
        """An event whose payload is not valid JSON."""
        return self._head + b'"text":"\\u00' + b"\n\n"
