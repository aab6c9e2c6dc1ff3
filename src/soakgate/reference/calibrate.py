"""The threshold of reference scoring, set on the reference's own samples.

Given n calibration scores (the reference's samples at the soak's settings, scored like the
candidate's), the threshold is the order statistic X_(r) with r = ceil((n + 1)(1 - a)): for a
new sample from the same distribution, P(score > X_(r)) <= a (the split-conformal bound; exact
for continuous scores, conservative with ties). The realised false-flag rate of that threshold
is itself random, Beta(n + 1 - r, r); its 95% upper quantile says whether n supports a:
below ceil(1/a) - 1 samples no threshold exists (refused); when the upper quantile exceeds 2a the
calibration is stored with a warning.

With a second score (the whole generation's: its standardized surprisal under the soak's
sampling distribution where every sample has one, else its typicality; score.py) a sample is
flagged when either score is above its threshold, and the two thresholds are order statistics of
one common rank k: W_(k) and T_(k). k is the smallest rank at which E(k), the calibration
samples that either threshold flags, keeps (E(k) + 2) / (n + 1) <= a. For a fixed k, adding the
fresh sample to the calibration set moves each score's top n + 1 - k by at most one sample, so
at most E(k) + 2 of the n + 1 exchangeable samples are flagged and a fresh one is flagged with
probability at most (E(k) + 2) / (n + 1); k is chosen on the calibration alone, which the
shipped test checks by simulation at the defaults (tests/reference/test_typicality.py). With + 1
(the one-score rule) the rate was exceeded by 20% when the scores are independent. The joint
rule needs 2/a - 1 samples (1,999 at the default rate 0.001); below that the second score is not
calibrated and the worst token judges alone, as before. The realised rate is bounded with
Beta(E + 2, n + 1 - E).

Where the soak samples with a nucleus, a third score (the worst standardized token,
`score.token_z`) joins them by the same rule with + 3: (E(k) + 3) / (n + 1) <= a, which needs
3/a - 1 samples (2,999 at 0.001); below that the two scores above judge, with a warning. By
simulation at the defaults (`tests/reference/test_typicality.py`) the three together hold the rate.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from scipy import stats

from soakgate.errors import UsageError

JOINT_SCORES = 2
"""Scores calibrated together: a fresh sample can be above each one's order statistic where no
calibration sample is, so E(k) + 2 (not + 1) bounds the augmented count (+ 3 with the worst
standardized token)."""
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
    typical_threshold: float | None = None
    """The whole-generation score (`whole_score`) strictly above this is flagged too; None when
    the reference gave no alternatives (the worst token alone, at the whole rate)."""
    flagged: int | None = None
    """Calibration samples flagged by either threshold (E(k)); None for one score."""
    typical_quantiles: dict[str, float] = field(default_factory=dict)
    """The same quantiles of the samples' typicality, when every sample has one: the report's
    unit-level verdict judges a unit's typicality against their 90th percentile."""
    whole_score: str = "typical_surprisal"
    """Which whole-generation score `typical_threshold` is for: `soak_z` (`score.whole_z`) when
    every sample had one, else `typical_surprisal` (a calibration stored before issue 28's soak
    z, or a greedy soak)."""
    soak_z_quantiles: dict[str, float] = field(default_factory=dict)
    """The same quantiles of the samples' soak z, when every sample has one."""
    soak_z_moments: dict[str, float] = field(default_factory=dict)
    """The samples' soak z `mean` and `variance` (n - 1), when every sample has one: the
    report's unit-level verdict tests a unit's mean soak z against them (stats/shift.py)."""
    token_z_threshold: float | None = None
    """The worst standardized token (`score.token_z`) strictly above this is flagged too; None
    where the soak samples without a nucleus (or too few samples: the two scores judge)."""

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


def joint_rank(
    worst: Sequence[float], typical: Sequence[float], rate: float,
    *more: Sequence[float],
) -> tuple[int, int] | None:  # fmt: skip
    """The smallest common rank k (1-based) whose thresholds (W_(k), T_(k), and each further
    score's k-th order statistic) flag E calibration samples with (E + m) / (n + 1) <= rate for
    m scores, and E; None when no rank keeps the bound (fewer than m / rate - 1 samples)."""
    import numpy as np

    values = np.asarray([worst, typical, *more], dtype=float)
    ordered, scores, n = np.sort(values, axis=1), len(values), values.shape[1]
    best = None
    for k in range(n, 0, -1):
        flagged = int(np.sum((values > ordered[:, k - 1 : k]).any(axis=0)))
        if flagged + scores > rate * (n + 1):
            break
        best = (k, flagged)
    return best


