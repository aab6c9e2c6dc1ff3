"""Detectors: pure functions over one generation that return a score, a flag and evidence.

A detector is a function `(text, token_ids, completion_tokens, config) -> Detection`
registered by name in `REGISTRY`. `score_generation` applies a configured set of them.
"""

from soakgate.detectors import builtin as _builtin  # noqa: F401  (registers the detectors)
from soakgate.detectors.base import (
    DEFAULT_DETECTORS,
    REGISTRY,
    Detection,
    DetectorConfig,
    score_text,
)

__all__ = ["DEFAULT_DETECTORS", "REGISTRY", "Detection", "DetectorConfig", "score_text"]
