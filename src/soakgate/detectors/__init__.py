"""Detectors: pure functions over one generation that return a score, a flag and evidence.

A detector is a function `(output, config) -> Detection` registered by name in `REGISTRY`;
`output` holds the text, token ids, token count, finish reason and token budget.
`score_text` applies a configured set of them; `budget_warning` says when a token budget is
too small for them; `char_runs_many` measures a batch's character runs for `char_run` at once.
"""

from soakgate.detectors import builtin as _builtin  # noqa: F401  (registers the detectors)
from soakgate.detectors.base import (
    DEFAULT_DETECTORS,
    REGISTRY,
    Detection,
    DetectorConfig,
    Output,
    budget_warning,
    score_text,
)
from soakgate.detectors.runs import CharRunSummary, char_runs_many

__all__ = [
    "DEFAULT_DETECTORS", "REGISTRY", "CharRunSummary", "Detection", "DetectorConfig", "Output",
    "budget_warning", "char_runs_many", "score_text",
]  # fmt: skip
