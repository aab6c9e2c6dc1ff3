"""The first failing compiler stage, found by PyTorch's own `CompilerBisector`.

`torch._inductor.compiler_bisector.CompilerBisector.do_bisect(fn)` compiles again and again: the
backends `eager` (Dynamo's graph only), `aot_eager` (AOTAutograd: functionalization), then
`aot_eager_decomp_partition` (decompositions, partitioner) and its fake-tensor cross-check, then
`inductor`; inside the first failing backend it disables subsystems (pre-grad, joint-graph and
post-grad passes, config changes, lowerings) and bisects over their applications. `fn` here is
soakgate's check: the compiled model's outputs within tolerance of eager's.

Read against torch 2.13's source: `do_bisect` takes a check without arguments, `get_backend()`
and `get_subsystem()` say what is being tried, and the result carries `backend`, `subsystem`,
`bisect_number` and `debug_info`. A user's custom inductor passes (`post_grad_custom_post_pass`
and the other `*_custom_*pass` settings) already run as applications of their phase's
subsystem there (`post_grad_passes` for the post-grad ones), so the bisector names them itself.
It prints its progress on stdout: kept for `--verbose`, never mixed into the finding.
"""

from __future__ import annotations

import contextlib
import io
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from soakgate.bisect.compare import Difference, Tolerance, compare
from soakgate.bisect.model import Subject, leaves

STAGE_MEANING = {
    "eager": "Dynamo graph capture",
    "aot_eager": "AOTAutograd: functionalization",
    "aot_eager_decomp_partition": "decompositions and partitioner",
    "aot_eager_decomp_partition_crossref": "fake-tensor cross-check",
    "inductor": "inductor",
}


@dataclass(frozen=True, slots=True)
class Stage:
    """The bisector's answer: the first backend that fails, and inside it what fixes it."""

    backend: str | None
    """None when every backend matches eager."""
    subsystem: str | None = None
    """The subsystem whose disabling fixes it (`post_grad_passes`, `decomposition`, ...)."""
    application: int | None = None
    """Which application of the subsystem breaks it (0-based), where it was bisected."""
    detail: str | None = None
    """What that application was (the pass's name, the decomposed op)."""
    error: str | None = None
    """The exception compiling or running at that backend raised, if it raised."""
    compiles: int = 0
    """How many times the bisector compiled the model."""

    def describe(self) -> str:
        """`aot_eager (AOTAutograd: functionalization)`, `inductor (post_grad_passes: X, ...)`."""
        if self.backend is None:
            return "none (every stage matches eager)"
        inner = STAGE_MEANING.get(self.backend, self.backend)
        if self.subsystem is not None:
            inner = self.subsystem
            if self.detail and self.detail != self.subsystem:
                inner += f": {self.detail}"
            if self.application:
                inner += f", application {self.application}"
        if self.error:
            inner += f"; raised {self.error}"
        return f"{self.backend} ({inner})"


def first_failing_stage(
    subject: Subject, expected: list[Any], tolerance: Tolerance, log: Callable[[str], None],
    custom: Any = None,
) -> Stage:  # fmt: skip
    """Run the bisector over the compile stack with soakgate's comparison as its check. With a
    `custom` backend (a callable), the model is compiled with it, and the bisector keeps it at
    its inductor stage (torch's `bisect_keep_custom_backend_for_inductor`): the backend's own
    use of inductor (its passes, as vLLM's backend installs them) is bisected."""
    import torch
    import torch._inductor.config as inductor_config
    from torch._inductor.compiler_bisector import CompilerBisector

    errors: dict[str, str] = {}
    calls = [0]

    def check() -> bool:
        calls[0] += 1
        backend = CompilerBisector.get_backend() or "inductor"
        difference = run_compiled(subject, expected, tolerance, backend=custom)
        if difference.reason.startswith("raised"):
            errors.setdefault(backend, difference.reason.removeprefix("raised "))
        log(f"bisect: {backend} {CompilerBisector.get_subsystem() or ''}: "
            f"{'matches eager' if difference.matches else difference.reason}")  # fmt: skip
        return difference.matches

    output = io.StringIO()
    keep = {"test_configs.bisect_keep_custom_backend_for_inductor": custom is not None}
    with contextlib.redirect_stdout(output), inductor_config.patch(keep):
        result = CompilerBisector.do_bisect(check)
    for line in output.getvalue().splitlines():
        log(f"bisect: {line}")
    torch._dynamo.reset()
    if result is None:
        return Stage(None, compiles=calls[0])
    subsystem = result.subsystem
    return Stage(
        result.backend, subsystem, result.bisect_number if subsystem else None,
        result.debug_info, errors.get(result.backend), calls[0],
    )  # fmt: skip


def run_compiled(
    subject: Subject, expected: list[Any], tolerance: Tolerance, backend: Any
) -> Difference:
    """Compile afresh (`backend` None: torch.compile's default; the bisector overrides either
    with the backend under test, a custom one only before its inductor stage), run on the
    inputs, compare with eager."""
    import torch

    torch._dynamo.reset()
    try:
        compiled = torch.compile(subject.model) if backend is None else torch.compile(
            subject.model, backend=backend
        )  # fmt: skip
        actual = leaves(subject(compiled))
    except Exception as exc:  # a stage that cannot compile or run the model fails the check
        return Difference(False, float("inf"), f"raised {type(exc).__name__}: {str(exc)[:200]}")
    return compare(expected, actual, tolerance)


class StepLog:
    """What `bisect` prints of its steps on stderr: every step with `--verbose`; otherwise a
    progress line when `every_s` has passed since the last (`soakgate: bisect: 312 s elapsed,
    41 steps: <the step>`), so a bisect that compiles for an hour is not silent in a CI log."""

    def __init__(self, verbose: bool, every_s: float, stream: Any = None) -> None:
        self.verbose, self.every_s = verbose, every_s
        self.stream = stream if stream is not None else sys.stderr
        self.steps = 0
        self._start = time.monotonic()
        self._next = self._start + every_s

    def __call__(self, line: str) -> None:
        self.steps += 1
        if self.verbose:
            print(line, file=self.stream, flush=True)
            return
        now = time.monotonic()
        if self.every_s and now >= self._next:
            self._next = now + self.every_s
            elapsed = now - self._start
            print(f"soakgate: {elapsed:.0f} s elapsed, {self.steps} steps: {line}",
                  file=self.stream, flush=True)  # fmt: skip
