"""Deterministic, ordinary-looking token streams over a small fixed vocabulary.

A corpus of `CORPUS_SIZE` tokens is sampled once per process from the mock's bigram model
(lm.py) with a constant seed, so every mock instance holds the same corpus; a request's output is
a slice of it starting at an offset derived from a stable hash and the prompt's last token.
Slicing a precomputed list and string is what keeps the mock fast.
"""

from __future__ import annotations

import hashlib
import random

from soakgate.mockserver import lm
from soakgate.mockserver.vocab import (
    BANG_ID,
    EMPTY_ID,
    STARTER_IDS,
    VOCAB,
    VOCAB_SIZE,
    WORD_IDS,
)

__all__ = ["BANG_ID", "EMPTY_ID", "VOCAB", "VOCAB_SIZE", "WORD_IDS"]

CORPUS_SIZE = 1 << 16
_OFFSET_SPAN = 1 << 15  # offsets below this keep any output of <= 32768 tokens on the fast path
_CORPUS_SEED = 20240917  # constant on purpose: every mock instance must hold the same corpus


def _build_corpus() -> tuple[list[int], str, list[int]]:
    """The shared corpus, one chain of the bigram model (lm.py) from a starter: token ids,
    their concatenated text, and char offsets (len N+1)."""
    rng = random.Random(_CORPUS_SEED)
    ids = [STARTER_IDS[0]]
    while len(ids) < CORPUS_SIZE:
        ids.append(lm.sample(ids[-1], rng))
    offsets = [0]
    for token in ids:
        offsets.append(offsets[-1] + len(VOCAB[token]))
    return ids, "".join(VOCAB[t] for t in ids), offsets


CORPUS_IDS, CORPUS_TEXT, CORPUS_OFFSETS = _build_corpus()


def _positions() -> dict[int, list[int]]:
    """Token id -> the corpus positions (below the fast-path span) where it stands."""
    index: dict[int, list[int]] = {}
    for position in range(1, _OFFSET_SPAN):
        index.setdefault(CORPUS_IDS[position], []).append(position)
    return index


_POSITIONS = _positions()


def request_hash(*parts: str) -> int:
    """A stable 128-bit integer of the parts (Python's hash() is salted per process)."""
    digest = hashlib.blake2b("\x1f".join(parts).encode("utf-8", "surrogatepass"), digest_size=16)
    return int.from_bytes(digest.digest(), "little")


def corpus_offset(key: int) -> int:
    """Start position in the corpus for a request key; independent of length (prefix-stable)."""
    return key % _OFFSET_SPAN


def continuation_offset(key: int, context: int) -> int:
    """Start position for a request key whose prompt ends in token `context`: the first token is
    drawn from the model after `context` (its core), and the output continues the corpus at an
    occurrence of that token, so the whole output is a sample of the model given the prompt."""
    first = lm.sample_core(context, ((key >> 32) & 0xFFFFFFFF) / 2**32)
    positions = _POSITIONS.get(first)
    if not positions:  # every core token stands in the corpus; kept for safety
        return corpus_offset(key)
    return positions[key % len(positions)]


def clean_tokens(start: int, count: int) -> tuple[list[int], str]:
    """`count` ordinary tokens from corpus position `start`, and their text."""
    end = start + count
    if end <= CORPUS_SIZE:
        return CORPUS_IDS[start:end], CORPUS_TEXT[CORPUS_OFFSETS[start] : CORPUS_OFFSETS[end]]
    ids = [CORPUS_IDS[(start + i) % CORPUS_SIZE] for i in range(count)]
    return ids, detokenize(ids)


def detokenize(ids: list[int]) -> str:
    """Text of a list of token ids."""
    return "".join([VOCAB[t] for t in ids])


def prompt_token_count(prompt: str) -> int:
    """Prompt length in mock tokens: one per 4 UTF-8 bytes, at least 1 (cheap on the hot path)."""
    return max(1, (len(prompt.encode("utf-8", "surrogatepass")) + 3) // 4)


def last_prompt_token(prompt: str) -> int:
    """The last of `prompt_token_ids(prompt)`, without encoding the whole prompt twice."""
    data = prompt.encode("utf-8", "surrogatepass") or b" "
    last = (len(data) - 1) // 4 * 4
    return 2 + int.from_bytes(data[last:], "little") % (VOCAB_SIZE - 2)


def prompt_token_ids(prompt: str) -> list[int]:
    """Mock token ids of a prompt, consistent with `prompt_token_count`."""
    data = prompt.encode("utf-8", "surrogatepass") or b" "
    return [
        2 + int.from_bytes(data[i : i + 4], "little") % (VOCAB_SIZE - 2)
        for i in range(0, len(data), 4)
    ]
