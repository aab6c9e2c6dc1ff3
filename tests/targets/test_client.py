"""Unit tests of targets/spec.py and targets/parse.py, and the client against a raw HTTP server."""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

import pytest

from soakgate.errors import UsageError
from soakgate.prompts import Prompt, builtin_prompts
from soakgate.targets import OpenAIClient, Outcome, RequestSpec, TargetSpec, parse
from soakgate.targets.client import make_session
from soakgate.targets.sse import SseSplitter


def prompt() -> Prompt:
    return builtin_prompts()[0]


# --- payloads ---------------------------------------------------------------------------------


def test_streaming_payload_asks_for_usage_and_sends_only_what_was_set() -> None:
    body = parse.build_payload(RequestSpec(max_tokens=7, temperature=0.5), prompt(), "m")
    assert body == {
        "model": "m", "max_tokens": 7, "prompt": prompt().text, "temperature": 0.5,
        "stream": True, "stream_options": {"include_usage": True},
    }  # fmt: skip


def test_non_streaming_chat_payload_has_messages_and_no_stream_options() -> None:
    body = parse.build_payload(RequestSpec(endpoint="chat", stream=False), prompt(), "m")
    assert body["messages"] == prompt().messages() and "prompt" not in body
    assert "stream" not in body and "stream_options" not in body


def test_optional_fields_and_logprobs_shape_per_endpoint() -> None:
    spec = RequestSpec(
        top_p=0.9, seed=3, ignore_eos=True, return_token_ids=True, logprobs=True,
        extra={"top_k": 5, "max_tokens": 9},
    )  # fmt: skip
    body = parse.build_payload(spec, prompt(), "m")
    assert (body["top_p"], body["seed"], body["ignore_eos"], body["return_token_ids"]) == (
        0.9, 3, True, True,
    )  # fmt: skip
    assert body["logprobs"] == 1 and body["top_k"] == 5
    assert body["max_tokens"] == 9  # extra fields win: they are passed verbatim
    chat = parse.build_payload(RequestSpec(endpoint="chat", logprobs=True), prompt(), "m")
    assert chat["logprobs"] is True
    plain = parse.build_payload(RequestSpec(), prompt(), "m")
    for key in ("top_p", "seed", "ignore_eos", "return_token_ids", "logprobs"):
        assert key not in plain


@pytest.mark.parametrize(
    "kwargs",
    [{"endpoint": "embeddings"}, {"max_tokens": 0}, {"temperature": -1}, {"timeout_s": 0}],
)
def test_bad_request_specs_are_usage_errors(kwargs: dict[str, Any]) -> None:
    with pytest.raises(UsageError):
        RequestSpec(**kwargs)


# --- target URLs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "url", "name"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000", "127.0.0.1:8000"),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000", "127.0.0.1:8000"),
        ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000", "127.0.0.1:8000"),
        ("gpu0=http://127.0.0.1:8001", "http://127.0.0.1:8001", "gpu0"),
        ("http://localhost:9/proxy/v1", "http://localhost:9/proxy", "localhost:9"),
        ("http://[::1]:8000", "http://[::1]:8000", "::1:8000"),
    ],
)
def test_target_urls_parse(text: str, url: str, name: str) -> None:
    target = TargetSpec.parse(text, api_key="sk-Zq9", model="m")
    assert (target.url, target.name, target.api_key, target.model) == (url, name, "sk-Zq9", "m")
    assert "Zq9" not in repr(target)  # the key is never shown


@pytest.mark.parametrize(
    "text",
    ["127.0.0.1:8000", "ftp://127.0.0.1:8000", "http://", "http://h:99999", "http://h:port", ""],
)
def test_bad_target_urls_are_one_line_usage_errors(text: str) -> None:
    with pytest.raises(UsageError) as info:
        TargetSpec.parse(text)
    assert "\n" not in str(info.value) and repr(text) in str(info.value)


# --- SSE framing ------------------------------------------------------------------------------


def split(stream: bytes, step: int) -> list[bytes]:
    """Feed `stream` in chunks of `step` bytes; all event payloads in order."""
    splitter = SseSplitter()
    events: list[bytes] = []
    for start in range(0, len(stream), step):
        events += splitter.feed(stream[start : start + step])
    return events + splitter.close()


STREAM = (
    b": comment from a proxy\n\n"
    b'event: message\nid: 1\ndata: {"a":\ndata: 1}\n\n'  # one event over two data lines
    b'data:{"b":2}\r\n\r\n'  # no space after the colon, CRLF line ends
    b"retry: 100\n\n"  # an event without data yields nothing
    b"data: [DONE]"  # the last event without its closing blank line
)


