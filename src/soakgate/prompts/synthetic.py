"""Synthetic prompts whose lengths in tokens follow a distribution (`run --prompt-tokens DIST`),
for load that looks like production's length mix rather than one prompt set's.

A length is drawn per prompt (seeded: the same flags give the same prompts); the prompt is a
slice of that many tokens of a fixed prose corpus (the built-in prompt set, read as running
text, from a seeded starting point, wrapping round). With `--tokenizer` (a Hugging Face
`tokenizer.json`, or a model folder holding one; read by the `tokenizers` library) the slice is
cut at the model's own token boundaries, so a prompt re-tokenizes to its length give or take
a token at the edges. Without one, the length is converted at 3/4 of a word per token (the
usual English rule of thumb for BPE vocabularies), and the run records that it was an
estimate. Only the corpus and the slicing are written here.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from soakgate.errors import UsageError
from soakgate.prompts.builtin import builtin_prompts
from soakgate.prompts.source import Prompt

WORDS_PER_TOKEN = 0.75
"""The estimate used without a tokenizer."""
KINDS = ("fixed", "uniform", "normal", "lognormal")
_MAX_TOKENS = 1_000_000


@dataclass(frozen=True, slots=True)
class LengthDistribution:
    """Prompt lengths in tokens: `N` (fixed), `uniform:LO,HI`, `normal:MEAN,SD` or
    `lognormal:MEDIAN,SIGMA` (draws below 1 are 1)."""

    kind: str
    params: tuple[float, ...]
    text: str

    @classmethod
    def parse(cls, text: str) -> LengthDistribution:
        kind, _, rest = text.partition(":")
        if not rest:
            kind, rest = "fixed", text
        try:
            params = tuple(float(p) for p in rest.split(","))
        except ValueError:
            raise _bad(text) from None
        wanted = {"fixed": 1, "uniform": 2, "normal": 2, "lognormal": 2}.get(kind)
        if wanted is None or len(params) != wanted or any(p != p for p in params):
            raise _bad(text)
        first = params[0]
        if not 1 <= first <= _MAX_TOKENS or (kind == "fixed" and first != int(first)):
            raise _bad(text)
        if kind == "uniform" and not first <= params[1] <= _MAX_TOKENS:
            raise _bad(text)
        if kind in ("normal", "lognormal") and not 0 <= params[1] <= (
            _MAX_TOKENS if kind == "normal" else 5
        ):
            raise _bad(text)
        return cls(kind, params, text)

    def draw(self, rng: random.Random) -> int:
        """One length (at least 1 token, at most a million)."""
        a, b = (*self.params, 0.0)[:2]
        if self.kind == "fixed":
            value = a
        elif self.kind == "uniform":
            value = rng.randint(round(a), round(b))
        elif self.kind == "normal":
            value = rng.gauss(a, b)
        else:
            value = a * rng.lognormvariate(0.0, b)
        return min(max(1, round(value)), _MAX_TOKENS)


def _bad(text: str) -> UsageError:
    return UsageError(
        f"--prompt-tokens {text!r} is not a length distribution like 512, uniform:64,2048, "
        "normal:512,128 or lognormal:512,0.5 (lengths from 1 to 1,000,000 tokens)"
    )


@cache
def _corpus() -> str:
    """Running prose: every built-in prompt, one after another."""
    return " ".join(p.text for p in builtin_prompts()) + " "


class _Counter:
    """Cuts the corpus into slices of a given number of tokens."""

    def __init__(self, tokenizer: str | None) -> None:
        corpus = _corpus()
        self.approximate = tokenizer is None
        if tokenizer is None:
            self.pieces = [w + " " for w in corpus.split()]
            return
        encoded = _load_tokenizer(tokenizer).encode(corpus, add_special_tokens=False)
        bounds = [end for _, end in encoded.offsets]
        starts = [0, *bounds[:-1]]
        self.pieces = [corpus[s:e] for s, e in zip(starts, bounds, strict=True)]
        self.pieces[-1] += corpus[bounds[-1] :]

    def slice(self, tokens: int, start: int) -> str:
        """`tokens` tokens (or the estimate's words) from piece `start`, wrapping round."""
        count = max(1, round(tokens * WORDS_PER_TOKEN)) if self.approximate else tokens
        pieces, n = self.pieces, len(self.pieces)
        whole, part = divmod(count, n)
        chosen = (pieces[start:] + pieces[:start]) * whole
        chosen += [pieces[(start + i) % n] for i in range(part)]
        return "".join(chosen).strip() or pieces[start].strip() or "."


def _load_tokenizer(path: str) -> Any:
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise UsageError(
            "--tokenizer needs the `tokenizers` package: pip install tokenizers"
        ) from None
    file = Path(path)
    if file.is_dir():
        file = file / "tokenizer.json"
    try:
        return Tokenizer.from_file(str(file))
    except Exception as exc:  # the library raises its own exception type for every problem
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise UsageError(f"--tokenizer {path}: cannot read {file}: {reason}") from None


def synthetic_prompts(
    lengths: LengthDistribution, count: int, seed: int, tokenizer: str | None = None
) -> list[Prompt]:
    """`count` prompts with lengths drawn from `lengths` (ids `synthetic-NNNNN-<tokens>t`)."""
    counter = _Counter(tokenizer)
    rng = random.Random(f"soakgate-synthetic:{seed}:{lengths.text}")
    prompts = []
    for index in range(count):
        tokens = lengths.draw(rng)
        start = rng.randrange(len(counter.pieces))
        text = counter.slice(tokens, start)
        prompts.append(Prompt(f"synthetic-{index:05d}-{tokens}t", text))
    return prompts


def described(lengths: LengthDistribution, count: int, tokenizer: str | None) -> dict[str, Any]:
    """What a run records of its synthetic prompts."""
    return {
        "lengths": lengths.text, "count": count, "tokenizer": tokenizer,
        "estimated": tokenizer is None,
        **({"words_per_token": WORDS_PER_TOKEN} if tokenizer is None else {}),
    }  # fmt: skip
