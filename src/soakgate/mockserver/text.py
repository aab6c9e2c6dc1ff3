"""Deterministic, ordinary-looking token streams over a small fixed vocabulary.

A corpus of `CORPUS_SIZE` tokens is generated once per process from a constant seed, so every
mock instance holds the same corpus; a request's output is a slice of it starting at an offset
derived from a stable hash. Slicing a precomputed list and string is what keeps the mock fast.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

BANG_ID = 0
"""Token id 0 is `!`, as in the Qwen family: a run of it is the classic collapse."""
EMPTY_ID = 1
"""A special token that decodes to the empty string (what an `empty` collapse emits)."""

_PUNCT = ["!", "", ".", ",", ":", ";", "?", "\n", "\n\n", "()", " =", " ->", "'s"]
_STARTERS = [" The", " It", " This", " We", " In", " A", " When", " If", " Each", " You"]
_WORDS = """
the of and to in is that for it as with was on be by this are from or at an which not
have has but can all one will more other were their there been when would if each into
only some may also time any these two first then such new over most used use like make
could them see way many after where very because does how well just should value result
data file line list table code function method class module object string number error
test server request response token model output input system process thread memory
device buffer kernel graph batch queue cache state config option version package library
source build install path user name type field record event handler client default
return import self none true false print open read write close start stop run call check
load save parse format update delete create find sort filter map reduce apply small
large simple fast slow early late local remote public private common different same next
last long short high low good better best clear full empty main single double example
section chapter page document note manual guide reference index entry key word text
character byte block stream window frame point level layer step stage phase part order
group set range size count total average rate limit scale factor weight bias python
shell debian system service network socket port host address message header body
""".split()  # noqa: SIM905 (a word list reads better as text)
_CODE = [" def", " return", " import", " class", " self", " None", " True", " False", " if"]

VOCAB: tuple[str, ...] = tuple(
    dict.fromkeys(_PUNCT + _STARTERS + [" " + w for w in _WORDS] + _CODE)
)
"""The fixed vocabulary; the index of a piece is its token id."""
VOCAB_SIZE = len(VOCAB)
WORD_IDS: tuple[int, ...] = tuple(
    i
    for i, piece in enumerate(VOCAB)
    if piece.startswith(" ") and piece[1:].isalpha() and piece[1:].islower()
)
"""Ids of plain word pieces: what perturbations and word loops draw from."""
_ID = {piece: i for i, piece in enumerate(VOCAB)}

CORPUS_SIZE = 1 << 16
_OFFSET_SPAN = 1 << 15  # offsets below this keep any output of <= 32768 tokens on the fast path
_CORPUS_SEED = 20240917  # constant on purpose: every mock instance must hold the same corpus


def _sentence(rng: random.Random) -> list[int]:
    """One sentence: a capitalised starter, 5-17 words with sparse commas, a full stop."""
    ids = [_ID[rng.choice(_STARTERS)]]
    previous = -1
    length = rng.randint(5, 17)
    for position in range(length):
        word = rng.choice(WORD_IDS)
        while word == previous:
            word = rng.choice(WORD_IDS)
        ids.append(word)
        previous = word
        if 2 < position < length - 2 and rng.random() < 0.07:
            ids.append(_ID[","])
    end = rng.random()
    ids.append(_ID["?"] if end < 0.06 else BANG_ID if end < 0.065 else _ID["."])
    return ids


def _build_corpus() -> tuple[list[int], str, list[int]]:
    """The shared corpus: token ids, their concatenated text, and char offsets (len N+1)."""
    rng = random.Random(_CORPUS_SEED)
    ids: list[int] = []
    while len(ids) < CORPUS_SIZE:
        ids.extend(_sentence(rng))
        newline = rng.random()
        if newline < 0.12:
            ids.append(_ID["\n"])
        elif newline < 0.17:
            ids.append(_ID["\n\n"])
    del ids[CORPUS_SIZE:]
    offsets = [0]
    for token in ids:
        offsets.append(offsets[-1] + len(VOCAB[token]))
    return ids, "".join(VOCAB[t] for t in ids), offsets


CORPUS_IDS, CORPUS_TEXT, CORPUS_OFFSETS = _build_corpus()


def request_hash(*parts: str) -> int:
    """A stable 128-bit integer of the parts (Python's hash() is salted per process)."""
    digest = hashlib.blake2b("\x1f".join(parts).encode("utf-8", "surrogatepass"), digest_size=16)
    return int.from_bytes(digest.digest(), "little")


def corpus_offset(key: int) -> int:
    """Start position in the corpus for a request key; independent of length (prefix-stable)."""
    return key % _OFFSET_SPAN


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


def prompt_token_ids(prompt: str) -> list[int]:
    """Mock token ids of a prompt, consistent with `prompt_token_count`."""
    data = prompt.encode("utf-8", "surrogatepass") or b" "
    return [
        2 + int.from_bytes(data[i : i + 4], "little") % (VOCAB_SIZE - 2)
        for i in range(0, len(data), 4)
    ]


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """A token's logprob and its top alternatives (token id, logprob), best first."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...]


def token_logprob(token_id: int, position: int, top_n: int) -> TokenLogprob:
    """Deterministic pseudo logprobs: the emitted token is always the most likely one."""
    spread = ((token_id * 2654435761 + position * 40503) % 1000) / 1000.0
    logprob = -0.05 - 2.0 * spread
    top = [(token_id, logprob)]
    for rank in range(1, max(top_n, 1)):
        alternative = WORD_IDS[(token_id + 7 * rank + position) % len(WORD_IDS)]
        if alternative != token_id:
            top.append((alternative, logprob - 0.7 * rank - 0.1))
    return TokenLogprob(
        token_id, round(logprob, 4), tuple((t, round(v, 4)) for t, v in top[:top_n])
    )
