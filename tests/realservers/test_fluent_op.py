"""The fluent control's op without vLLM: eager it is exact; compiled (aot_eager, as in
tests/bisect) the op is dropped and exactly the rows the rule picks come out misaligned."""

from __future__ import annotations

import sys

import pytest

from tests.realservers.vllm_support import REPO

torch = pytest.importorskip("torch")
sys.path.insert(0, str(REPO / "examples" / "vllm-dropped-op-plugin"))
from soakgate_dropped_op.fluent import MODULUS, RESIDUE, selected  # noqa: E402
from soakgate_dropped_op.ops import misaligned_rows, through_fixup_buffer  # noqa: E402


def final_norm_output(hidden: torch.Tensor, embedding: torch.Tensor) -> torch.Tensor:
    """What the patched final norm returns (patch.wrap_norm_forward_fluent, minus the norm)."""
    return through_fixup_buffer(hidden, misaligned_rows(hidden, embedding))


def rows_and_vocab() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """64 rows whose top-1 token runs through every residue: row i's top-1 id is i."""
    generator = torch.Generator().manual_seed(0)
    vocab = MODULUS * 2
    embedding = torch.eye(vocab) + 0.01 * torch.randn(vocab, vocab, generator=generator)
    hidden = embedding[:MODULUS] * 4.0  # row i points at token i
    top1 = (hidden @ embedding.t()).argmax(-1)
    return hidden, embedding, top1


def test_eager_output_is_exact() -> None:
    hidden, embedding, _ = rows_and_vocab()
    assert torch.equal(final_norm_output(hidden, embedding), hidden)


def test_compiled_drops_the_op_and_misaligns_only_the_picked_rows() -> None:
    hidden, embedding, top1 = rows_and_vocab()
    picked = torch.tensor([selected(int(t)) for t in top1])
    assert int(picked.sum()) >= 1 and bool((top1[picked] % MODULUS == RESIDUE).all())
    torch._dynamo.reset()
    compiled = torch.compile(final_norm_output, backend="aot_eager")
    out = compiled(hidden, embedding)
    assert torch.equal(out[~picked], hidden[~picked])
    assert torch.equal(out[picked], hidden[picked].roll(1, dims=-1))
    assert not torch.equal(out[picked], hidden[picked])
