"""The in-process reference's own sampler (`HFReference._sample`, the calibration's draws) on the
real tiny model: greedy draws are `generate`'s for a left-padded batch of prompts of different
lengths, sampled draws follow the soak's distribution (temperature and nucleus) at the first
token and, through the KV cache, at the second; stops and `ignore_eos` as a server treats them;
a calibration sample is scored as it is drawn, with the numbers a forward pass gives, and
`score` runs no forward pass for it; a chunk is drawn in batches as even as they can be."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path

import pytest
from scipy import stats

from soakgate.prompts import Prompt, builtin_prompts
from soakgate.reference.hf import HFReference
from soakgate.reference.scorer import request_for
from soakgate.reference.soak import Sampling, soak_distribution
from soakgate.targets import RequestSpec

torch = pytest.importorskip("torch")

MODEL = Path(__file__).resolve().parents[2].parent / "shared" / "models" / "tiny-llama-8k"
pytestmark = pytest.mark.skipif(
    not (MODEL / "config.json").is_file(), reason=f"no model at {MODEL}"
)


@pytest.fixture(scope="module")
def reference() -> HFReference:
    loaded = HFReference(MODEL, threads=1)
    asyncio.run(loaded.start())
    return loaded


def _greedy_by_generate(
    reference: HFReference, prompts: list[Prompt], tokens: int
) -> list[list[int]]:
    """transformers' own `generate`, greedy, on the same left-padded batch: the oracle."""
    tokenizer = reference._tokenizer
    encoded = [tokenizer(p.text).input_ids for p in prompts]
    longest, pad = max(map(len, encoded)), tokenizer.pad_token_id
    inputs = torch.tensor([[pad] * (longest - len(e)) + e for e in encoded])
    mask = torch.tensor([[0] * (longest - len(e)) + [1] * len(e) for e in encoded])
    with torch.no_grad():
        output = reference._model.generate(
            input_ids=inputs, attention_mask=mask, do_sample=False, max_new_tokens=tokens,
            pad_token_id=pad,
        )  # fmt: skip
    out = []
    for row in range(len(prompts)):
        new = output[row, longest:].tolist()
        out.append(
            new[: new.index(tokenizer.eos_token_id)] if tokenizer.eos_token_id in new else new
        )
    return out


def test_greedy_draws_are_generates_for_a_left_padded_batch(reference: HFReference) -> None:
    prompts = list(builtin_prompts()[:8])
    lengths = {len(reference._tokenizer(p.text).input_ids) for p in prompts}
    assert len(lengths) > 3  # the batch is padded: positions and the mask matter
    spec = RequestSpec(max_tokens=24, temperature=0.0)
    drawn = [o.token_ids for o in reference._sample(prompts, spec)]
    assert drawn == _greedy_by_generate(reference, prompts, 24)


def test_a_stop_ends_a_draw_and_ignore_eos_bars_it(
    reference: HFReference, monkeypatch: pytest.MonkeyPatch
) -> None:
    prompt = builtin_prompts()[0]
    greedy = reference._sample([prompt], RequestSpec(max_tokens=12, temperature=0.0))[0]
    assert greedy.finish_reason == "length" and len(greedy.token_ids or []) == 12
    third = (greedy.token_ids or [])[2]
    monkeypatch.setattr(reference, "_stop_ids", lambda: [third])  # as if it were an end token
    stopped = reference._sample([prompt], RequestSpec(max_tokens=12, temperature=0.0))[0]
    assert stopped.finish_reason == "stop"
    assert stopped.token_ids == (greedy.token_ids or [])[: (greedy.token_ids or []).index(third)]
    barred = reference._sample(
        [prompt], RequestSpec(max_tokens=12, temperature=0.0, ignore_eos=True)
    )[0]
    assert barred.finish_reason == "length" and len(barred.token_ids or []) == 12
    assert third not in (barred.token_ids or [])


def _exact(reference: HFReference, ids: list[int], sampling: Sampling) -> list[float]:
    """The soak's sampling distribution after `ids`, by one forward pass."""
    with torch.no_grad():
        logits = reference._model(input_ids=torch.tensor([ids])).logits[0, -1].float()
    return soak_distribution(torch, logits[None], sampling)[1][0].tolist()


def _fits(counts: dict[int, int], expected: list[float]) -> float:
    """Chi-square p of observed token counts against probabilities (cells of < 5 expected
    pooled with the tokens never drawn)."""
    total = sum(counts.values())
    big = [t for t, p in enumerate(expected) if p * total >= 5]
    observed = [counts.get(t, 0) for t in big]
    wanted = [expected[t] * total for t in big]
    observed.append(total - sum(observed))
    wanted.append(total - sum(wanted))
    assert len(big) >= 3  # a real test: several tokens are likely
    return float(stats.chisquare(observed, wanted).pvalue)


