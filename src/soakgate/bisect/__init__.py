"""`soakgate bisect`: where a torch.compile'd model first departs from eager.

One eager run of the model is the reference (traced op by op). PyTorch's CompilerBisector then
finds the first failing compiler stage (`stages`), forward hooks the first divergent module
compiled at that stage (`modules`), and the ops of eager against the stage's graph the custom
op that disappeared (`ops`). `bisect_model` returns one `Finding`, printed as one line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from soakgate.bisect.compare import Tolerance
from soakgate.bisect.model import Subject
from soakgate.bisect.modules import Divergence
from soakgate.bisect.ops import MissingOp
from soakgate.bisect.stages import Stage


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

    @property
    def diverges(self) -> bool:
        """Whether any stage departs from eager (a finding: exit 1)."""
        return self.stage.backend is not None

    def line(self) -> str:
        """`first divergent module: ...; first failing stage: ...; missing op: ...`."""
        missing = "; ".join(m.describe() for m in self.missing) or "none"
        if self.ops_unknown:
            missing = "unknown (the failing stage's graph could not be captured)"
        if not self.diverges:
            return f"no divergence: compiled matches eager at every stage (missing op: {missing})"
        return (
            f"first divergent module: {self.module.describe()}; first failing stage: "
            f"{self.stage.describe()}; missing op: {missing}"
        )


def bisect_model(
    subject: Subject, tolerance: Tolerance | None = None, log: Callable[[str], None] | None = None
) -> Finding:
    """Bisect `subject` eager against torch.compile; BisectError when eager itself fails."""
    from soakgate.bisect.model import leaves
    from soakgate.bisect.modules import first_divergent_module
    from soakgate.bisect.ops import capture_graphs, eager_ops, graph_ops, missing_custom_ops
    from soakgate.bisect.stages import first_failing_stage
    from soakgate.errors import BisectError

    tolerance = tolerance or Tolerance()
    say = log or (lambda _line: None)
    try:
        expected = [t.detach().clone() for t in leaves(subject())]
        traced = eager_ops(subject)
    except Exception as exc:
        raise BisectError(f"the model fails eagerly: {type(exc).__name__}: {exc}") from None
    if not expected:
        raise BisectError(f"{subject.name} returned no tensor to compare")
    stage = first_failing_stage(subject, expected, tolerance, say)
    if stage.backend is None:
        return Finding(stage, Divergence(None), (), 0.0)
    say(f"bisect: looking for the first divergent module under {stage.backend}")
    try:
        module = first_divergent_module(subject, stage.backend, tolerance)
    except Exception as exc:  # hooks the compiler cannot trace: the other answers still stand
        module = Divergence(None, failed=f"{type(exc).__name__}: {str(exc)[:160]}")
    try:
        graph = graph_ops(capture_graphs(subject, stage.backend))
    except Exception as exc:
        say(f"bisect: the {stage.backend} graph could not be captured: {exc}")
        return Finding(stage, module, (), module.worst, ops_unknown=True)
    return Finding(stage, module, tuple(missing_custom_ops(traced, graph)), module.worst)
