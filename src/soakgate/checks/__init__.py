"""Integrity checks of every answer: answers that carry what belongs to another request
(`crosstalk`), answers that break the structure their request asked for (`invalid_structure`),
numbers no correct server returns (`inconsistent`).

A check sees every request as it is sent (`sent`), every clean answer as its row is made
(`answered`) and every batch of rows before it is scored (`judge`: the crosstalk check judges
there, a batch at a time); a failed check names itself in `Generation.checks`
(`records.CHECKS`), with its evidence in `details[name]`. A failed check is an outcome of its
own, never a collapse.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from soakgate.checks.canary import Canaries
from soakgate.checks.crosstalk import CROSSTALK, Crosstalk, CrosstalkSettings, open_crosstalk
from soakgate.checks.numbers import INCONSISTENT, NumbersCheck, open_numbers
from soakgate.checks.structure import INVALID_STRUCTURE, StructureCheck, open_structure
from soakgate.load.spec import AnswerCheck
from soakgate.prompts import Prompt
from soakgate.records import Generation, Run


class AnswerChecks:
    """Several answer checks as one (`load.spec.AnswerCheck`): each sees the prompt as the one
    before it made it, and every answer."""

    def __init__(self, checks: Sequence[AnswerCheck]) -> None:
        self.checks = tuple(checks)

    def sent(self, seq: int, prompt: Prompt, same_as: int | None = None) -> Prompt:
        for check in self.checks:
            prompt = check.sent(seq, prompt, same_as)
        return prompt

    def answered(self, generation: Generation, outcome: Any = None) -> None:
        for check in self.checks:
            check.answered(generation, outcome)

    def judge(self, generations: Sequence[Generation]) -> None:
        for check in self.checks:
            check.judge(generations)


def open_answer_checks(
    crosstalk: CrosstalkSettings, structured: bool, numbers: float | None, run: Run,
    resumed: bool,
) -> AnswerChecks:  # fmt: skip
    """The run's answer checks (a `load.spec.OpenAnswerCheck` once the first three are bound):
    crosstalk always, the structure check where some prompt is structured, the numbers check
    where log-probabilities are asked for (`numbers`: the run's temperature; None: not asked)."""
    checks: list[AnswerCheck] = [open_crosstalk(crosstalk, run, resumed)]
    if structured:
        checks.append(open_structure(run, resumed))
    if numbers is not None:
        checks.append(open_numbers(numbers, run, resumed))
    return AnswerChecks(checks)


__all__ = [
    "CROSSTALK",
    "INCONSISTENT",
    "INVALID_STRUCTURE",
    "AnswerChecks",
    "Canaries",
    "Crosstalk",
    "CrosstalkSettings",
    "NumbersCheck",
    "StructureCheck",
    "open_answer_checks",
    "open_crosstalk",
    "open_numbers",
    "open_structure",
]
