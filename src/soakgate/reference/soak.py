"""A generated token as the soak's own sampling distribution sees it (issue 28).

The candidate server samples each token from the model's distribution at the soak's temperature,
cut to its nucleus (`top_p`). Under that distribution q, a clean server's token x has a
surprisal s = -log q_T(x) (q_T: the tempered distribution, before the cut) whose mean m and
variance w at that position are known exactly: m = E_q[-log q_T], w = Var_q[-log q_T]. The sum
over a generation of (s - m), divided by sqrt(sum w), is then a standardized score with mean 0
and variance 1 for a clean generation of any length (`soak_z`; `score.whole_z` on a row's
tokens): the locally most powerful test against a model that is a little too flat everywhere,
and length-free, so one threshold is as strict for a long generation as for a short one.

Why the tempered surprisal and not q's own: a token outside q's nucleus has probability 0 under
q, and a reference whose numbers differ slightly from the server's (bf16 against float32, ties
at the nucleus edge) would find such tokens in clean generations; under q_T the token just
outside the edge is about as surprising as the one just inside it.

In process (`--reference-model`) the whole vocabulary is known and the three values are exact.
Over HTTP only the top alternatives the reference returns are (`soak_stats_top`): the mass they
leave is counted as one more outcome with that probability, so the values are approximations;
the calibration scores the reference's own samples the same way, so an approximation costs power,
never the false-flag rate.

`top_k` passed through `--extra` is not modelled (the nucleus is the only cut applied here).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Sampling:
    """The soak's sampling settings, as the score models them."""

    temperature: float
    top_p: float = 1.0

    @classmethod
    def of(cls, temperature: float, top_p: float | None) -> Sampling | None:
        """The settings of a sampled soak; None for a greedy one (temperature 0: every token is
        the most likely one and there is no distribution to score against)."""
        if temperature <= 0:
            return None
        return cls(temperature, 1.0 if top_p is None else min(max(top_p, 0.0), 1.0))


NUCLEUS_TOP = 256
"""The nucleus is looked for among this many most likely tokens first (a `topk`: 3 ms for 48
rows of 8,256 on two CPU cores, where sorting them takes 20 ms), then among 4x as many for the
rows whose cut is not among them, and so on up to the whole vocabulary."""


def nucleus(torch: Any, q: Any, top_p: float) -> Any:
    """`q` (rows x vocabulary, probabilities) cut to each row's nucleus and renormalised: the
    smallest set of most likely tokens whose mass reaches `top_p` (vLLM's rule; at least one).
    The same set as cutting the whole sorted vocabulary: a row's top tokens are looked at
    first, and more of them only where the cut does not fall among those."""
    kept = torch.zeros_like(q)
    rows, top, vocabulary = torch.arange(q.shape[0]), NUCLEUS_TOP, q.shape[-1]
    while rows.numel():
        top = min(top, vocabulary)
        ordered, index = q[rows].topk(top, dim=-1)
        before = ordered.cumsum(-1) - ordered
        found = before[:, -1] >= top_p if top < vocabulary else torch.ones_like(rows, dtype=bool)
        cut = before[found] >= top_p
        cut[:, 0] = False
        kept[rows[found]] = kept[rows[found]].scatter(
            -1, index[found], ordered[found].masked_fill(cut, 0.0)
        )
        rows, top = rows[~found], top * 4
    return kept / kept.sum(-1, keepdim=True)


def soak_distribution(torch: Any, logits: Any, sampling: Sampling) -> tuple[Any, Any]:
    """The tempered log-probabilities (before the cut) and the soak's sampling distribution q
    (tempered, cut to the nucleus), per row of `logits` (rows x vocabulary, float32)."""
    tempered = torch.log_softmax(logits / sampling.temperature, dim=-1)
    q = tempered.exp()
    if sampling.top_p < 1.0:
        q = nucleus(torch, q, sampling.top_p)
    return tempered, q


