"""Which rows the fluent control corrupts: pure Python, no torch, so that a test (or anyone
auditing a run) can recompute the ground truth from a reference's top-1 token ids.

A row (one position of one sequence) is corrupted when the model's own most likely next token
there has an id congruent to RESIDUE modulo MODULUS. With the shared model (tiny-llama-8k) at
temperature 0.8 that is about 1% of decoding steps and ~29% of 32-token generations (measured:
120 builtin prompts against eager vLLM, docs/real-servers-vllm.md). The rule depends on the
sampled text, so which generations are hit is random, as with a real data-dependent fault; it
is deterministic given the tokens, so the hit steps can be recomputed from the reference's
top-1 ids. The rule is the control's, not soakgate's: the scorer never sees it.
"""

from __future__ import annotations

from collections.abc import Sequence

MODULUS = 64
RESIDUE = 10


def selected(top1_token_id: int) -> bool:
    """True when a row whose most likely next token is `top1_token_id` is corrupted."""
    return top1_token_id % MODULUS == RESIDUE


def corrupted_steps(top1_ids: Sequence[int]) -> list[int]:
    """Indices (0-based, into the generated tokens) of the steps the control corrupts, given
    the top-1 token id the model predicts before each generated token."""
    return [step for step, token_id in enumerate(top1_ids) if selected(token_id)]
