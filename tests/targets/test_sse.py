"""targets/sse.py: the WHATWG event-stream rules, however the bytes are chunked."""

from __future__ import annotations

import itertools
import re
import time

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from soakgate.targets.sse import SseSplitter


def split(stream: bytes, step: int) -> tuple[list[bytes], bytes | None]:
    """Feed `stream` in chunks of `step` bytes; the event payloads in order and the error."""
    splitter = SseSplitter()
    events: list[bytes] = []
    for start in range(0, len(stream), step):
        events += splitter.feed(stream[start : start + step])
    return events + splitter.close(), splitter.error


STEPS = [1, 2, 3, 5, 1000]


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("end", [b"\n", b"\r\n", b"\r"])
def test_every_line_ending_the_standard_allows(step: int, end: bytes) -> None:
    stream = end.join([b"data: a", b"data: b", b"", b"data:c", b"", b"", b"data: [DONE]", b""])
    assert split(stream, step) == ([b"a\nb", b"c", b"[DONE]"], None)


@pytest.mark.parametrize("step", STEPS)
def test_one_leading_bom_is_skipped_and_only_one(step: int) -> None:
    bom = b"\xef\xbb\xbf"
    assert split(bom + b"data: x\n\n", step) == ([b"x"], None)
    # a second BOM is part of the first line's field name: not a data line
    assert split(bom + bom + b"data: x\n\ndata: y\n\n", step) == ([b"y"], None)
    assert split(b"data: \xef\xbb\xbfx\n\n", step) == ([b"\xef\xbb\xbfx"], None)


@pytest.mark.parametrize("step", STEPS)
def test_fields_comments_and_one_space(step: int) -> None:
    stream = (
        b": a comment\n"
        b"id: 7\nretry: 10\nunknown: field\n"
        b"data:  two spaces: one is kept\n\n"
        b"data\n\n"  # a field name alone: data with an empty value
        b"event: message\ndata: named\n\n"
        b"event: ping\ndata: {}\n\n"  # other types are folded too: nothing is skipped
        b"event: add\n\n"  # no data: nothing dispatched, and the type is reset
        b"data: after\n\n"
    )
    events, error = split(stream, step)
    assert events == [b" two spaces: one is kept", b"", b"named", b"{}", b"after"]
    assert error is None


@pytest.mark.parametrize("step", STEPS)
def test_an_error_event_ends_the_stream(step: int) -> None:
    stream = b'data: 1\n\nevent: error\ndata: {"message": "boom"}\n\ndata: 2\n\n'
    assert split(stream, step) == ([b"1"], b'{"message": "boom"}')


def test_the_last_event_without_its_blank_line_is_dispatched() -> None:
    assert split(b"data: 1\n\ndata: [DONE]", 4) == ([b"1", b"[DONE]"], None)
    assert split(b"data: 1\r\ndata: 2\r", 3) == ([b"1\n2"], None)


def test_a_long_line_in_small_chunks_costs_linear_time() -> None:
    # before: the unfinished line was joined with every new chunk (quadratic)
    chunk = b"x" * 4096
    splitter = SseSplitter()
    began = time.process_time()
    assert splitter.feed(b"data: ") == []
    for _ in range(4096):  # 16 MiB in one line
        assert splitter.feed(chunk) == []
    events = splitter.feed(b"\n\n")
    elapsed = time.process_time() - began
    assert len(events) == 1 and len(events[0]) == 4096 * 4096
    assert elapsed < 1.0, elapsed  # ~0.02 s; the quadratic join took minutes


def whole(stream: bytes) -> tuple[list[bytes], bytes | None]:
    """The standard's algorithm over the whole stream at once, line by line, as the oracle of
    the incremental splitter (and of its fast path for `data: ...` and a blank line)."""
    stream = stream.removeprefix(b"\xef\xbb\xbf")
    *lines, unfinished = re.split(rb"\r\n|\r|\n", stream)
    events: list[bytes] = []
    data: list[bytes] = []
    kind = b""
    for line in [*lines, *([unfinished, b""] if unfinished else [])]:
        if not line:
            if data and kind == b"error":
                return events, b"\n".join(data)
            if data:
                events.append(b"\n".join(data))
            data, kind = [], b""
        elif not line.startswith(b":"):
            name, _, value = line.partition(b":")
            value = value.removeprefix(b" ")
            if name == b"data":
                data.append(value)
            elif name == b"event":
                kind = value
    if data:  # the stream ended without the last event's blank line: dispatched all the same
        if kind == b"error":
            return events, b"\n".join(data)
        events.append(b"\n".join(data))
    return events, None


_LINES = st.one_of(
    st.builds(lambda p: b"data: " + p, st.binary(max_size=6).filter(lambda b: b"\n" not in b and b"\r" not in b)),
    st.sampled_from([b"", b"", b"", b"data:x", b"data:  y", b"data", b"data: ", b"event: error",
                     b"event: other", b"event:error", b": comment", b"id: 3", b"retry: 5",
                     b"datum: z", b"\xef\xbb\xbfdata: bom"]),
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(
    lines=st.lists(_LINES, max_size=24),
    ends=st.lists(st.sampled_from([b"\n", b"\n", b"\r\n", b"\r"]), min_size=24, max_size=24),
    bom=st.booleans(),
    last=st.booleans(),
    cuts=st.lists(st.integers(0, 400), max_size=8),
)
@example(  # an event's type in one chunk, its data and blank line in the next
    lines=[b"event: error", b"data: x", b""], ends=[b"\n"] * 24, bom=False, last=True, cuts=[13]
)
def test_any_chunking_of_any_stream_gives_what_the_whole_stream_gives(
    lines: list[bytes], ends: list[bytes], bom: bool, last: bool, cuts: list[int]
) -> None:
    stream = b"".join(line + end for line, end in zip(lines, ends, strict=False))
    if not last and lines:  # the stream may stop in the middle of its last line
        stream = stream[: -len(ends[len(lines) - 1])]
    stream = (b"\xef\xbb\xbf" if bom else b"") + stream
    splitter, events = SseSplitter(), []
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    for start, stop in itertools.pairwise(points):
        events += splitter.feed(stream[start:stop])
    events += splitter.close()
    assert (events, splitter.error) == whole(stream)