@pytest.mark.parametrize("step", [1, 3, 7, len(STREAM)])
def test_sse_events_survive_any_chunking(step: int) -> None:
    assert split(STREAM, step) == [b'{"a":\n1}', b'{"b":2}', b"[DONE]"]
    assert parse.decode_event(split(STREAM, step)[0]) == {"a": 1}


def test_decode_event_rejects_trailing_garbage_and_accepts_leading_space() -> None:
    assert parse.decode_event(b' {"x": 1} ') == {"x": 1}
    with pytest.raises(json.JSONDecodeError):
        parse.decode_event(b'{"x": 1} {"y": 2}')


# --- folding responses ------------------------------------------------------------------------


def fold_event(outcome: Outcome, event: Any, chat: bool) -> bool:
    answer = parse.Answer(outcome, chat)
    content = parse.fold_event(answer, event)
    answer.close()
    return content


def fold_body(outcome: Outcome, body: Any, chat: bool) -> None:
    answer = parse.Answer(outcome, chat)
    parse.fold_body(answer, body)
    answer.close()
    answer.check()


def test_stream_without_finish_reason_keeps_none() -> None:
    outcome = Outcome(started_at=0)
    assert fold_event(outcome, {"choices": [{"text": "hi"}]}, chat=False)
    assert outcome.text == "hi" and outcome.finish_reason is None


def test_chat_role_chunk_and_usage_only_chunk_carry_no_content() -> None:
    outcome = Outcome(started_at=0)
    role = {"choices": [{"delta": {"role": "assistant", "content": None}}]}
    assert not fold_event(outcome, role, chat=True)
    usage = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}
    assert not fold_event(outcome, usage, chat=True)
    assert (outcome.prompt_tokens, outcome.completion_tokens, outcome.text) == (5, 2, "")


def test_llamacpp_chat_style_logprobs_give_ids_only_when_every_entry_has_one() -> None:
    outcome = Outcome(started_at=0)
    entries = [{"id": 7, "token": "a", "logprob": -1.0}, {"id": 0, "token": "!", "logprob": -2.0}]
    choice = {"text": "a!", "logprobs": {"content": entries}, "finish_reason": "length"}
    fold_body(outcome, {"choices": [choice]}, chat=False)
    assert outcome.token_ids == [7, 0] and outcome.logprobs_count == 2
    gappy = Outcome(started_at=0)
    entries[1] = {"token": "!", "logprob": -2.0}
    fold_body(gappy, {"choices": [choice]}, chat=False)
    assert gappy.token_ids is None and gappy.logprobs_count == 2


def test_vllm_token_ids_win_over_logprobs() -> None:
    outcome = Outcome(started_at=0)
    logprobs = {"tokens": ["a", "b"], "token_logprobs": [-1.0, -1.0]}
    choice = {"text": "ab", "token_ids": [1, 2], "logprobs": logprobs, "finish_reason": "stop"}
    fold_body(outcome, {"choices": [choice], "usage": {"completion_tokens": 2}}, chat=False)
    assert outcome.token_ids == [1, 2] and outcome.logprobs_count == 2


def test_finish_counts_ids_without_usage_and_drops_ids_that_miss_tokens() -> None:
    counted = Outcome(started_at=0, token_ids=[1, 2, 3])
    parse.finish(counted)
    assert counted.completion_tokens == 3
    # llama.cpp leaves out logprob entries of tokens ending inside a UTF-8 character
    gappy = Outcome(started_at=0, token_ids=[1, 2], completion_tokens=3)
    parse.finish(gappy)
    assert gappy.token_ids is None and gappy.completion_tokens == 3


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"error": {"message": "CUDA error"}}, parse.ServerDeclaredError),
        ({"error": "boom"}, parse.ServerDeclaredError),
        ({"choices": []}, parse.ResponseFormatError),
        ({"choices": "x"}, parse.ResponseFormatError),
        ({"choices": [{"text": 5}]}, parse.ResponseFormatError),
        ([1, 2], parse.ResponseFormatError),
    ],
)
def test_bad_bodies_raise_the_classified_errors(body: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        fold_body(Outcome(started_at=0), body, chat=False)


# --- the client against a raw HTTP/1.1 server that drops keep-alive connections ---------------

EVENTS = [
    b": ping\n\n",
    b'data: {"choices":[{"text":"Hello"}]}\n\n',
    b'event: message\ndata: {"choices":[{"text":" wor',  # the chunk ends mid-line
    b'ld","logprobs":{"content":[{"id":9,"token":" world"}]}}]}\n\n',
    b'data: {"choices":[{"text":"","finish_reason":"length"}],\n'  # one JSON over two lines
    b'data: "usage":{"prompt_tokens":4,"completion_tokens":2}}\n\n',
]  # no [DONE], as from transformers serve


class ClosingServer:
    """Answers one streamed request per connection like llama.cpp: chunked, no `Connection:
    close`, then closes the connection `close_after_s` later without a word; counts requests
    the client wrote into a connection it was closing (each would be a lost request)."""

    def __init__(self, close_after_s: float) -> None:
        self.close_after_s = close_after_s
        self.answered = 0
        self.connections = 0
        self.written_into_close = 0
        self.handlers: set[asyncio.Task[None]] = set()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)  # awaited before the loop ends: no writer left to the collector
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            match = re.search(rb"(?i)content-length: *(\d+)", head)
            await reader.readexactly(int(match.group(1)) if match else 0)
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
            for piece in EVENTS:
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            self.answered += 1
            if await _more(reader, self.close_after_s):
                self.written_into_close += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def _more(reader: asyncio.StreamReader, wait_s: float) -> bool:
    """True when the client sent more bytes on this connection within `wait_s`."""
    try:
        return bool(await asyncio.wait_for(reader.read(1), wait_s))
    except TimeoutError:
        return False


