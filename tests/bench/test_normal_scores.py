"""The normal score of `bench_reference_tokens.py` (issue 28's fourth per-generation score): under
the sampling distribution a drawn token's score has mean 0 and variance `nv` exactly, at every
position, with and without a nucleus; an unlikelier token scores higher (down to masses of
1e-30, where a cumulative sum from the front loses them); a token outside the nucleus scores as
its least likely token."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_reference_tokens as tokens  # noqa: E402
import benchlib  # noqa: E402


@pytest.mark.parametrize("top_p", [1.0, 0.95, 0.5])
def test_every_positions_scores_have_mean_zero_and_variance_nv(top_p: float) -> None:
    generator = torch.Generator().manual_seed(28)
    logits = (
        torch.randn(5, 300, generator=generator) * torch.tensor([0.3, 1.0, 2.0, 4.0, 9.0])[:, None]
    )
    q = benchlib.nucleus(torch, logits, top_p, 0.8)
    every = torch.arange(q.shape[1])
    for row in range(q.shape[0]):
        nz, nv = tokens.normal_scores(torch, q[row : row + 1].expand(len(every), -1), every)
        inside = q[row] > 0
        weights = q[row][inside].double()
        assert float((weights * nz[inside].double()).sum()) == pytest.approx(0.0, abs=2e-5)
        second = float((weights * nz[inside].double() ** 2).sum())
        assert second == pytest.approx(float(nv[0]), rel=1e-4, abs=1e-6)
        assert 0.0 <= float(nv[0]) <= 1.0
        # unlikelier tokens score higher; outside the nucleus, as the nucleus's last token
        order = torch.argsort(q[row][inside], descending=True)
        ranked = nz[inside][order]
        assert bool((ranked[1:] >= ranked[:-1] - 1e-5).all())
        assert bool((nz[~inside] == nz[inside].max()).all())  # as the nucleus's last token


def test_a_near_certain_position_carries_nothing() -> None:
    logits = torch.full((1, 50), -30.0)
    logits[0, 7] = 30.0
    q = benchlib.nucleus(torch, logits, 1.0, 0.8)
    nz, nv = tokens.normal_scores(torch, q, torch.tensor([7]))
    assert abs(float(nz[0])) < 1e-3 and float(nv[0]) < 1e-3
