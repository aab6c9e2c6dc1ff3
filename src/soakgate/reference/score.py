"""The anomaly score of one generation from its tokens' log-probabilities under the reference.

The score is the worst token's surprisal, -min(log p), in nats. A correct candidate samples its
tokens from (nearly) the reference's distribution, so every token is one the reference gives
some probability; a corrupted step writes a token the reference finds implausible, and one such
token is enough. The worst token, not the mean, is what a few wrong words in a long fluent
answer move; the threshold is calibrated on the reference's own samples at the soak's settings
(calibrate.py), which absorbs the temperature, the length and the model's own long tail.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

SCORE_NAME = "max_surprisal"
"""What `Generation.reference_score` holds: the largest surprisal of a generated token, nats."""
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


def implausible(tokens: Sequence[TokenScore], threshold: float) -> list[TokenScore]:
    """The tokens whose surprisal is above the threshold, in order."""
    return [t for t in tokens if t.surprisal > threshold]


def evidence(
    tokens: Sequence[TokenScore], threshold: float, alignment: str
) -> tuple[float, bool, dict[str, Any]]:
    """Score, flag and the `details["reference"]` payload of a scored generation: the first
    implausible token with the text around it, and up to KEEP_IMPLAUSIBLE of them."""
    score = max_surprisal(tokens)
    bad = implausible(tokens, threshold)
    payload: dict[str, Any] = {
        "status": "scored", "score": round(score, 4), "threshold": round(threshold, 4),
        "mean": mean_surprisal(tokens),  # unrounded: judged against a calibration quantile
        "alignment": alignment, "tokens": len(tokens),
    }  # fmt: skip
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
    return score, bool(bad), payload


def unscored(reason: str) -> dict[str, Any]:
    """The `details["reference"]` payload of a row chosen for scoring that could not be scored."""
    return {"status": "unscored", "reason": reason}
