"""The mock's language model: a deterministic bigram model over its vocabulary.

The mock samples its clean text from this model (text.py builds its corpus as one long chain of
it) and answers `prompt_logprobs` with it, so a mock is a candidate and a reference of the same
model at once. Each context has a small core of likely next tokens (mass 1 - TAIL_MASS) and a
tail spread evenly over the whole vocabulary, so every token has a finite log-probability, and a
word outside the core (what fluent corruption writes) costs about 19.6 nats while the least
likely core token costs under 8. Written by hand: a few dozen lines no library offers.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from dataclasses import dataclass

from soakgate.mockserver.vocab import BANG_ID, PIECE_ID, STARTER_IDS, VOCAB_SIZE, WORD_IDS

TAIL_MASS = 1e-6
"""Probability of any token outside a context's core, spread evenly over the vocabulary."""
SUCCESSORS = 12
"""Words in a word context's core."""
_MODEL_SEED = 20261201  # constant on purpose: every mock holds the same model
_END_IDS = (PIECE_ID["."], PIECE_ID["?"], BANG_ID)
_NEWLINE_IDS = (PIECE_ID["\n"], PIECE_ID["\n\n"])
# After a word: a comma, the end of the sentence (mostly `.`, rarely `?`, very rarely `!`).
_AFTER_WORD = {PIECE_ID[","]: 0.03, PIECE_ID["."]: 0.07, PIECE_ID["?"]: 0.005, BANG_ID: 0.0005}


@dataclass(frozen=True, slots=True)
class Core:
    """One context's likely next tokens, most likely first, with their probabilities."""

    ids: tuple[int, ...]
    probs: tuple[float, ...]
    cumulative: tuple[float, ...]


def _core(weights: dict[int, float]) -> Core:
    """A Core from unnormalised weights, scaled to 1 - TAIL_MASS and sorted."""
    total = sum(weights.values())
    ranked = sorted(weights.items(), key=lambda item: (-item[1], item[0]))
    probs = tuple((1.0 - TAIL_MASS) * w / total for _, w in ranked)
    cumulative, running = [], 0.0
    for p in probs:
        running += p
        cumulative.append(running)
    return Core(tuple(t for t, _ in ranked), probs, tuple(cumulative))


def _word_weights(rng: random.Random, context: int, punctuation: bool) -> dict[int, float]:
    """SUCCESSORS words (never the context itself) with weights 1/(rank+2), maybe punctuation."""
    words = rng.sample([w for w in WORD_IDS if w != context], SUCCESSORS)
    share = 1.0 - (sum(_AFTER_WORD.values()) if punctuation else 0.0)
    harmonic = sum(1.0 / (rank + 2) for rank in range(SUCCESSORS))
    weights = {w: share / (rank + 2) / harmonic for rank, w in enumerate(words)}
    if punctuation:
        weights.update(_AFTER_WORD)
    return weights


def _build() -> tuple[Core, ...]:
    """The core of every context id (each vocabulary piece)."""
    rng = random.Random(_MODEL_SEED)
    word_set = frozenset(WORD_IDS)
    cores = []
    for context in range(VOCAB_SIZE):
        if context in _END_IDS:
            weights = {s: 0.83 / len(STARTER_IDS) for s in STARTER_IDS}
            weights.update({_NEWLINE_IDS[0]: 0.12, _NEWLINE_IDS[1]: 0.05})
        elif context in _NEWLINE_IDS:
            weights = {s: 1.0 for s in STARTER_IDS}
        else:  # words, starters, commas and pieces the text never writes (code, symbols)
            weights = _word_weights(rng, context, punctuation=context in word_set)
        cores.append(_core(weights))
    return tuple(cores)


CORES = _build()
_TAIL_LOGPROB = math.log(TAIL_MASS / VOCAB_SIZE)


def probability(context: int, token: int) -> float:
    """P(token | previous token `context`)."""
    core = CORES[context % VOCAB_SIZE]
    tail = TAIL_MASS / VOCAB_SIZE
    try:
        return core.probs[core.ids.index(token)] + tail
    except ValueError:
        return tail


def logprob_and_rank(context: int, token: int) -> tuple[float, int]:
    """Natural-log probability of `token` after `context`, and its rank (1 = most likely; every
    token outside the core shares the rank after the core)."""
    core = CORES[context % VOCAB_SIZE]
    if token in core.ids:
        index = core.ids.index(token)
        return math.log(core.probs[index] + TAIL_MASS / VOCAB_SIZE), index + 1
    return _TAIL_LOGPROB, len(core.ids) + 1


def top(context: int, count: int) -> list[tuple[int, float]]:
    """The `count` most likely tokens after `context` with their log-probabilities."""
    core = CORES[context % VOCAB_SIZE]
    tail = TAIL_MASS / VOCAB_SIZE
    return [(t, math.log(p + tail)) for t, p in zip(core.ids[:count], core.probs, strict=False)]


def sample(context: int, rng: random.Random) -> int:
    """Draw the next token after `context` (the tail included)."""
    draw = rng.random()
    core = CORES[context % VOCAB_SIZE]
    if draw >= core.cumulative[-1]:
        return rng.randrange(VOCAB_SIZE)
    return core.ids[bisect_right(core.cumulative, draw)]


def sample_tempered(context: int, temperature: float, rng: random.Random) -> int:
    """A core token after `context` drawn with probabilities proportional to p^(1/temperature)."""
    core = CORES[context % VOCAB_SIZE]
    weights = [p ** (1.0 / temperature) for p in core.probs]
    return rng.choices(core.ids, weights)[0]


def sample_core(context: int, draw: float) -> int:
    """The core token that a uniform `draw` in [0, 1) picks after `context` (no tail)."""
    core = CORES[context % VOCAB_SIZE]
    index = bisect_right(core.cumulative, draw * core.cumulative[-1])
    return core.ids[min(index, len(core.ids) - 1)]


def unlikely_word(context: int, following: int | None, rng: random.Random) -> int:
    """An ordinary word outside `context`'s core, neither the context nor `following`; when the
    following token is a word, one whose own core does not hold it either: a fluent word the
    model finds implausible here (and, mostly, the word after it too)."""
    core = set(CORES[context % VOCAB_SIZE].ids)
    choices = [w for w in WORD_IDS if w not in core and w not in (context, following)]
    if following in _WORD_SET:
        choices = [w for w in choices if following not in CORES[w].ids] or choices
    return rng.choice(choices)


_WORD_SET = frozenset(WORD_IDS)
