"""The anomaly scores of one generation from its tokens' log-probabilities under the reference.

Scores calibrated together (calibrate.py) so that a clean generation is flagged by any of them
at most at the false-flag rate:

- the worst token's surprisal, -min(log p), in nats. A correct candidate samples its tokens from
  (nearly) the reference's distribution, so every token is one the reference gives some
  probability; a corrupted step writes a token the reference finds implausible, and one such
  token is enough. The worst token, not the mean, is what a few wrong words in a long fluent
  answer move;
- the whole generation's typicality: the mean over its tokens of (surprisal - the reference's
  entropy at that position). A model that is wrong everywhere a little (a scaled or lost
  sublayer, a wrong norm) writes tokens each a little less likely than the reference's own,
  which no single token shows; subtracting each position's entropy removes most of the
  variation that the prompt and the position put into the plain mean. The entropy is exact for
  an in-process reference (`--reference-model`) and estimated from the top alternatives a server
  returns (`entropy_from_top`); either way the score is calibrated on the reference's own samples
  scored the same way, so an estimate costs power, never the false-flag rate;
- the whole generation's standardized surprisal under the soak's own sampling distribution
  (`soak.soak_z`: its temperature and nucleus; mean 0 and variance 1 for a clean generation of
  any length). Where the soak samples, this is the whole-generation score the flag uses (the
  typicality is still stored, and the report's unit-level verdict judges it); a greedy soak, or
  a calibration without it, uses the typicality. Measured on the real model (BENCHMARKS.md
  section 17): at `--top-p 0.95` it flagged 66-99% of four whole-distribution controls'
  generations where the typicality flagged 44-98%, and on controls it was not designed on
  85.3% against 57.3% (a wrong norm weight);
- where the soak samples with a nucleus (`--top-p` below 1), the generation's worst
  *standardized* token under that distribution, max over its tokens of (s - m) / sqrt(w)
  (`token_z`): a token the reference's own sampler would draw at that position only rarely
  given how concentrated the position is, which neither the worst token's surprisal (the same
  for a likely token at a flat position and an unlikely one at a sharp position) nor the sum
  sees. Without a nucleus a position's variance can be tiny while a legitimate token sits far
  down a long tail, so it is not judged there. Its first run on four controls frozen before
  them (BENCHMARKS.md section 17): 24.5 -> 52.5%, 35.0 -> 59.0%, 16.8 -> 47.0% and 98.8 ->
  99.5% of their generations flagged at `--top-p 0.95`, clean generations at 0.1%.

The thresholds are calibrated on the reference's own samples at the soak's settings, which
absorbs the temperature, the length and the model's own long tail.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from soakgate.reference.soak import soak_z, worst_z

SCORE_NAME = "max_surprisal"
"""What `Generation.reference_score` holds: the largest surprisal of a generated token, nats."""
SCORES = (SCORE_NAME, "typical_surprisal", "soak_z", "token_z")
"""The scores a calibration is drawn for (its fingerprint names them)."""
CONTEXT_TOKENS = 8
"""Tokens of text kept on each side of an implausible token (for the report)."""
KEEP_IMPLAUSIBLE = 8
"""Implausible tokens kept per row, first ones first."""


@dataclass(frozen=True, slots=True)
class TokenScore:
    """One generated token as the reference sees it."""

    position: int
    """Position in the generated output (0 = first generated token)."""
    token_id: int | None
    """The token id (None in text alignment when the reference's id is not known)."""
    logprob: float
    """Natural-log probability under the reference, given everything before it."""
    rank: int | None
    """Rank of the token in the reference's distribution (1 = most likely), when returned."""
    text: str
    """The token's text as the reference decodes it."""
    entropy: float | None = None
    """The reference's entropy at this position, nats (exact in process; from the top
    alternatives over HTTP, see `entropy_from_top`); None when the reference gave no
    alternatives."""
    soak: tuple[float, float, float] | None = None
    """The token under the soak's sampling distribution (`soak.py`): its tempered surprisal,
    that surprisal's mean and variance at this position; None when the soak is greedy or the
    reference gave no alternatives."""

    @property
    def surprisal(self) -> float:
        """-logprob, nats."""
        return -self.logprob


def max_surprisal(tokens: Sequence[TokenScore]) -> float:
    """The anomaly score: the largest surprisal among the generated tokens (0.0 when none)."""
    return max((t.surprisal for t in tokens), default=0.0)


def mean_surprisal(tokens: Sequence[TokenScore]) -> float:
    """The whole generation's score: its tokens' mean surprisal, nats (0.0 when none). A model
    that is wrong everywhere a little (a scaled or lost sublayer) moves this where no single
    token stands out; the report judges it per unit against the calibration's (stats/shift.py)."""
    return sum(t.surprisal for t in tokens) / len(tokens) if tokens else 0.0


def typical_surprisal(tokens: Sequence[TokenScore]) -> float | None:
    """The whole generation's typicality: mean over its tokens of (surprisal - the reference's
    entropy there), nats; None when a token's entropy is unknown or there are no tokens."""
    entropies = [t.entropy for t in tokens]
    if not tokens or None in entropies:
        return None
    total = sum(t.surprisal - h for t, h in zip(tokens, entropies, strict=True) if h is not None)
    return total / len(tokens)


def entropy_from_top(logprobs: Iterable[float]) -> float:
    """The entropy of a distribution of which only some outcomes' log-probabilities are known
    (a server's top alternatives and the token itself): -sum p log p over them, and the mass
    they leave counted as one more outcome. A lower bound of the true entropy, exact when the
    known outcomes hold all the mass."""
    exp, known, mass = math.exp, 0.0, 0.0
    for lp in logprobs:
        if lp > -700.0:  # exp underflows below: no mass, no entropy (and nan, -inf skipped)
            p = exp(lp)
            known -= p * lp
            mass += p
    rest = 1.0 - mass
    return known - rest * math.log(rest) if rest > 1e-12 else known


def whole_z(tokens: Sequence[TokenScore]) -> float | None:
    """The generation's standardized surprisal under the soak's sampling distribution
    (`soak.soak_z`); None when a token lacks its values."""
    return soak_z([t.soak for t in tokens])


def token_z(tokens: Sequence[TokenScore]) -> float | None:
    """The generation's worst standardized token under the soak's sampling distribution
    (`soak.worst_z`); None when a token lacks its values or there are none."""
    return worst_z([t.soak for t in tokens])


def implausible(tokens: Sequence[TokenScore], threshold: float) -> list[TokenScore]:
    """The tokens whose surprisal is above the threshold, in order."""
    return [t for t in tokens if t.surprisal > threshold]


def evidence(
    tokens: Sequence[TokenScore], threshold: float, alignment: str,
    typical_threshold: float | None = None,
    shift_cutoffs: tuple[float | None, float | None, float | None] = (None, None, None),
    whole_score: str = "typical_surprisal", token_z_threshold: float | None = None,
) -> tuple[float, bool, dict[str, Any]]:  # fmt: skip
    """Score, flag and the `details["reference"]` payload of a scored generation: the first
    implausible token with the text around it, and up to KEEP_IMPLAUSIBLE of them; the whole
    generation's typicality and soak z, and `flagged_by` (`token`, `whole`) when a score crossed
    its threshold. The whole-generation score is the one the calibration was drawn for
    (`whole_score`: `soak_z` or `typical_surprisal`, whose threshold `typical_threshold` is), and
    flags only where the calibration set its threshold.
    `shift_cutoffs` (the calibration's 90th percentiles of the soak z, the typicality and the
    mean surprisal) add `above_p90`: the row's soak z (else its typicality, else its mean
    surprisal) is above its percentile, which one in ten of the reference's own rows is (the
    live metrics' shifted share; the report's unit-level verdict recomputes it per run from the
    stored scores). `token_z_threshold` (a calibration under a nucleus) flags a generation whose
    worst standardized token (`token_z`) is above it (`flagged_by` `token_z`)."""
    score = max_surprisal(tokens)
    bad = implausible(tokens, threshold)
    typical = typical_surprisal(tokens)
    z = whole_z(tokens)
    judged = z if whole_score == "soak_z" else typical
    whole = judged is not None and typical_threshold is not None and judged > typical_threshold
    mean = mean_surprisal(tokens)
    worst_z = token_z(tokens)
    standardized = (
        worst_z is not None and token_z_threshold is not None and worst_z > token_z_threshold
    )
    payload: dict[str, Any] = {
        "status": "scored", "score": round(score, 4), "threshold": round(threshold, 4),
        "mean": mean,  # unrounded: judged against a calibration quantile
        "typical": typical, "soak_z": None if z is None else round(z, 4),
        "alignment": alignment, "tokens": len(tokens),
    }  # fmt: skip
    z_cutoff, typical_cutoff, mean_cutoff = shift_cutoffs
    if payload["soak_z"] is not None and z_cutoff is not None:
        payload["above_p90"] = payload["soak_z"] > z_cutoff  # as stored
    elif typical is not None and typical_cutoff is not None:
        payload["above_p90"] = typical > typical_cutoff
    elif mean_cutoff is not None:
        payload["above_p90"] = mean > mean_cutoff
    if typical_threshold is not None:
        payload["typical_threshold"] = round(typical_threshold, 6)
        payload["whole_score"] = whole_score
    if worst_z is not None:
        payload["token_z"] = round(worst_z, 4)
    if token_z_threshold is not None:
        payload["token_z_threshold"] = round(token_z_threshold, 6)
    crossed = (("token", bool(bad)), ("whole", whole), ("token_z", standardized))
    by = [name for name, hit in crossed if hit]
    if by:
        payload["flagged_by"] = by
    if bad:
        first = bad[0]
        index = tokens.index(first)
        payload["first"] = {
            "position": first.position, "token": first.text, "token_id": first.token_id,
            "logprob": round(first.logprob, 4), "rank": first.rank,
            "before": "".join(t.text for t in tokens[max(index - CONTEXT_TOKENS, 0) : index]),
            "after": "".join(t.text for t in tokens[index + 1 : index + 1 + CONTEXT_TOKENS]),
        }  # fmt: skip
        payload["implausible"] = [
            [t.position, t.text, round(t.logprob, 4)] for t in bad[:KEEP_IMPLAUSIBLE]
        ]
        payload["implausible_count"] = len(bad)
    return score, bool(by), payload


def unscored(reason: str) -> dict[str, Any]:
    """The `details["reference"]` payload of a row chosen for scoring that could not be scored."""
    return {"status": "unscored", "reason": reason}
