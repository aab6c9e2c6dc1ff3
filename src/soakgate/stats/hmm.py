"""Two-state (clean/burst) hidden-Markov model for a 0/1 failure sequence, with an LR test.

Written by hand: no maintained library fits a Bernoulli HMM by maximum likelihood on
run-length-compressed data. Long runs of zeros are applied as one matrix power (closed
form through the 2x2 eigendecomposition), so a fit costs O(events), not O(requests).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from soakgate.stats._sampling import IntArray, random_subsets

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class HmmFit:
    """Maximum-likelihood two-state fit and its likelihood ratio against independent Bernoulli."""

    clean_rate: float
    """Failure probability per request in the clean state."""
    burst_rate: float
    """Failure probability per request in the burst state."""
    enter_burst: float
    """Per-request probability of moving from clean to burst."""
    leave_burst: float
    """Per-request probability of moving from burst to clean (mean burst length = 1/this)."""
    log_likelihood: float
    """Maximised log-likelihood of the two-state model."""
    lr_statistic: float
    """2 x (log-likelihood of the HMM - that of independent Bernoulli), floored at 0."""


@dataclass(frozen=True, slots=True)
class HmmTest:
    """The fit plus its parametric-bootstrap p-value."""

    fit: HmmFit
    """Fit to the observed sequence."""
    p_value: float
    """(1 + bootstrap LR >= observed) / (1 + replicates)."""
    replicates: int
    """Number of bootstrap sequences simulated under independence."""


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def _params(theta: FloatArray) -> tuple[float, float, float, float]:
    clean = _sigmoid(float(theta[0]))
    # The burst state is the one with the higher rate, which makes the labels identifiable.
    burst = clean + (1.0 - clean) * _sigmoid(float(theta[1]))
    return clean, burst, _sigmoid(float(theta[2])), _sigmoid(float(theta[3]))


def _negative_log_likelihood(theta: FloatArray, gaps: list[int]) -> float:
    """Forward algorithm over runs of zeros (`gaps`: zeros before each event, then trailing)."""
    clean, burst, enter, leave = _params(theta)
    if not 0.0 < clean < burst < 1.0:
        return 1e300
    # quiet = diag(1-clean, 1-burst) @ transition: one step that emits no failure.
    p, q = (1.0 - clean) * (1.0 - enter), (1.0 - clean) * enter
    r, s = (1.0 - burst) * leave, (1.0 - burst) * (1.0 - leave)
    half = (p + s) / 2.0
    disc = math.sqrt(max(half * half - (p * s - q * r), 0.0))
    top, low = half + disc, half - disc
    if not top > 0.0 or disc == 0.0:
        return 1e300
    # Spectral projectors of a 2x2 matrix: quiet**L = top**L * (P1 + (low/top)**L * P2).
    width = top - low
    a1, b1, c1, d1 = (p - low) / width, q / width, r / width, (s - low) / width
    ratio = low / top
    f00, f01 = clean * (1.0 - enter), clean * enter
    f10, f11 = burst * leave, burst * (1.0 - leave)
    v0, v1 = leave / (enter + leave), enter / (enter + leave)
    log_like = 0.0
    last = len(gaps) - 1
    for index, length in enumerate(gaps):
        w = ratio**length
        a, b, c, d = a1 + w * (1.0 - a1), b1 - w * b1, c1 - w * c1, d1 + w * (1.0 - d1)
        v0, v1 = v0 * a + v1 * c, v0 * b + v1 * d
        if index < last:
            v0, v1 = v0 * f00 + v1 * f10, v0 * f01 + v1 * f11
        total = v0 + v1
        if not total > 0.0:
            return 1e300
        log_like += math.log(total)
        v0, v1 = v0 / total, v1 / total
    return -(log_like + sum(gaps) * math.log(top))


def _gaps(n: int, positions: IntArray) -> IntArray:
    """Zeros before each event and after the last one."""
    edges = np.concatenate(([-1], positions, [n]))
    return (np.diff(edges) - 1).astype(np.int64)


def fit_hmm(n: int, positions: IntArray) -> HmmFit:
    """Fit the two-state model to a length-n sequence whose events sit at sorted `positions`."""
    from scipy.optimize import minimize

    k = len(positions)
    rate = k / n
    null_ll = 0.0 if k in (0, n) else k * math.log(rate) + (n - k) * math.log1p(-rate)
    if k < 2 or k == n:
        return HmmFit(rate, rate, 0.0, 1.0, null_ll, 0.0)
    gaps = _gaps(n, positions).tolist()
    logit = math.log(rate / 2) - math.log1p(-rate / 2)
    best = None
    # Two starts (short and long bursts) guard against the flat likelihood near the null.
    for burst_logit, leave_logit in ((0.0, -2.0), (-2.0, -5.0)):
        start = np.array([logit, burst_logit, math.log(rate), leave_logit])
        result = minimize(
            _negative_log_likelihood,
            start,
            args=(gaps,),
            method="L-BFGS-B",
            options={"ftol": 1e-6},  # LR precision of ~1e-3 is ample for a test statistic
        )
        if best is None or result.fun < best.fun:
            best = result
    assert best is not None
    clean, burst, enter, leave = _params(best.x)
    log_like = max(-float(best.fun), null_ll)
    return HmmFit(clean, burst, enter, leave, log_like, 2.0 * (log_like - null_ll))


def hmm_test(seq: npt.NDArray[np.bool_], replicates: int = 99, seed: int = 0) -> HmmTest:
    """LR test of the two-state model vs independence, critical value by parametric bootstrap."""
    n = len(seq)
    positions = np.flatnonzero(seq).astype(np.int64)
    fit = fit_hmm(n, positions)
    rng = np.random.default_rng(seed)
    counts = rng.binomial(n, len(positions) / n, size=replicates)
    exceed = 0
    for count in counts:
        null_positions = random_subsets(rng, n, int(count), 1)[0]
        exceed += fit_hmm(n, null_positions).lr_statistic >= fit.lr_statistic - 1e-9
    return HmmTest(fit, (1 + exceed) / (1 + replicates), replicates)