def test_draws_follow_the_soak_distribution_through_the_cache(reference: HFReference) -> None:
    """4,000 draws of two tokens after two prompts of different lengths in each batch (left
    padding): the first token's counts fit the soak's distribution (temperature 0.8, nucleus
    0.9), and the second's, after the most common first token, fit the distribution a forward
    pass over prompt + that token gives (the KV cache and the positions are right)."""
    short, long = builtin_prompts()[0], builtin_prompts()[3]
    encoded = [reference._tokenizer(p.text).input_ids for p in (short, long)]
    assert len(encoded[0]) != len(encoded[1])
    sampling = Sampling(0.8, 0.9)
    spec = RequestSpec(max_tokens=2, temperature=0.8, top_p=0.9)
    torch.manual_seed(7)
    pairs: list[tuple[int, int]] = []
    for _ in range(50):
        outcomes = reference._sample([short, long] * 40, spec)
        pairs += [tuple(o.token_ids) for o in outcomes[::2]]  # type: ignore[misc]
    firsts: dict[int, int] = {}
    for first, _ in pairs:
        firsts[first] = firsts.get(first, 0) + 1
    assert _fits(firsts, _exact(reference, encoded[0], sampling)) > 1e-3
    common = max(firsts, key=firsts.__getitem__)
    seconds: dict[int, int] = {}
    for first, second in pairs:
        if first == common:
            seconds[second] = seconds.get(second, 0) + 1
    assert _fits(seconds, _exact(reference, [*encoded[0], common], sampling)) > 1e-3


def test_calibration_samples_are_scored_as_drawn_and_not_again(reference: HFReference) -> None:
    """While calibrating, a sample's scores come from the logits that drew it: equal to a
    forward pass over it (to float rounding, ranks exactly), and `score` runs none for it."""
    reference.sampling = Sampling(0.8, 0.95)
    reference._calibrating = True
    try:
        torch.manual_seed(3)
        spec = RequestSpec(max_tokens=32, temperature=0.8, top_p=0.95)
        answers = reference._sample_all(list(builtin_prompts()[:6]), spec)
        before = reference.prefill_tokens

        async def scored() -> list[list]:  # type: ignore[type-arg]
            return [(await reference.score(request_for(p, o, "completions")))[0]
                    for p, o in answers]  # fmt: skip

        drawn = asyncio.run(scored())
        assert reference.prefill_tokens == before  # no forward pass ran for them
        for (_, outcome), tokens in zip(answers, drawn, strict=True):
            ids = [*(outcome.prompt_token_ids or []), *(outcome.token_ids or [])]
            passed = reference._forward([(ids, len(outcome.prompt_token_ids or []))])[0]
            assert len(tokens) == len(passed) == len(outcome.token_ids or []) > 0
            for mine, theirs in zip(tokens, passed, strict=True):
                assert (mine.position, mine.token_id, mine.rank, mine.text) == (
                    theirs.position, theirs.token_id, theirs.rank, theirs.text)  # fmt: skip
                assert mine.logprob == pytest.approx(theirs.logprob, abs=1e-3)
                assert mine.entropy == pytest.approx(theirs.entropy, abs=1e-3)
                assert mine.soak == pytest.approx(theirs.soak, abs=1e-3)
    finally:
        reference.calibrated()
        reference.sampling = None
    assert not reference._drawn


def test_a_chunk_is_drawn_in_batches_as_even_as_they_can_be(
    reference: HFReference, monkeypatch: pytest.MonkeyPatch
) -> None:
    """50 prompts at 48 a batch are two batches of 25, not 48 and 2 (a step of 2 rows costs
    nearly what one of 48 does)."""
    sizes: list[int] = []
    monkeypatch.setattr(reference, "_sample",
                        lambda prompts, spec: sizes.append(len(prompts)) or [None] * len(prompts))  # fmt: skip
    monkeypatch.setattr(reference, "sample_batch", 48)
    prompts = builtin_prompts()
    reference._sample_all([prompts[i % len(prompts)] for i in range(50)], RequestSpec())
    assert sizes == [25, 25]
    sizes.clear()
    reference._sample_all([prompts[0]] * 96, RequestSpec())
    assert sizes == [48, 48]
    sizes.clear()
    reference._sample_all([prompts[0]] * 7, RequestSpec())
    assert sizes == [7]


def test_a_prompts_pass_returns_only_its_last_positions_logits(
    reference: HFReference, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The prompt's forward pass asks for the last position's logits only, as `generate` does
    (all of them are rows x prompt x vocabulary: 1.6 GB for 48 prompts of 1,000 tokens)."""
    forward, widths = reference._model.forward, []

    @functools.wraps(forward)
    def spied(*args: object, **kwargs: object) -> object:
        out = forward(*args, **kwargs)
        widths.append(out.logits.shape[1])
        return out

    monkeypatch.setattr(reference._model, "forward", spied)
    prompts = list(builtin_prompts()[:4])
    reference._sample(prompts, RequestSpec(max_tokens=3, temperature=0.0))
    assert widths == [1, 1, 1]  # the prompt's pass, then one per drawn token but the last
