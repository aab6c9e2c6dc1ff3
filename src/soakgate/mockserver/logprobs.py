"""Log-probabilities a real server could return for the mock's answers, and impossible ones.

Each output position is reported under the mock's bigram model (lm.py) given the token before
it: the context's likely tokens, best first, padded with tail tokens up to the count asked for,
and the sampled token's own log-probability. Every number is possible: finite and <= 0 (rounded
down to 4 decimals, so a probability never grows in print), alternatives sorted and distinct,
their probabilities summing to at most 1, the sampled token's value equal to its listed one or
at most the least listed. At temperature 0 the mock's answer is a chain of the model, not its
argmax, so the distribution reported is the model's with the sampled token's and the best
token's probabilities exchanged: the sampled token is the best, as greedy decoding makes it.

`inconsistency` makes one number of an answer impossible in one named way
(`--inconsistent-rate`); the rest stay possible. Written by hand: no library makes these.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise

from soakgate.mockserver import lm
from soakgate.mockserver.vocab import VOCAB_SIZE

KINDS = ("nan", "infinite", "positive", "unsorted", "sum_above_one", "greedy_not_top",
         "usage_mismatch")  # fmt: skip
"""The impossible numbers `--inconsistent-rate` injects (the ground truth's `inconsistent`)."""
POSITIVE_LOGPROB = 0.7
"""The sampled token's log-probability of a `positive` fault (a probability of about 2)."""
USAGE_EXCESS = 3
"""How many tokens a `usage_mismatch` fault's `usage.completion_tokens` counts too many."""
RAISED_PROBABILITY = 0.55
"""A `sum_above_one` fault raises each alternative to about this probability (sum >= 1.09)."""
MARGIN = 0.05
"""How far (in log-probability) an `unsorted` pair or a `greedy_not_top` miss is, at least:
far beyond any checker's rounding."""

Top = tuple[tuple[int, float], ...]


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One output position: the sampled token, its log-probability and the top alternatives
    (token id, log-probability) in the order they are sent."""

    token_id: int
    logprob: float
    top: Top


@dataclass(frozen=True, slots=True)
class Inconsistency:
    """One impossible number injected into an answer (its first choice)."""

    kind: str
    """One of KINDS."""
    at: int | None
    """The output position it touches (None: `usage_mismatch`)."""
    entry: TokenLogprob | None
    """The broken position's log-probabilities, sent in place of the healthy ones."""


def _down(value: float) -> float:
    """`value` rounded down to 4 decimals."""
    return math.floor(value * 1e4) / 1e4


TAIL_LOGPROB = _down(math.log(lm.TAIL_MASS / VOCAB_SIZE))
"""The log-probability of any token outside a context's core."""


def _ranked(context: int) -> Top:
    """The core of `context`, best first, with rounded-down log-probabilities."""
    core, tail = lm.CORES[context], lm.TAIL_MASS / VOCAB_SIZE
    return tuple((t, _down(math.log(p + tail))) for t, p in zip(core.ids, core.probs, strict=True))


_RANKED = tuple(_ranked(context) for context in range(VOCAB_SIZE))
_RANK = tuple({token: rank for rank, (token, _) in enumerate(ranked)} for ranked in _RANKED)


def _tail_tokens(listed: Top, count: int) -> Top:
    """`count` tail tokens (lowest ids first) that are not listed yet, each at TAIL_LOGPROB."""
    taken = {token for token, _ in listed}
    fill = (t for t in range(VOCAB_SIZE) if t not in taken)
    return tuple((token, TAIL_LOGPROB) for token, _ in zip(fill, range(count), strict=False))


def position_logprob(context: int, token: int, top_n: int, greedy: bool) -> TokenLogprob:
    """The log-probabilities of `token` sampled after `context`, with `top_n` alternatives;
    `greedy`: the sampled token is reported as the best (see the module's docstring)."""
    context %= VOCAB_SIZE
    ranked = _RANKED[context]
    rank = _RANK[context].get(token)
    own = TAIL_LOGPROB if rank is None else ranked[rank][1]
    if greedy and rank != 0:
        best, best_value = ranked[0]
        if rank is None:
            ranked = ((token, best_value), *ranked[1:], (best, TAIL_LOGPROB))
        else:
            ranked = ((token, best_value), *ranked[1:rank], (best, own), *ranked[rank + 1 :])
        own = best_value
    top = ranked[:top_n]
    if len(top) < top_n:
        top += _tail_tokens(top, top_n - len(top))
    return TokenLogprob(token, own, top)


def answer_logprobs(
    context: int, ids: Sequence[int], top_n: int, greedy: bool
) -> list[TokenLogprob]:
    """Every output position's log-probabilities; `context` is the prompt's last token."""
    out = []
    for token in ids:
        out.append(position_logprob(context, token, top_n, greedy))
        context = token
    return out


def _disorder_pair(entry: TokenLogprob) -> tuple[int, int] | None:
    """Indexes of two neighbouring alternatives other than the sampled token (whose own entry
    a checker may leave out of the order, as vLLM lists it first) at least MARGIN apart."""
    others = [i for i, (token, _) in enumerate(entry.top) if token != entry.token_id]
    for first, second in pairwise(others):
        if entry.top[first][1] - entry.top[second][1] >= MARGIN:
            return first, second
    return None


def _unsorted(entry: TokenLogprob) -> TokenLogprob:
    pair = _disorder_pair(entry)
    assert pair is not None
    top = list(entry.top)
    top[pair[0]], top[pair[1]] = top[pair[1]], top[pair[0]]
    return replace(entry, top=tuple(top))


def _sum_above_one(entry: TokenLogprob) -> TokenLogprob:
    """Every alternative raised to about RAISED_PROBABILITY (still sorted, still <= 0); the
    sampled token keeps its listed value, or stays below the least listed."""
    floors = (_down(math.log(RAISED_PROBABILITY - 1e-4 * i)) for i in range(len(entry.top)))
    top = tuple((t, max(v, floor)) for (t, v), floor in zip(entry.top, floors, strict=True))
    return TokenLogprob(entry.token_id, dict(top).get(entry.token_id, entry.logprob), top)


def _greedy_not_top(entry: TokenLogprob) -> TokenLogprob:
    """The sampled token (listed first, greedy) moved below the best other alternative, its
    listed value and its own alike, the list still sorted."""
    others = [item for item in entry.top if item[0] != entry.token_id]
    lowered = round(others[0][1] - 10 * MARGIN, 4)
    place = sum(value >= lowered for _, value in others)
    top = (*others[:place], (entry.token_id, lowered), *others[place:])
    return TokenLogprob(entry.token_id, lowered, top)


_BREAK: dict[str, Callable[[TokenLogprob], TokenLogprob]] = {
    "nan": lambda entry: replace(entry, logprob=math.nan),
    "infinite": lambda entry: replace(entry, logprob=-math.inf),
    "positive": lambda entry: replace(entry, logprob=POSITIVE_LOGPROB),
    "unsorted": _unsorted,
    "sum_above_one": _sum_above_one,
    "greedy_not_top": _greedy_not_top,
}


def applicable(entries: Sequence[TokenLogprob] | None, top_n: int, greedy: bool,
               usage: bool) -> list[str]:  # fmt: skip
    """The kinds that can break an answer with these log-probabilities (None: none asked) and
    `usage` (whether it reports one)."""
    kinds = []
    if entries:
        kinds += ["nan", "infinite", "positive"]
        if top_n >= 2:
            if any(_disorder_pair(entry) is not None for entry in entries):
                kinds.append("unsorted")
            kinds.append("sum_above_one")
            if greedy:
                kinds.append("greedy_not_top")
    if usage:
        kinds.append("usage_mismatch")
    return kinds


def inconsistency(
    entries: Sequence[TokenLogprob] | None,
    top_n: int,
    greedy: bool,
    usage: bool,
    rng: random.Random,
) -> Inconsistency | None:
    """One impossible number, its kind drawn by `rng` among those that apply, at a position
    drawn among those it can break; None when none applies."""
    kinds = applicable(entries, top_n, greedy, usage)
    if not kinds:
        return None
    kind = rng.choice(kinds)
    if kind == "usage_mismatch":
        return Inconsistency(kind, None, None)
    assert entries
    if kind == "unsorted":
        at = rng.choice([i for i, e in enumerate(entries) if _disorder_pair(e) is not None])
    else:
        at = rng.randrange(len(entries))
    return Inconsistency(kind, at, _BREAK[kind](entries[at]))
