"""targets.parse.StreamTemplate: a streamed event folded from the bytes around its text must fold
exactly as decoding it whole does, whatever a server sends (issue 31: the per-event cost).

The oracle is the same fold with the template never learnt. Streams are drawn as a plain event
of a real server's shape and changes a server (or a hostile one) can make to it: the text as
any string, written as orjson, ASCII-escaped or spaced JSON writes it; the bytes of the text's
token replaced by raw JSON punctuation; every other field that folding reads; duplicate keys;
[DONE]; junk."""

from __future__ import annotations

import itertools
import json
from typing import Any

import orjson
import pytest
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


_SHORT = st.sampled_from(["", "a", "m", " the", '"', "\\", "\u00e9", "\n"])
_MIDDLES = [
    "1",
    "null",
    "true",
    '"a","b"',
    '"a"}',
    '"a" "b"',
    '["a"]',
    '{"a":1}',
    ' "a" ',
    '"\\u00zz"',
    '"a\\"',
    '"\n"',
    '"a',
    "",
    '"a","text":"b"',
    '"a","content":"b"',
]
_PUNCT = st.text(alphabet='"\\,:{}[] a1\nnul\u00e9', max_size=12)
_VALUES = st.one_of(
    st.none(), st.integers(-2, 2), st.booleans(), st.text(max_size=5),
    st.lists(st.integers(0, 3), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(-5, 5)),
)  # fmt: skip
_FIELDS = ["finish_reason", "logprobs", "token_ids", "index", "usage", "error",
           "prompt_token_ids", "tool_calls", "role", "created", "choices"]  # fmt: skip


@st.composite
def _stream(draw: st.DrawFn, chat: bool) -> list[bytes]:
    """A stream's payloads: its events written alike (one model name, `created`, way of writing
    JSON, drawn once), each mostly a plain event with a new text, else one change to it."""
    model, style = draw(_SHORT), draw(st.sampled_from(["orjson", "ascii", "spaced", "escaped"]))
    created = draw(st.sampled_from([1796571845, 1796571846]))
    return [draw(_event(chat, model, style, created)) for _ in range(draw(st.integers(1, 12)))]


@st.composite
def _event(draw: st.DrawFn, chat: bool, model: str, style: str, created: int) -> bytes:
    """One payload of a stream (see `_stream`)."""
    text = draw(st.one_of(_SHORT, st.text(max_size=8)))
    event = _base(chat, text, created=draw(st.sampled_from([created] * 6 + [created + 1])))
    event["model"] = draw(st.sampled_from([model] * 6 + ["other"]))  # often the text itself
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
    if style in ("orjson", "escaped"):
        raw = orjson.dumps(event)
    else:
        raw = json.dumps(
            event,
            ensure_ascii=style == "ascii",
            separators=(",", ":") if style == "ascii" else None,
        ).encode()
    token = orjson.dumps(text)
    at = raw.rfind(token)  # the text's: it is written after the model's name
    if style == "escaped" and at >= 0:  # every character of the text escaped: the same string
        escaped = "".join(f"\\u{ord(c):04x}" if ord(c) < 0x10000 else c for c in text)
        raw = raw[:at] + f'"{escaped}"'.encode() + raw[at + len(token) :]
    if how == "dup":
        raw = raw.replace(b'"zz"', json.dumps(key).encode(), 1)
    if how == "raw" and at >= 0:  # the text's token replaced by raw bytes, whatever they make
        middle = draw(st.one_of(_PUNCT, st.sampled_from(_MIDDLES)))
        raw = raw[:at] + middle.encode() + raw[at + len(token) :]
    return raw


def _fold(payloads: list[bytes], template: parse.StreamTemplate) -> tuple[Any, ...]:
    """What folding the payloads leaves: each one's result (or its error), and the outcome."""
    answer = parse.Answer(Outcome(started_at=0), template.chat)
    results: list[Any] = []
    for data in payloads:
        answer.content = False
        try:
            done = parse.fold_payloads(answer, [data], template)
        except Exception as exc:  # the error is part of what is compared
            results.append((type(exc).__name__, str(exc)))
            break
        results.append(None if done else answer.content)
    answer.close()
    return (results, _fields(answer.outcome), answer.others)


