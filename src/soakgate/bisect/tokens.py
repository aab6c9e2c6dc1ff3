"""The soak's question asked in-process: does the compiled model produce the stored generation?

The stored generation's tokens are appended to its prompt and the model is run once on the
whole sequence (teacher forcing), eager and compiled: at each generated position the top token
of each, and the rank of the token the server returned. The first position where compiled's top
token differs from eager's is where the compiled program would have written something else; the
margin eager had there (its top logit minus compiled's choice, under eager) says whether that is
a real departure or a near tie that rounding can flip (compared with eager's own rounding noise,
`rounding_noise`).

Tolerances: elementwise checks use a tolerance per dtype (`tolerance_for`), and eager's own
rounding noise (the model in its dtype against a copy in a wider one) is measured and printed
beside it, so a reader can see how much room the check has.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from soakgate.bisect.compare import Tolerance
from soakgate.bisect.model import Subject, leaves

TOLERANCES = {
    "float64": Tolerance(1e-7, 1e-7),
    "float32": Tolerance(1e-3, 1e-3),
    "float16": Tolerance(1e-2, 1e-2),
    "bfloat16": Tolerance(1.6e-2, 1.6e-2),
}
"""Default elementwise tolerance per dtype of the model's parameters: float32's is far above its
reassociation error and far below a real corruption; half precision rounds 2^-11 (float16) and
2^-8 (bfloat16) of a value per operation, so their defaults are wider."""
WIDER = {"float32": "float64", "float16": "float32", "bfloat16": "float32"}


@dataclass(frozen=True, slots=True)
class Noise:
    """How far eager in the model's dtype is from eager in a wider one."""

    dtype: str
    wider: str
    max_abs: float
    """Largest |difference| over every output element."""

    def describe(self) -> str:
        return f"eager's own rounding, {self.dtype} against {self.wider}: up to {self.max_abs:.3g}"


def model_dtype(subject: Subject) -> str:
    """The dtype of the model's first floating-point parameter (float32 when it has none)."""
    for parameter in subject.model.parameters():
        if parameter.is_floating_point():
            return str(parameter.dtype).removeprefix("torch.")
    return "float32"


def tolerance_for(dtype: str) -> Tolerance:
    """The default tolerance of a model of `dtype`."""
    return TOLERANCES.get(dtype, TOLERANCES["float32"])


def rounding_noise(subject: Subject, eager: Any) -> Noise | None:
    """Eager's output `eager` (the model in its dtype) against a copy of the model in a wider
    dtype, on the same inputs; None when there is no wider dtype or the copy cannot run (a
    custom op without it)."""
    import torch

    dtype = model_dtype(subject)
    wider = WIDER.get(dtype)
    if wider is None:
        return None
    wide_dtype = getattr(torch, wider)
    try:
        model = copy.deepcopy(subject.model).to(wide_dtype)
        widen: Callable[[Any], Any] = lambda v: (  # noqa: E731
            v.to(wide_dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
        )
        wide = Subject(model, tuple(widen(a) for a in subject.args),
                       {k: widen(v) for k, v in subject.kwargs.items()}, subject.name)  # fmt: skip
        ours, theirs = leaves(eager), leaves(wide())
    except Exception:  # a custom op or a model that only runs in its own dtype
        return None
    worst = 0.0
    for a, b in zip(ours, theirs, strict=False):
        if a.shape == b.shape and a.is_floating_point() and a.numel():
            worst = max(worst, float((a.double() - b.double()).abs().nan_to_num(0.0).max()))
    return Noise(dtype, wider, worst)


@dataclass(frozen=True, slots=True)
class TokenCheck:
    """Compiled against eager on the stored generation's tokens, position by position."""

    generated: int
    """Generated tokens checked."""
    reproduced: int
    """Leading stored tokens that are eager's top token too (all of them: a greedy answer of
    this model; fewer: sampled, or another server's numerics)."""
    position: int | None = None
    """First generated position (0-based) where compiled's top token is not eager's."""
    stored: str = ""
    eager_top: str = ""
    compiled_top: str = ""
    stored_rank_eager: int = 0
    stored_rank_compiled: int = 0
    """Rank (1: top) of the stored token at that position under each."""
    margin: float = 0.0
    """Eager's logit of its top token minus its logit of compiled's top token there."""

    def describe(self, noise: Noise | None) -> str:
        if self.position is None:
            return (f"compiled's top token is eager's at all {self.generated} generated "
                    f"positions (eager's top is the stored token for the first "
                    f"{self.reproduced})")  # fmt: skip
        tie = ""
        if noise is not None and self.margin <= noise.max_abs:
            tie = ", within eager's rounding noise: a near tie"
        return (
            f"first divergent token: position {self.position} of {self.generated} generated "
            f"(stored {self.stored!r}, rank {self.stored_rank_eager} eager, "
            f"{self.stored_rank_compiled} compiled): eager's top {self.eager_top!r}, compiled's "
            f"{self.compiled_top!r} (eager's margin {self.margin:.3g}{tie})"
        )

    def real(self, noise: Noise | None) -> bool:
        """A departure beyond a near tie."""
        return self.position is not None and (noise is None or self.margin > noise.max_abs)


def check_tokens(subject: Subject, eager_output: Any, backend: Any, prompt_tokens: int,
                 decode: Callable[[int], str]) -> TokenCheck:  # fmt: skip
    """Teacher-force the subject's `input_ids` (prompt, then the stored generation) compiled with
    `backend`, against `eager_output` (eager's on the same input); compare the top token at
    every generated position."""
    import torch

    input_ids = subject.kwargs["input_ids"]
    eager = _logits(eager_output)
    torch._dynamo.reset()
    try:
        compiled = _logits(subject(torch.compile(subject.model, backend=backend)))
    finally:
        torch._dynamo.reset()
    generated = int(input_ids.shape[1]) - prompt_tokens
    reproduced, counting, first = 0, True, None
    for i in range(generated):
        at = prompt_tokens - 1 + i
        stored = int(input_ids[0, prompt_tokens + i])
        e, c = eager[0, at].double(), compiled[0, at].double()
        e_top, c_top = int(e.argmax()), int(c.argmax())
        counting = counting and e_top == stored
        reproduced += counting
        if first is None and e_top != c_top:
            first = TokenCheck(
                generated, 0, i, decode(stored), decode(e_top), decode(c_top),
                _rank(e, stored), _rank(c, stored), float(e[e_top] - e[c_top]),
            )  # fmt: skip
    if first is None:
        return TokenCheck(generated, reproduced)
    return dataclasses.replace(first, reproduced=reproduced)


def truncated(subject: Subject, length: int) -> Subject:
    """The subject on the first `length` tokens of its `input_ids` (and attention mask)."""
    kwargs = dict(subject.kwargs)
    for key in ("input_ids", "attention_mask"):
        if key in kwargs:
            kwargs[key] = kwargs[key][:, :length]
    return Subject(subject.model, subject.args, kwargs, subject.name)


def _rank(logits: Any, token: int) -> int:
    return int((logits > logits[token]).sum()) + 1


def _logits(output: Any) -> Any:
    """The [batch, positions, vocabulary] logits of a causal LM's output."""
    found = getattr(output, "logits", None)
    if found is not None:
        return found
    for tensor in leaves(output):
        if tensor.ndim == 3:
            return tensor
    raise ValueError("the model's output has no [batch, positions, vocabulary] logits")
