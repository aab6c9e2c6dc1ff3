"""targets.parse.StreamTemplate: a streamed event folded from the bytes around its text must fold
exactly as decoding it whole does, whatever a server sends (issue 31: the per-event cost).

The oracle is the same fold with the template never learnt. Streams are drawn as a plain event
of a real server's shape and changes a server (or a hostile one) can make to it: the text as
any string, written as orjson, ASCII-escaped or spaced JSON writes it; the bytes of the text's
token replaced by raw JSON punctuation; every other field that folding reads; duplicate keys;
[DONE]; junk."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from soakgate.targets import parse
from soakgate.targets.spec import Outcome


class _Never(parse.StreamTemplate):
    """A template that never learns: every event decoded whole, as before it existed."""

    def learn(self, data: bytes, event: Any) -> None:
        return None


def _base(chat: bool, text: str, created: int = 1796571845) -> dict[str, Any]:
    if chat:
        choice: dict[str, Any] = {"index": 0, "delta": {"content": text}}
        kind, rid = "chat.completion.chunk", "chatcmpl-1"
    else:
        choice, kind, rid = {"index": 0, "text": text}, "text_completion", "cmpl-1"
    choice.update(logprobs=None, finish_reason=None)
    return {"id": rid, "object": kind, "created": created, "model": "m", "choices": [choice]}


def _text_path(event: dict[str, Any], chat: bool) -> tuple[dict[str, Any], str]:
    choice = event["choices"][0]
    return (choice["delta"], "content") if chat else (choice, "text")


_PUNCT = st.text(alphabet='"\\,:{}[] a1\nnul\u00e9', max_size=12)
_VALUES = st.one_of(
    st.none(), st.integers(-2, 2), st.booleans(), st.text(max_size=5),
    st.lists(st.integers(0, 3), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(-5, 5)),
)  # fmt: skip
_FIELDS = ["finish_reason", "logprobs", "token_ids", "index", "usage", "error",
           "prompt_token_ids", "tool_calls", "role", "created", "choices"]  # fmt: skip


@st.composite
def _event(draw: st.DrawFn, chat: bool) -> bytes:
    """One payload: mostly a plain event with a new text, else one change to it."""
    text = draw(st.text(max_size=8))
    event = _base(chat, text, created=draw(st.sampled_from([1796571845, 1796571846])))
    how = draw(st.sampled_from(["plain"] * 6 + ["field", "raw", "dup", "done", "junk"]))
    if how == "done":
        return draw(st.sampled_from([b"[DONE]", b" [DONE] "]))
    if how == "junk":
        return draw(st.binary(max_size=30))
    holder, key = _text_path(event, chat)
    if how == "field":
        field, value = draw(st.sampled_from(_FIELDS)), draw(_VALUES)
        if field in ("usage", "error", "prompt_token_ids", "created"):
            event[field] = value
        elif field == "choices":
            event["choices"] = draw(st.sampled_from([[], [event["choices"][0]] * 2, value]))
        elif field in ("role", "tool_calls"):
            holder[field] = value
        else:
            event["choices"][0][field] = value
    if how == "dup":
        holder["zz"] = text  # written again below as a second key of the same name
    style = draw(st.sampled_from(["orjson", "ascii", "spaced"]))
    if style == "orjson":
        raw = orjson.dumps(event)
    else:
        raw = json.dumps(
            event,
            ensure_ascii=style == "ascii",
            separators=(",", ":") if style == "ascii" else None,
        ).encode()
    if how == "dup":
        raw = raw.replace(b'"zz"', json.dumps(key).encode(), 1)
    if how == "raw":  # the text's token replaced by raw bytes, whatever they make
        token = orjson.dumps(text)
        if token in raw:
            at = raw.find(token)
            raw = raw[:at] + draw(_PUNCT).encode() + raw[at + len(token) :]
    return raw


def _fold(payloads: list[bytes], template: parse.StreamTemplate) -> tuple[Any, ...]:
    """What folding the payloads leaves: each one's result (or its error), and the outcome."""
    answer = parse.Answer(Outcome(started_at=0), template.chat)
    results: list[Any] = []
    for data in payloads:
        try:
            results.append(parse.fold_payload(answer, data, template))
        except Exception as exc:  # the error is part of what is compared
            results.append((type(exc).__name__, str(exc)))
            break
    answer.close()
    o = answer.outcome
    fields = (o.text, o.finish_reason, o.prompt_tokens, o.completion_tokens, o.token_ids,
              o.prompt_token_ids, o.logprob_parts, o.logprobs_count, o.tool_calls)  # fmt: skip
    return (results, fields, answer.others)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chat=st.booleans(), data=st.data())
def test_a_stream_folds_the_same_with_the_template_as_decoded_whole(
    chat: bool, data: st.DataObject
) -> None:
    payloads = data.draw(st.lists(_event(chat), min_size=1, max_size=12))
    fast = parse.StreamTemplate(chat)
    assert _fold(payloads, fast) == _fold(payloads, _Never(chat))


def test_a_real_servers_stream_is_folded_by_the_template_after_its_first_events() -> None:
    """The mock writes vLLM's events: the role event, then one event per token alike but for
    its text, the finish reason, usage. All but the first two and the last two are folded by
    the template, and what they fold is the text decoded whole gives."""
    texts = ["", " device", ".", "\n", ' "quoted"', "\\", "é", " It", " end"]
    events = [_base(True, t) for t in texts]
    events[0]["choices"][0]["delta"]["role"] = "assistant"
    events[-1]["choices"][0]["finish_reason"] = "length"
    usage = {**_base(True, ""), "choices": [], "usage": {"prompt_tokens": 3}}
    payloads = [orjson.dumps(e) for e in [*events, usage]] + [b"[DONE]"]
    fast = parse.StreamTemplate(True)
    assert _fold(payloads, fast) == _fold(payloads, _Never(True))
    assert fast.fast == len(texts) - 3  # the role event and the first text event are learnt from
    assert _fold(payloads, parse.StreamTemplate(True))[1][0] == "".join(texts)


def test_a_template_is_not_taken_where_the_text_is_written_otherwise_or_twice() -> None:
    """The text escaped where orjson writes it raw, or its token written twice in the event:
    no template, every event decoded whole."""
    escaped = json.dumps(_base(True, "é"), ensure_ascii=True).encode()
    twice = orjson.dumps({**_base(True, "m"), "model": "m"})
    for raw in (escaped, twice):
        template = parse.StreamTemplate(True)
        _fold([raw, raw, raw], template)
        assert template.fast == 0 and template.head is None


def test_a_stream_whose_events_never_repeat_stops_learning() -> None:
    payloads = [orjson.dumps({**_base(False, "x"), "id": f"c{i}"}) for i in range(20)]
    template = parse.StreamTemplate(False)
    _fold(payloads, template)
    assert template.fast == 0 and template.learnt == 4
