"""Incremental server-sent-events parsing after the WHATWG HTML standard (§9.2.6).

Written here because no library parses bytes as they come off soakgate's own connection
without a reader of its own per event (aiohttp-sse-client, httpx-sse wrap a client). What the
standard says and this does: one leading UTF-8 BOM is skipped; a line ends at CRLF, LF or a
lone CR (a CRLF split between two chunks is one line end); a line starting with `:` is a
comment; the field name runs to the first `:` and one space after it is dropped; `data` lines
are joined with LF; a blank line dispatches the event, unless it has no data. Where this
departs from the standard, on purpose: an event of type `error` ends the stream as the
server's error (an OpenAI client's reading), events of any other type are folded like
`message` ones (nothing that carries text is skipped), and at the end of the stream an event
still missing its blank line is dispatched too (a server that stops right after its last
event has said all it had; whether the answer is whole is judged by its finish reason).
"""

from __future__ import annotations

import operator

_BOM = b"\xef\xbb\xbf"
_is_data = operator.methodcaller("startswith", b"data: ")


class SseSplitter:
    """Feed raw chunks, get each complete event's data; `error` holds an `event: error`'s.

    Cost is linear in the stream: an unfinished line is kept as pieces and joined once.
    """

    def __init__(self) -> None:
        self._partial: list[bytes] = []  # pieces of the current unfinished line
        self._data: list[bytes] = []  # data lines of the event being read
        self._event = b""  # its type (`event:` field); empty is `message`
        self._start = b""  # the first bytes, until the BOM question is settled
        self._started = False
        self._after_cr = False  # the last chunk ended with CR: a leading LF completes that end
        self.error: bytes | None = None
        """Data of an `event: error` (nothing is dispatched after it)."""

    def feed(self, chunk: bytes) -> list[bytes]:
        """The data payloads of the events completed by this chunk (multi-line data joined)."""
        if not self._started:
            chunk = self._skip_bom(chunk)
            if not chunk:
                return []
        if self._after_cr:
            self._after_cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if b"\r" in chunk:
            self._after_cr = chunk[-1:] == b"\r"
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if b"\n" not in chunk:
            if chunk:
                self._partial.append(chunk)
            return []
        lines = chunk.split(b"\n")
        if self._partial:
            self._partial.append(lines[0])
            lines[0] = b"".join(self._partial)
            self._partial = []
        last = lines.pop()
        if last:
            self._partial.append(last)
        return self._events(lines)

    def close(self) -> list[bytes]:
        """At the end of the stream: the last event, even without its closing blank line."""
        if not self._started and self._start:
            self._started, self._partial = True, [self._start]
        lines = [b"".join(self._partial)] if self._partial else []
        self._partial = []
        events = self._events([*lines, b""]) if lines or self._data else []
        return events

    def _skip_bom(self, chunk: bytes) -> bytes:
        """The chunk without one leading BOM; b"" while too few bytes have come to tell."""
        start = self._start + chunk if self._start else chunk
        if len(start) < len(_BOM) and _BOM.startswith(start):
            self._start = start
            return b""
        self._started, self._start = True, b""
        return start[len(_BOM) :] if start.startswith(_BOM) else start

    def _events(self, lines: list[bytes]) -> list[bytes]:
        events: list[bytes] = []
        data = self._data
        if self.error is not None:
            return events
        if not data and not self._event:
            # what servers send: `data: PAYLOAD` and a blank line, event after event; told
            # apart and cut by C calls rather than a turn of the loop below per line
            texts, blanks = lines[::2], lines[1::2]
            if blanks.count(b"") == len(blanks) and all(map(_is_data, texts)):
                if len(texts) > len(blanks):  # the last event's blank line is still to come
                    data.append(texts.pop()[6:])
                return [text[6:] for text in texts]
        for line in lines:
            if line[:5] == b"data:":  # the common case first
                data.append(line[6:] if line[5:6] == b" " else line[5:])
            elif not line:
                if data:
                    payload = data[0] if len(data) == 1 else b"\n".join(data)
                    if self._event == b"error":
                        self.error = payload
                        self._data = []
                        return events
                    events.append(payload)
                    data = self._data = []
                self._event = b""
            elif line[:1] != b":":
                name, _, value = line.partition(b":")
                if value[:1] == b" ":
                    value = value[1:]
                if name == b"data":
                    data.append(value)
                elif name == b"event":
                    self._event = value
                # `id` and `retry` steer reconnection, which soakgate never does
        return events
