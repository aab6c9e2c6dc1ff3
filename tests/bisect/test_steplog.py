"""`bisect`'s progress on stderr (issue 30 item 7): every step with --verbose, otherwise a line
when --progress-every has passed since the last, none with 0."""

from __future__ import annotations

import io

from soakgate.bisect.stages import StepLog


def test_verbose_prints_every_step_as_it_is() -> None:
    out = io.StringIO()
    log = StepLog(True, 60.0, out)
    for step in ("bisect: eager : matches eager", "bisect: inductor : differs"):
        log(step)
    assert out.getvalue().splitlines() == ["bisect: eager : matches eager",
                                           "bisect: inductor : differs"]  # fmt: skip


def test_progress_lines_count_the_steps_and_zero_means_none() -> None:
    out, silent = io.StringIO(), io.StringIO()
    every, never = StepLog(False, 1e-9, out), StepLog(False, 0.0, silent)
    for n in range(3):
        every(f"bisect: step {n}")
        never(f"bisect: step {n}")
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and lines[-1].startswith("soakgate: ")
    assert lines[-1].endswith("elapsed, 3 steps: bisect: step 2")
    assert silent.getvalue() == "" and never.steps == 3