async def _soak_closing_server(
    requests: int, concurrency: int, close_after_s: float
) -> tuple[list[Outcome], ClosingServer]:
    server = ClosingServer(close_after_s)
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    target = TargetSpec.parse(f"http://127.0.0.1:{port}")
    spec = RequestSpec(max_tokens=2, logprobs=True)
    outcomes: list[Outcome] = []
    async with make_session() as session:
        client = OpenAIClient(session, target, "m")

        async def worker(worker_id: int) -> None:
            for i in range(requests // concurrency):
                outcomes.append(await client.generate(prompt(), spec, f"r{worker_id}-{i}"))

        await asyncio.gather(*(worker(w) for w in range(concurrency)))
    listener.close()
    await listener.wait_closed()
    await asyncio.wait_for(asyncio.gather(*server.handlers), 60)
    return outcomes, server


@pytest.mark.parametrize("close_after_s", [0.0, 0.005, 0.05])
@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_server_closing_after_every_answer_loses_no_request_and_odd_sse_parses(
    concurrency: int, close_after_s: float
) -> None:
    # the pool's probation sees the connections close while they rest, and stops reusing them:
    # no request is written into a closing connection, so none is dropped and none re-sent
    outcomes, server = asyncio.run(_soak_closing_server(24, concurrency, close_after_s))
    assert len(outcomes) == server.answered == server.connections == 24
    assert server.written_into_close == 0
    for outcome in outcomes:
        assert outcome.error_class is None, outcome.error_detail
        assert outcome.attempts == 1
        assert outcome.text == "Hello world" and outcome.finish_reason == "length"
        assert (outcome.prompt_tokens, outcome.completion_tokens) == (4, 2)
        assert outcome.token_ids is None  # one id for two tokens: gappy, dropped
        assert outcome.ttft_s is not None


def test_target_names_split_at_the_first_equals_and_know_https() -> None:
    from soakgate.targets import TargetSpec

    spec = TargetSpec.parse("gpu0=http://127.0.0.1:8000/v1?x=1")
    assert spec.name == "gpu0"
    assert TargetSpec.parse("https://example.org").name == "example.org:443"
    assert TargetSpec.parse("http://example.org").name == "example.org:80"


# --- choices by index ---------------------------------------------------------------------------


def test_choices_are_assembled_by_index_and_others_are_an_error() -> None:
    outcome = Outcome(started_at=0)
    answer = parse.Answer(outcome, chat=False)
    for event in (
        {"choices": [{"index": 0, "text": "a"}]},
        {"choices": [{"index": 1, "text": "XYZ"}]},
        {"choices": [{"index": 1, "text": "W"}, {"index": 0, "text": "b"}]},
        {"choices": [{"text": "c", "finish_reason": "stop"}]},  # no index: its position, 0
    ):
        parse.fold_event(answer, event)
    answer.close()
    assert outcome.text == "abc" and outcome.finish_reason == "stop"
    with pytest.raises(parse.UnexpectedChoices, match=r"1 \(4 chars\)"):
        answer.check()


@pytest.mark.parametrize(
    "choices",
    [
        [{"index": 1, "text": "clean"}, {"index": 0, "text": "!" * 300}],
        [{"text": "a"}, {"text": "b"}],  # positions 0 and 1
        [{"index": 0, "text": "a"}, {"index": 0, "text": "b"}],  # index 0 twice
        [{"index": True, "text": "a"}],
        [{"index": "0", "text": "a"}],
        [{"index": -1, "text": "a"}],
    ],
)
def test_a_body_with_choices_not_asked_for_is_never_clean(choices: list[Any]) -> None:
    with pytest.raises(parse.UnexpectedChoices):
        fold_body(Outcome(started_at=0), {"choices": choices}, chat=False)


# --- Retry-After ----------------------------------------------------------------------------------


def test_retry_after_in_seconds_or_as_a_date() -> None:
    import email.utils
    import time

    from soakgate.targets.client import retry_after_seconds

    assert retry_after_seconds(b"2") == 2.0 and retry_after_seconds(b" 120 ") == 120.0
    later = email.utils.formatdate(time.time() + 30, usegmt=True).encode()
    assert 28 <= (retry_after_seconds(later) or 0) <= 30
    past = email.utils.formatdate(time.time() - 30, usegmt=True).encode()
    assert retry_after_seconds(past) == 0.0
    for bad in (None, b"", b"soon", b"-1", b"1.5", "²".encode()):
        assert retry_after_seconds(bad) is None


# --- a long stream folds in linear time -----------------------------------------------------------


def test_a_stream_of_many_small_events_folds_in_linear_time() -> None:
    # before: the text was rebuilt on every event, ~40 s of CPU for this stream
    events = b'data: {"choices":[{"text":"abcdefghi "}]}\n\n' * 200_000
    events += b'data: {"choices":[{"text":"","finish_reason":"length"}]}\n\ndata: [DONE]\n\n'
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n"

    async def main() -> tuple[Outcome, float]:
        handlers: list[asyncio.Task[None]] = []

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            handlers.append(asyncio.current_task())  # type: ignore[arg-type]
            try:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(head % len(events) + events)
                await writer.drain()
                await reader.read()
            finally:
                writer.close()

        listener = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        spec = RequestSpec(max_tokens=16, max_response_bytes=len(events))
        async with make_session() as session:
            client = OpenAIClient(session, TargetSpec.parse(f"http://127.0.0.1:{port}"), "m")
            began = time.process_time()
            outcome = await client.generate(prompt(), spec, "r-1")
            elapsed = time.process_time() - began
        listener.close()
        await listener.wait_closed()
        await asyncio.wait_for(asyncio.gather(*handlers), 60)  # it saw the close: writer closed
        return outcome, elapsed

    outcome, elapsed = asyncio.run(main())
    assert outcome.error_class is None, outcome.error_detail
    assert outcome.text == "abcdefghi " * 200_000
    assert elapsed < 5.0, elapsed  # ~0.6 s here (the server's share included)


def test_a_marked_prompts_body_is_spliced_into_its_bases_as_a_whole_encoding_gives_it() -> None:
    """A canary makes every request's prompt unique; the client encodes the unmarked prompt's
    body once and splices the marker in. On texts with quotes, escapes, NULs, characters outside
    the BMP and the splice's own sentinel, with system messages and structures, both endpoints
    and several sampling settings, marked once and twice: the bytes a whole encoding gives."""
    import random

    from soakgate.checks.canary import Canaries
    from soakgate.prompts.source import Structure
    from soakgate.targets import client as module

    rng = random.Random(11)
    alphabet = ["a", " ", '"', "\\", "\n", "\x00", "\u00e9", "\U0001f600", "\ud800", "{", "}"]
    canaries = Canaries("run1")

    async def compare() -> int:
        spliced = 0
        async with make_session() as session:
            client = OpenAIClient(session, TargetSpec.parse("http://127.0.0.1:9"), "m")
            for trial in range(600):
                text = "".join(rng.choices(alphabet, k=rng.randint(0, 20)))
                if trial % 50 == 0:
                    text += module._SENTINEL  # the sentinel itself: encoded whole
                base = Prompt(f"p{trial % 40}", text, rng.choice((None, "be brief")),
                              rng.choice((None, Structure("regex", "[a-z]+"))))  # fmt: skip
                spec = RequestSpec(endpoint=rng.choice(("completions", "chat")),
                                   stream=rng.random() < 0.5, temperature=rng.choice((0.0, 0.8)),
                                   extra=rng.choice(({}, {"top_k": 5})), structure_via="vllm")  # fmt: skip
                marked = canaries.mark(base, trial)
                if trial % 3 == 0:
                    marked = canaries.mark(marked, trial + 1)  # a twin of a twin: marked again
                plain = Prompt(marked.prompt_id, marked.text, marked.system, marked.structure)
                head, body = client._request(marked, spec)
                whole = json.dumps(parse.build_payload(spec, plain, "m")).encode()
                assert body == whole, (trial, text)
                assert head.endswith(b"Content-Length: %d\r\nX-Request-Id: " % len(whole))
                spliced += bool(client._splices.get(base))
        return spliced

    assert asyncio.run(compare()) > 300  # most of them spliced, not encoded whole
