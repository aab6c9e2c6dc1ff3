"""Decode an answer sent with a `Content-Encoding` although soakgate asks for `identity`.

A proxy in front of the server may compress anyway. gzip and deflate are decoded by `zlib`,
br by Google's `brotli` bindings, zstd (RFC 8878) by the standard library's `compression.zstd`
(Python 3.14; before it, its backport `backports.zstd`); each step's output is bounded by the
response cap, so a small compressed answer cannot unpack into gigabytes.
"""

from __future__ import annotations

import sys
import zlib
from typing import Protocol

import brotli

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

from soakgate.targets.http1 import Oversized
from soakgate.targets.parse import ResponseFormatError


class _Step(Protocol):
    def feed(self, data: bytes, room: int) -> bytes:
        """Decoded bytes: all of them, or `room` + 1 when there are more than `room`."""

    def close(self) -> None: ...


class Decoder:
    """The codings of one answer's body, undone in reverse order of the header's list."""

    def __init__(self, header: bytes, limit: int) -> None:
        names = [n.strip().lower() for n in header.decode("latin-1").split(",")]
        self._steps = [_step(name) for name in reversed(names) if name not in ("", "identity")]
        self.limit = limit
        self._total = 0

    def feed(self, data: bytes) -> bytes:
        """The decoded bytes of the next piece of the body."""
        room = self.limit - self._total
        for step in self._steps:
            data = step.feed(data, room)
            if len(data) > room:  # each step stops at one byte over the room it was given
                raise Oversized(f"the answer decodes to more than {self.limit} bytes")
        self._total += len(data)
        return data

    def close(self) -> None:
        """At the end of the body: raise ResponseFormatError when a coding is unfinished."""
        for step in self._steps:
            step.close()


def _step(name: str) -> _Step:
    if name in ("gzip", "x-gzip"):
        return _Zlib("gzip", 16 + zlib.MAX_WBITS)
    if name == "deflate":
        return _Zlib("deflate", 0)
    if name == "br":
        return _Brotli()
    if name == "zstd":
        return _Zstd()
    raise ResponseFormatError(f"the answer is encoded as {name!r}, which soakgate cannot decode")


class _Zlib:
    """gzip (members one after another, RFC 1952) or deflate (zlib-wrapped as RFC 9110 says,
    or raw as some servers send it)."""

    def __init__(self, name: str, wbits: int) -> None:
        self._name = name
        self._wbits = wbits  # 0: deflate, wrapped or not, decided by its first two bytes
        self._head = b""
        self._inflate: zlib._Decompress | None = None

    def feed(self, data: bytes, room: int) -> bytes:
        out: list[bytes] = []
        while data:
            if self._inflate is None:
                if self._wbits == 0:
                    data = self._head + data
                    if len(data) < 2:
                        self._head = data
                        break
                    self._head = b""
                    wrapped = data[0] & 0x0F == 8 and int.from_bytes(data[:2], "big") % 31 == 0
                    self._wbits = zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS
                self._inflate = zlib.decompressobj(self._wbits)
            try:
                piece = self._inflate.decompress(data, room + 1)
            except zlib.error as exc:
                why = f"the {self._name}-encoded answer is broken: {exc}"
                raise ResponseFormatError(why) from None
            room -= len(piece)
            out.append(piece)
            if room < 0:
                break
            data = b""
            if self._inflate.eof:
                data = self._inflate.unused_data
                if data and self._name != "gzip":
                    raise ResponseFormatError(f"bytes after the end of the {self._name} data")
                self._inflate = None if data else self._inflate
        return b"".join(out)

    def close(self) -> None:
        if self._head or (self._inflate is not None and not self._inflate.eof):
            raise ResponseFormatError(f"the {self._name}-encoded answer stops before its end")


class _Brotli:
    def __init__(self) -> None:
        self._decompressor = brotli.Decompressor()
        self._fed = False

    def feed(self, data: bytes, room: int) -> bytes:
        if not data:
            return b""
        self._fed = True
        try:
            return bytes(self._decompressor.process(data, output_buffer_limit=room + 1))
        except brotli.error as exc:
            raise ResponseFormatError(f"the br-encoded answer is broken: {exc}") from None

    def close(self) -> None:
        if self._fed and not self._decompressor.is_finished():
            raise ResponseFormatError("the br-encoded answer stops before its end")


class _Zstd:
    """zstd frames one after another (each frame a decompressor, as gzip members are)."""

    def __init__(self) -> None:
        self._decompressor = zstd.ZstdDecompressor()
        self._fed = False

    def feed(self, data: bytes, room: int) -> bytes:
        out: list[bytes] = []
        while data or (self._fed and not self._decompressor.needs_input):
            self._fed = True
            try:
                piece = self._decompressor.decompress(data, room + 1)
            except zstd.ZstdError as exc:
                raise ResponseFormatError(f"the zstd-encoded answer is broken: {exc}") from None
            room -= len(piece)
            out.append(piece)
            if room < 0:
                break
            data = b""
            if self._decompressor.eof:
                data = self._decompressor.unused_data
                self._decompressor = zstd.ZstdDecompressor()
                self._fed = bool(data)
            elif self._decompressor.needs_input:
                break
        return b"".join(out)

    def close(self) -> None:
        if self._fed and not self._decompressor.eof:
            raise ResponseFormatError("the zstd-encoded answer stops before its end")