def calibrate(
    scores: Sequence[float], false_flag_rate: float, means: Sequence[float] = (),
    typicals: Sequence[float | None] = (), soak_zs: Sequence[float | None] = (),
    token_zs: Sequence[float | None] = (),
) -> Calibration:  # fmt: skip
    """The threshold for `false_flag_rate` from calibration scores (with a whole-generation
    score for every sample, none None: `soak_zs`, else `typicals`: both thresholds, calibrated
    together; with the soak z and a worst standardized token for every sample, `token_zs`
    (given where the soak samples with a nucleus), all three); UsageError when there are too
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
    has_typical = len(typicals) == n and all(t is not None for t in typicals)
    has_z = len(soak_zs) == n and all(z is not None for z in soak_zs)
    wholes, whole_score = (soak_zs, "soak_z") if has_z else (typicals, "typical_surprisal")
    both = has_z or has_typical
    has_token_z = has_z and len(token_zs) == n and all(z is not None for z in token_zs)
    joint = None
    judged = JOINT_SCORES
    if has_token_z:
        joint = joint_rank(scores, wholes, false_flag_rate, token_zs)  # type: ignore[arg-type]
        judged += joint is not None
    if joint is None and both:
        joint = joint_rank(scores, wholes, false_flag_rate)  # type: ignore[arg-type]
    typical_threshold = flagged = token_z_threshold = None
    if joint is not None:
        rank, flagged = joint
        typical_threshold = sorted(wholes)[rank - 1]  # type: ignore[type-var]
        if judged > JOINT_SCORES:
            token_z_threshold = sorted(token_zs)[rank - 1]  # type: ignore[type-var]
        upper = float(stats.beta.ppf(0.95, flagged + judged, n + 1 - flagged))
    else:
        rank = min(math.ceil((n + 1) * (1.0 - false_flag_rate)), n)
        upper = float(stats.beta.ppf(0.95, n + 1 - rank, rank))
    warning = None
    if upper > WARN_FACTOR * false_flag_rate:
        warning = (
            f"reference calibration: {n} samples support a false-flag rate of "
            f"{false_flag_rate:g} only loosely (the threshold's own rate may be up to "
            f"{upper:.2%}, 95% bound); more --calibration samples tighten it"
        )
    if has_token_z and joint is not None and judged == JOINT_SCORES:
        need_three = math.ceil((JOINT_SCORES + 1) / false_flag_rate) - 1
        warning = ((warning + "; ") if warning else "reference calibration: ") + (
            f"the worst standardized token needs {need_three} samples at a false-flag rate of "
            f"{false_flag_rate:g}: it is not judged (give --calibration {max(need_three, 5000)})"
        )
    if both and joint is None:
        need_joint = math.ceil(JOINT_SCORES / false_flag_rate) - 1
        warning = ((warning + "; ") if warning else "reference calibration: ") + (
            f"the whole-generation score needs {need_joint} samples at a false-flag rate "
            f"of {false_flag_rate:g}: only the worst token is judged (give --calibration "
            f"{max(need_joint, 5000)})"
        )
    means_found = _quantiles(means) if len(means) == n else {}
    typical_found = _quantiles(typicals) if has_typical else {}  # type: ignore[arg-type]
    z_found: dict[str, float] = {}
    z_moments: dict[str, float] = {}
    zs = [float(z) for z in soak_zs if z is not None] if has_z else []
    if len(zs) > 1:
        z_found = _quantiles(zs)
        z_moments = {"mean": statistics.fmean(zs), "variance": statistics.variance(zs)}
    return Calibration(ordered[rank - 1], false_flag_rate, n, rank, upper, warning,
                       _quantiles(scores), means_found, typical_threshold, flagged,
                       typical_found, whole_score, z_found, z_moments,
                       token_z_threshold)  # fmt: skip
