"""targets/encoding.py: gzip, deflate (wrapped or raw), br and zstd, piece by piece, bounded."""

from __future__ import annotations

import gzip
import zlib

import brotli
import pytest

from soakgate.targets.encoding import Decoder, zstd
from soakgate.targets.http1 import Oversized
from soakgate.targets.parse import ResponseFormatError

TEXT = b'data: {"choices":[{"text":"hello"}]}\n\n' * 200


def raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


ENCODED = {
    "gzip": gzip.compress(TEXT),
    "x-gzip": gzip.compress(TEXT),
    "deflate": zlib.compress(TEXT),
    "Deflate": raw_deflate(TEXT),  # some servers send raw deflate; names are case-blind
    "br": brotli.compress(TEXT),
    "gzip, br": brotli.compress(gzip.compress(TEXT)),
    "zstd": zstd.compress(TEXT),
    "br, zstd": zstd.compress(brotli.compress(TEXT)),  # applied in order, undone in reverse
    "identity": TEXT,
}


def decode(header: str, data: bytes, step: int, limit: int = 1 << 20) -> bytes:
    decoder = Decoder(header.encode(), limit)
    out = b"".join(decoder.feed(data[i : i + step]) for i in range(0, len(data), step))
    decoder.close()
    return out


@pytest.mark.parametrize("step", [1, 7, 1 << 20])
@pytest.mark.parametrize("header", sorted(ENCODED))
def test_every_coding_decodes_however_the_body_is_split(header: str, step: int) -> None:
    assert decode(header, ENCODED[header], step) == TEXT


def test_gzip_members_one_after_another_are_all_read() -> None:
    assert decode("gzip", gzip.compress(b"one ") + gzip.compress(b"two"), 5) == b"one two"


@pytest.mark.parametrize("step", [1, 3, 1 << 20])
def test_zstd_frames_one_after_another_are_all_read(step: int) -> None:
    assert decode("zstd", zstd.compress(b"one ") + zstd.compress(b"two"), step) == b"one two"


@pytest.mark.parametrize("header", ["gzip", "deflate", "br", "zstd"])
def test_a_bomb_stops_at_the_cap(header: str) -> None:
    zeros = b"\0" * (16 << 20)
    packers = {"gzip": gzip.compress, "deflate": zlib.compress, "br": brotli.compress}
    bomb = {**packers, "zstd": zstd.compress}[header](zeros)
    assert len(bomb) < 1 << 20
    with pytest.raises(Oversized, match="more than 1000 bytes"):
        decode(header, bomb, 1 << 16, limit=1000)
    assert len(decode(header, ENCODED[header], 100, limit=len(TEXT))) == len(TEXT)  # the cap is
    with pytest.raises(Oversized):  # ... inclusive
        decode(header, ENCODED[header], 100, limit=len(TEXT) - 1)


@pytest.mark.parametrize("header", ["gzip", "deflate", "br", "zstd"])
def test_cut_or_broken_bodies_are_format_errors(header: str) -> None:
    data = ENCODED[header]
    with pytest.raises(ResponseFormatError, match="before its end"):
        decode(header, data[: len(data) // 2], 10)
    with pytest.raises(ResponseFormatError):
        decode(header, b"\x1f\x8b\x08garbage-garbage-garbage" if header == "gzip" else b"xx" * 9, 4)


def test_an_unknown_coding_is_a_format_error_naming_it() -> None:
    with pytest.raises(ResponseFormatError, match="'compress'"):
        Decoder(b"compress", 100)
