"""The threshold of reference scoring, set on the reference's own samples.

Given n calibration scores (the reference's samples at the soak's settings, scored like the
candidate's), the threshold is the order statistic X_(r) with r = ceil((n + 1)(1 - a)): for a
new sample from the same distribution, P(score > X_(r)) <= a (the split-conformal bound; exact
for continuous scores, conservative with ties). The realised false-flag rate of that threshold
is itself random, Beta(n + 1 - r, r); its 95% upper quantile says whether n supports a:
below ceil(1/a) - 1 samples no threshold exists (refused); when the upper quantile exceeds 2a the
calibration is stored with a warning.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from scipy import stats

from soakgate.errors import UsageError

WARN_FACTOR = 2.0
"""Warn when the realised false-flag rate may (95% upper bound) exceed this times the rate."""


@dataclass(frozen=True, slots=True)
class Calibration:
    """A threshold and what it rests on; stored with the run."""

    threshold: float
    """Scores strictly above this are flagged `suspect`."""
    false_flag_rate: float
    """The false-flag rate asked for (per scored generation)."""
    n: int
    """Calibration samples."""
    rank: int
    """The order statistic (1-based, ascending) taken as the threshold."""
    upper95: float
    """95% upper bound of the realised false-flag rate (Beta(n + 1 - rank, rank))."""
    warning: str | None
    """Why the calibration is too small to support the rate well, or None."""
    quantiles: dict[str, float]
    """Calibration score quantiles (50%, 90%, 99%, max), for the report."""
    mean_quantiles: dict[str, float] = field(default_factory=dict)
    """The same quantiles of the samples' mean surprisal (`score.mean_surprisal`), which the
    report's unit-level verdict judges a unit's against (stats/shift.py)."""

    def to_dict(self) -> dict[str, Any]:
        """The stored form (event data / run metadata)."""
        return asdict(self)


def minimum_samples(false_flag_rate: float) -> int:
    """The fewest samples at which a threshold for the rate exists (r <= n)."""
    return max(math.ceil(1.0 / false_flag_rate) - 1, 1)


def _quantiles(values: Sequence[float]) -> dict[str, float]:
    ordered, n = sorted(values), len(values)
    found = {label: ordered[min(int(q * n), n - 1)]
             for label, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))}  # fmt: skip
    found["max"] = ordered[-1]
    return found


def calibrate(
    scores: Sequence[float], false_flag_rate: float, means: Sequence[float] = ()
) -> Calibration:
    """The threshold for `false_flag_rate` from calibration scores; UsageError when there are too
    few to place one."""
    if not 0 < false_flag_rate < 1:
        raise UsageError(f"--false-flag-rate must be between 0 and 1, got {false_flag_rate}")
    n = len(scores)
    need = minimum_samples(false_flag_rate)
    if n < need:
        raise UsageError(
            f"reference calibration: {n} samples cannot support a false-flag rate of "
            f"{false_flag_rate:g} (at least {need} are needed; give --calibration {need * 5} "
            "or a larger --false-flag-rate)"
        )
    ordered = sorted(scores)
    rank = min(math.ceil((n + 1) * (1.0 - false_flag_rate)), n)
    upper = float(stats.beta.ppf(0.95, n + 1 - rank, rank))
    warning = None
    if upper > WARN_FACTOR * false_flag_rate:
        warning = (
            f"reference calibration: {n} samples support a false-flag rate of "
            f"{false_flag_rate:g} only loosely (the threshold's own rate may be up to "
            f"{upper:.2%}, 95% bound); more --calibration samples tighten it"
        )
    means_found = _quantiles(means) if len(means) == n else {}
    return Calibration(ordered[rank - 1], false_flag_rate, n, rank, upper, warning,
                       _quantiles(scores), means_found)  # fmt: skip
