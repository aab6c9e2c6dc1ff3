"""`soakgate bisect`: where a torch.compile'd model first departs from eager.

One eager run of the model is the reference (traced op by op). With a stored generation
appended to the prompt (`--from-db`), the soak's own question comes first (`tokens`): at which
generated position does the compiled model's top token leave eager's; the rest is then asked of
the input up to that position. PyTorch's CompilerBisector finds the first failing compiler stage
(`stages`), forward hooks the first divergent module compiled at that stage (`modules`), and the
ops of eager against the stage's graph the custom op that disappeared (`ops`). `bisect_model`
returns one `Finding`, printed as one line, and a line with the tolerance and eager's own
rounding noise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from soakgate.bisect.compare import Tolerance
from soakgate.bisect.model import Subject
from soakgate.bisect.modules import Divergence
from soakgate.bisect.ops import MissingOp
from soakgate.bisect.stages import Stage
from soakgate.bisect.tokens import Noise, TokenCheck


@dataclass(frozen=True, slots=True)
class Finding:
    """What `soakgate bisect` found."""

    stage: Stage
    module: Divergence
    missing: tuple[MissingOp, ...]
    worst: float
    """The largest |eager - compiled| of the first divergent module's output."""
    ops_unknown: bool = False
    """The failing stage's graph could not be captured, so missing ops are not known."""
    tolerance: Tolerance = field(default_factory=Tolerance)
    dtype: str = "float32"
    noise: Noise | None = None
    tokens: TokenCheck | None = None
    """The stored generation's check, with `--from-db`."""

    @property
    def diverges(self) -> bool:
        """Whether any stage departs from eager, or compiled's tokens leave eager's beyond a
        near tie (a finding: exit 1)."""
        token_departs = self.tokens is not None and self.tokens.real(self.noise)
        return self.stage.backend is not None or token_departs

    def line(self) -> str:
        """`[first divergent token: ...; ]first divergent module: ...; first failing stage: ...;
        missing op: ...`."""
        missing = "; ".join(m.describe() for m in self.missing) or "none"
        if self.ops_unknown:
            missing = "unknown (the failing stage's graph could not be captured)"
        token = "" if self.tokens is None else self.tokens.describe(self.noise) + "; "
        if self.stage.backend is None:
            return (f"{token}no divergence: compiled matches eager at every stage within "
                    f"tolerance (missing op: {missing})")  # fmt: skip
        return (
            f"{token}first divergent module: {self.module.describe()}; first failing stage: "
            f"{self.stage.describe()}; missing op: {missing}"
        )

    def tolerance_line(self) -> str:
        """The elementwise tolerance used, and eager's own rounding noise beside it."""
        noise = "eager's own rounding noise not measured (no wider dtype ran)"
        if self.noise is not None:
            noise = self.noise.describe()
        return (f"tolerance: rtol {self.tolerance.rtol:g}, atol {self.tolerance.atol:g} "
                f"({self.dtype}); {noise}")  # fmt: skip


def bisect_model(
    subject: Subject, tolerance: Tolerance | None = None, log: Callable[[str], None] | None = None,
    backend: Any = "inductor",
) -> Finding:  # fmt: skip
    """Bisect `subject` eager against torch.compile; BisectError when eager itself fails.
    `tolerance` None: the default of the model's dtype. `backend`: what the model is compiled
    with (torch.compile's default, or a custom backend callable, kept at the bisector's inductor
    stage); with a stored generation on the subject, its tokens are checked first under it."""
    from soakgate.bisect.model import leaves
    from soakgate.bisect.modules import first_divergent_module
    from soakgate.bisect.ops import capture_graphs, eager_ops, graph_ops, missing_custom_ops
    from soakgate.bisect.stages import first_failing_stage
    from soakgate.bisect.tokens import (
        check_tokens,
        model_dtype,
        rounding_noise,
        tolerance_for,
        truncated,
    )
    from soakgate.errors import BisectError

    dtype = model_dtype(subject)
    tolerance = tolerance or tolerance_for(dtype)
    say = log or (lambda _line: None)
    try:
        eager = subject()  # once: the noise, the token check and the comparisons all use it
    except Exception as exc:
        raise BisectError(f"the model fails eagerly: {type(exc).__name__}: {exc}") from None
    noise = rounding_noise(subject, eager)
    tokens = None
    if subject.prompt_tokens is not None:
        say(f"bisect: checking the stored generation's tokens under {backend}")
        decode = subject.decode or str
        tokens = check_tokens(subject, eager, backend, subject.prompt_tokens, decode)
        if tokens.position is not None:  # ask the rest of the input up to that position
            subject = truncated(subject, subject.prompt_tokens + tokens.position)
            eager = None

    def found(stage: Stage, module: Divergence, missing: tuple[MissingOp, ...] = (),
              unknown: bool = False) -> Finding:  # fmt: skip
        return Finding(stage, module, missing, module.worst, unknown, tolerance, dtype, noise,
                       tokens)  # fmt: skip

    try:
        expected = [t.detach().clone() for t in leaves(subject() if eager is None else eager)]
        traced = eager_ops(subject)
    except Exception as exc:
        raise BisectError(f"the model fails eagerly: {type(exc).__name__}: {exc}") from None
    if not expected:
        raise BisectError(f"{subject.name} returned no tensor to compare")
    custom = None if isinstance(backend, str) else backend
    stage = first_failing_stage(subject, expected, tolerance, say, custom)
    if stage.backend is None:
        return found(stage, Divergence(None))
    kept = custom if custom is not None and stage.backend == "inductor" else None
    say(f"bisect: looking for the first divergent module under {stage.backend}")
    try:
        module = first_divergent_module(subject, kept or stage.backend, tolerance)
    except Exception as exc:  # hooks the compiler cannot trace: the other answers still stand
        module = Divergence(None, failed=f"{type(exc).__name__}: {str(exc)[:160]}")
    try:
        graph = graph_ops(capture_graphs(subject, stage.backend, kept))
    except Exception as exc:
        say(f"bisect: the {stage.backend} graph could not be captured: {exc}")
        return found(stage, module, unknown=True)
    return found(stage, module, tuple(missing_custom_ops(traced, graph)))