def _fields(o: Outcome) -> tuple[Any, ...]:
    return (o.text, o.finish_reason, o.prompt_tokens, o.completion_tokens, o.token_ids,
            o.prompt_token_ids, o.logprob_parts, o.logprobs_count, o.tool_calls)  # fmt: skip


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chat=st.booleans(), data=st.data())
def test_a_stream_folds_the_same_with_the_template_as_decoded_whole(
    chat: bool, data: st.DataObject
) -> None:
    payloads = data.draw(_stream(chat))
    fast = parse.StreamTemplate(chat)
    assert _fold(payloads, fast) == _fold(payloads, _Never(chat))
    # folded as the client reads them, several payloads per call: the same answer
    cuts = sorted(data.draw(st.lists(st.integers(0, len(payloads)), max_size=4)))
    assert _fold_batches(payloads, cuts, chat) == _summary(*_fold(payloads, _Never(chat)))


def _summary(
    results: list[Any], fields: tuple[Any, ...], others: dict[str, int]
) -> tuple[Any, ...]:
    """One-at-a-time results as a batch sees them: [DONE] seen, content seen, the error."""
    error = next((r for r in results if isinstance(r, tuple)), None)
    done = None if error else None in results  # after an error, [DONE] decides nothing
    return (done, True in results, error, fields, others)


def _fold_batches(payloads: list[bytes], cuts: list[int], chat: bool) -> tuple[Any, ...]:
    """The payloads folded in the batches `cuts` makes, with one template, as the client does."""
    answer = parse.Answer(Outcome(started_at=0), chat)
    template, done, error = parse.StreamTemplate(chat), False, None
    for start, stop in itertools.pairwise([0, *cuts, len(payloads)]):
        try:
            done = parse.fold_payloads(answer, payloads[start:stop], template) or done
        except Exception as exc:  # the error is part of what is compared
            error = (type(exc).__name__, str(exc))
            break
    answer.close()
    outcome = _fields(answer.outcome)
    return (None if error else done, answer.content, error, outcome, answer.others)


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
    # decoded whole: the role event (no text), the first text event (learnt from), the last two
    assert fast.fast == len(texts) - 3
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


def test_a_text_written_escaped_is_not_taken_for_the_same_string_written_elsewhere() -> None:
    """The text `a` escaped (`\\u0061`) in an event whose model is named `a`: the one `"a"` in
    the bytes is the model's. A template cut there would read the next event's model name as
    its text; the probe finds the cut is not at the text, and every event is decoded whole."""
    first, second = _base(True, "a"), _base(True, "a")
    first["model"], second["model"] = "a", "other"
    payloads = [orjson.dumps(e).replace(b'"content":"a"', b'"content":"\\u0061"')
                for e in (first, second)]  # fmt: skip
    template = parse.StreamTemplate(True)
    assert _fold(payloads, template) == _fold(payloads, _Never(True))
    assert _fold(payloads, parse.StreamTemplate(True))[1][0] == "aa"
    assert template.fast == 0


@pytest.mark.parametrize("middle", [m.encode() for m in _MIDDLES])
def test_an_event_whose_text_is_not_one_string_is_decoded_whole(middle: bytes) -> None:
    """After a template is learnt, an event with its bytes around anything in the text's place
    (one JSON string with spaces around it, or anything else) folds as decoding it whole does:
    an error, or another text."""
    plain = orjson.dumps(_base(True, "x"))
    odd = plain.replace(b'"content":"x"', b'"content":' + middle)
    payloads = [plain, plain, odd, plain]
    template = parse.StreamTemplate(True)
    assert _fold(payloads, template) == _fold(payloads, _Never(True))
    assert template.fast >= 1


@pytest.mark.parametrize(
    ("where", "field", "value"),
    [("choice", "token_ids", [5]), ("choice", "finish_reason", "length"),
     ("choice", "logprobs", {"content": [{"token": "x", "logprob": -1.0}]}),
     ("event", "usage", {"prompt_tokens": 3, "completion_tokens": 1}),
     ("event", "prompt_token_ids", [1, 2]), ("delta", "tool_calls", [])],
)  # fmt: skip
def test_events_that_fold_more_than_their_text_never_become_templates(
    where: str, field: str, value: Any
) -> None:
    """Every event of the stream alike but for its text, and each with a field folding reads
    (token ids, a finish reason, logprobs, usage, prompt ids, tool calls): no template, so each
    event's field is folded as decoding it whole does."""
    events = [_base(True, text) for text in ("a", "b", "c", "d")]
    for event in events:
        choice = event["choices"][0]
        {"event": event, "choice": choice, "delta": choice["delta"]}[where][field] = value
    payloads = [orjson.dumps(e) for e in events]
    template = parse.StreamTemplate(True)
    assert _fold(payloads, template) == _fold(payloads, _Never(True))
    assert template.fast == 0
