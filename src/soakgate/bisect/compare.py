"""soakgate's pass/fail check of compiled against eager: every output tensor within tolerance.

A compiled program may differ from eager by rounding (fused kernels reassociate sums); a
dropped write or a wrong pass differs by far more. The check is `allclose`-like, but it reports
how far the worst element is, so a finding can say by how much it diverged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

RTOL, ATOL = 1e-3, 1e-3
"""Default tolerance: far above float32 reassociation error, far below any real corruption."""


@dataclass(frozen=True, slots=True)
class Tolerance:
    """How far compiled may be from eager, elementwise: |a - b| <= atol + rtol * |a|."""

    rtol: float = RTOL
    atol: float = ATOL


@dataclass(frozen=True, slots=True)
class Difference:
    """How two outputs compare."""

    matches: bool
    """Every tensor has the same shape and is within tolerance (NaN only where eager has NaN)."""
    worst: float
    """The largest |a - b| over all elements (inf for a shape or count mismatch)."""
    reason: str = ""
    """Why they do not match, in words."""


def compare(expected: Sequence[Any], actual: Sequence[Any], tolerance: Tolerance) -> Difference:
    """Compare two lists of tensors (eager first)."""
    import torch

    if len(expected) != len(actual):
        return Difference(False, float("inf"), f"{len(actual)} outputs instead of {len(expected)}")
    worst = 0.0
    for index, (a, b) in enumerate(zip(expected, actual, strict=True)):
        if a.shape != b.shape:
            return Difference(False, float("inf"), f"output {index} has shape {tuple(b.shape)}")
        a64, b64 = a.detach().double(), b.detach().double()
        if a64.numel() == 0:
            continue
        nan_a, nan_b = torch.isnan(a64), torch.isnan(b64)
        if bool((nan_a != nan_b).any()):
            return Difference(False, float("inf"), f"output {index} has NaN where eager has none")
        delta = (a64 - b64).abs().masked_fill(nan_a, 0.0)
        worst = max(worst, float(delta.max()))
        allowed = tolerance.atol + tolerance.rtol * a64.abs().masked_fill(nan_a, 0.0)
        if bool((delta > allowed).any()):
            return Difference(False, worst, f"output {index} differs by up to {worst:.3g}")
    return Difference(True, worst)