def soak_stats_of(torch: Any, tempered: Any, q: Any, targets: Any) -> tuple[Any, Any, Any]:
    """(s, m, w) per row for the tokens `targets`, from `soak_distribution`'s two tensors."""
    surprisal = -tempered
    finite = torch.where(q > 0, surprisal, torch.zeros_like(surprisal))
    mean = (q * finite).sum(-1)
    variance = ((q * finite * finite).sum(-1) - mean * mean).clamp_min(0.0)
    own = surprisal.gather(-1, targets[:, None])[:, 0]
    return own, mean, variance


def soak_stats_torch(
    torch: Any, logits: Any, targets: Any, sampling: Sampling
) -> tuple[Any, Any, Any]:
    """(s, m, w) per position of `logits` (positions x vocabulary, float32) for the tokens
    `targets`: exact, over the whole vocabulary."""
    return soak_stats_of(torch, *soak_distribution(torch, logits, sampling), targets)


def draw(torch: Any, q: Any) -> Any:
    """One token per row of `q` (rows x vocabulary, probabilities), by inverting its
    cumulative distribution at a uniform draw from torch's generator (float64: a token of
    probability 0 is never drawn but by a rounding of ~1e-16). One pass over the vocabulary,
    where `torch.multinomial` spends an exponential draw on every token."""
    cdf = q.double().cumsum(-1)
    u = torch.rand(q.shape[0], 1, dtype=torch.float64) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).clamp_max(q.shape[-1] - 1)[:, 0]


def soak_stats_top(
    known: Sequence[float], own: float, sampling: Sampling
) -> tuple[float, float, float]:
    """(s, m, w) at one position from the log-probabilities (temperature 1) of the outcomes a
    server returned there, the token's own `own` among them, and the mass they leave counted
    as one more outcome. One pass each for the tempered weights and the nucleus (it runs for
    every scored token of every row: ~6 us per token, BENCHMARKS.md section 17)."""
    exp, log, t = math.exp, math.log, sampling.temperature
    mass, scaled = 0.0, []
    for lp in known:
        if lp > -700.0:  # exp underflows below (and nan fails the comparison)
            mass += exp(lp)
            scaled.append(lp / t)
    if 1.0 - mass > 1e-12:
        scaled.append(log(1.0 - mass) / t)
    scaled.sort(reverse=True)
    top = scaled[0]
    weights = [exp(x - top) for x in scaled]
    total = sum(weights)
    norm = top + log(total)
    cut, kept, first, second = sampling.top_p * total, 0.0, 0.0, 0.0
    for x, weight in zip(scaled, weights, strict=True):
        if kept >= cut:  # vLLM's rule: the smallest set of most likely outcomes reaching top_p
            break
        kept += weight
        surprisal = norm - x
        first += weight * surprisal
        second += weight * surprisal * surprisal
    mean = first / kept
    return norm - own / t, mean, max(second / kept - mean * mean, 0.0)


def soak_z(stats: Sequence[tuple[float, float, float] | None]) -> float | None:
    """sum(s - m) / sqrt(sum w) over a generation's tokens; None when a token has no values or
    there are none."""
    if not stats or any(x is None for x in stats):
        return None
    total = spread = 0.0
    for s, m, w in stats:  # type: ignore[misc]
        total += s - m
        spread += w
    return total / math.sqrt(max(spread, 1e-9))


WORST_Z_FLOOR = 1e-6
"""A position's variance below this counts as this (a one-token nucleus: s = m = 0, z = 0)."""


def worst_z(stats: Sequence[tuple[float, float, float] | None]) -> float | None:
    """max (s - m) / sqrt(w) over a generation's tokens (each position's variance floored at
    `WORST_Z_FLOOR`); None when a token has no values or there are none."""
    if not stats or any(x is None for x in stats):
        return None
    return max((s - m) / math.sqrt(max(w, WORST_Z_FLOOR)) for s, m, w in stats)  # type: ignore[misc]
