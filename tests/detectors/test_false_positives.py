"""The default detector set flags no ordinary output and every synthetic collapse."""

from __future__ import annotations

import pytest
from tests.detectors.ordinary_corpus import CORPUS

from soakgate.detectors import DetectorConfig, score_text

CONFIG = DetectorConfig()


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_ordinary_output_is_not_flagged(name: str) -> None:
    text = CORPUS[name]
    reported = 1 if not text else len(text) // 4
    flagged = {
        k: d.evidence for k, d in score_text(text, None, reported, CONFIG).items() if d.flagged
    }
    assert flagged == {}


COLLAPSES = {
    "bang_run": ("The answer is" + "!" * 100, [11, 12] + [0] * 100),
    "bang_run_text_only": ("Sure, " + "!" * 90, None),
    "token0_short_text": ("Sure" + "!" * 20, [5] + [0] * 20),
    "word_loop": ("First, " + "the model the model " * 40, None),
    "single_word_loop": ("A " + "cache " * 80, None),
    "empty": ("", [3] * 128),
    "letter_run": ("x" * 200, None),
}


@pytest.mark.parametrize("name", sorted(COLLAPSES))
def test_synthetic_collapses_are_flagged(name: str) -> None:
    text, ids = COLLAPSES[name]
    reported = len(ids) if ids else 128
    assert any(d.flagged for d in score_text(text, ids, reported, CONFIG).values())
