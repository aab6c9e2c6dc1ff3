"""The whole-generation score under the soak's own sampling distribution (issue 28, `soak.py`):
exact values in process, the same values from a server's alternatives when they hold all the mass,
a clean generation's score standard normal whatever its length, and a model that is wrong
a little too flat everywhere flagged per generation where the typicality missed most of it (the
score is length-free: one threshold is as strict after a prompt whose answers are nearly certain
as after one whose answers are open)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

torch = pytest.importorskip("torch")

from soakgate.reference.calibrate import calibrate  # noqa: E402
from soakgate.reference.score import (  # noqa: E402
    TokenScore,
    evidence,
    max_surprisal,
    typical_surprisal,
    whole_z,
)
from soakgate.reference.soak import (  # noqa: E402
    Sampling,
    draw,
    nucleus,
    soak_stats_top,
    soak_stats_torch,
    soak_z,
)

SOAK = Sampling(0.8, 0.95)  # soakgate run's temperature, the nucleus the README recommends


def _nucleus(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """What a server samples from: softmax(logits / T) cut to its nucleus (vLLM's rule)."""
    probs = torch.softmax(logits / sampling.temperature, -1)
    ordered, index = probs.sort(-1, descending=True)
    ordered = ordered.masked_fill(ordered.cumsum(-1) - ordered >= sampling.top_p, 0.0)
    kept = torch.zeros_like(probs).scatter(-1, index, ordered)
    return kept / kept.sum(-1, keepdim=True)


@pytest.mark.parametrize("top_p", [1.0, 0.9, 0.5])
def test_the_alternatives_give_the_exact_values_when_they_hold_all_the_mass(top_p: float) -> None:
    generator = torch.Generator().manual_seed(3)
    logits = torch.randn(6, 12, generator=generator) * 2.0
    targets = torch.randint(0, 12, (6,), generator=generator)
    sampling = Sampling(0.8, top_p)
    exact = [x.tolist() for x in soak_stats_torch(torch, logits, targets, sampling)]
    logprobs = torch.log_softmax(logits, -1)
    for i in range(6):
        own = float(logprobs[i, targets[i]])
        found = soak_stats_top(logprobs[i].tolist(), own, sampling)
        for value, want in zip(found, (exact[0][i], exact[1][i], exact[2][i]), strict=True):
            assert math.isclose(value, want, rel_tol=1e-4, abs_tol=1e-4), (i, found, exact)


def test_the_nucleus_looked_for_among_the_top_tokens_is_the_whole_sorts_cut() -> None:
    """`nucleus` looks among the 256 most likely tokens first and further only for the rows
    whose cut is not there: the same tokens and weights as cutting the whole sorted vocabulary
    (vLLM's rule, at least one token), over flat and peaked rows, small and large vocabularies."""
    generator = torch.Generator().manual_seed(0)
    for _ in range(200):
        vocabulary = int(torch.randint(2, 9000, (1,), generator=generator))
        rows = int(torch.randint(1, 24, (1,), generator=generator))
        spread = float(torch.rand(1, generator=generator)) * 6
        q = torch.softmax(torch.randn(rows, vocabulary, generator=generator) * spread, -1)
        top_p = float(torch.rand(1, generator=generator)) * 0.999 + 0.001
        ordered, index = q.sort(-1, descending=True)
        cut = ordered.cumsum(-1) - ordered >= top_p
        cut[:, 0] = False
        whole = torch.zeros_like(q).scatter(-1, index, ordered.masked_fill(cut, 0.0))
        whole = whole / whole.sum(-1, keepdim=True)
        mine = nucleus(torch, q, top_p)
        assert torch.equal(mine > 0, whole > 0)
        assert torch.allclose(mine, whole, atol=1e-6)


def test_a_draw_follows_its_distribution_and_never_takes_an_impossible_token() -> None:
    torch.manual_seed(11)
    q = torch.tensor([[0.0, 0.5, 0.0, 0.3, 0.2, 0.0]]).repeat(20_000, 1)
    counts = torch.bincount(draw(torch, q), minlength=6).tolist()
    assert counts[0] == counts[2] == counts[5] == 0
    observed = [counts[1], counts[3], counts[4]]
    assert stats.chisquare(observed, [10_000, 6_000, 4_000]).pvalue > 1e-3


def test_sampling_of_a_greedy_soak_is_none_and_top_p_defaults_to_the_whole() -> None:
    assert Sampling.of(0.0, 0.95) is None
    assert Sampling.of(0.8, None) == Sampling(0.8, 1.0)
    assert soak_z([]) is None and soak_z([(1.0, 1.0, 1.0), None]) is None


def _generations(
    count: int, length: int, seed: int, flatter: float = 1.0
) -> list[list[TokenScore]]:
    """`count` generations of a synthetic model (a fresh Zipf-like distribution over 200 tokens
    at every position, nearly certain after one prompt and flat after another, as a language
    model's are), each
    token drawn as a server at SOAK draws it from the model's logits divided by `flatter` (1:
    clean; above 1: a model a little too flat everywhere, as a wrong norm scale makes it), and
    scored as the in-process reference scores it (exact entropy and soak values)."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        steep = 0.4 + 1.6 * torch.rand(1, generator=generator)  # the prompt's: one per generation
        ranks = torch.rand(length, 200, generator=generator).argsort(-1) + 1
        logits = -steep * ranks.float().log() * 2.0
        served = logits / flatter
        tokens = torch.multinomial(_nucleus(served, SOAK), 1, generator=generator)[:, 0]
        logprobs = torch.log_softmax(logits, -1)
        own = logprobs.gather(1, tokens[:, None])[:, 0].tolist()
        entropy = (-(logprobs.exp() * logprobs).sum(-1)).tolist()
        values = soak_stats_torch(torch, logits, tokens, SOAK)
        stats = list(zip(*(x.tolist() for x in values), strict=True))
        out.append([TokenScore(i, int(t), lp, None, "x", h, s)
                    for i, (t, lp, h, s) in enumerate(zip(tokens.tolist(), own, entropy, stats, strict=True))])  # fmt: skip
    return out


def test_a_clean_generations_score_is_standard_normal_at_any_length() -> None:
    for length in (8, 64):
        z = np.array([whole_z(tokens) for tokens in _generations(1500, length, length)])
        # variance 1 exactly; after a nearly certain prompt a rare token makes a long right
        # tail, so the sample's spread sits a little under it (0.89 measured at length 64)
        assert abs(z.mean()) < 0.1 and 0.8 < z.std() < 1.2, (length, z.mean(), z.std())


@pytest.mark.slow
def test_a_model_a_little_too_flat_everywhere_is_flagged_per_generation() -> None:
    # the shipped defaults: 5,000 calibration samples at the false-flag rate 0.001
    calibration = _generations(5000, 48, 1)
    worst = [max_surprisal(t) for t in calibration]
    made = calibrate(worst, 0.001, (), [typical_surprisal(t) for t in calibration],
                     [whole_z(t) for t in calibration])  # fmt: skip
    before = calibrate(worst, 0.001, (), [typical_surprisal(t) for t in calibration])
    assert made.whole_score == "soak_z" and before.whole_score == "typical_surprisal"

    def flagged(rows: list[list[TokenScore]], calibration: object) -> float:
        hits = [evidence(t, calibration.threshold, "token_ids",  # type: ignore[attr-defined]
                         calibration.typical_threshold,  # type: ignore[attr-defined]
                         whole_score=calibration.whole_score)[1]  # type: ignore[attr-defined]
                for t in rows]  # fmt: skip
        return float(np.mean(hits))

    # measured when written: 62% flagged against 34% by the worst token and the typicality
    corrupted = _generations(400, 48, 2, flatter=1.3)
    clean = _generations(2000, 48, 3)
    now, then = flagged(corrupted, made), flagged(corrupted, before)
    assert now >= 0.5 and now >= then + 0.15, (now, then)
    assert flagged(clean, made) <= 0.005  # 0.1% expected: 2 of 2,000; above 10 has p < 1e-4
