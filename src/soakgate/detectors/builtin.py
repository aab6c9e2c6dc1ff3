"""The built-in detectors: character runs, token-id runs, repeated-phrase loops, empty output."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from soakgate.detectors.base import Detection, DetectorConfig, register
from soakgate.detectors.runs import char_runs, longest_equal_run, longest_true_run

# Characters that people repeat on purpose: rules, underlines, box drawing, leader dots.
SEPARATORS = frozenset("-=_*#~.+|/\\<>:`'\"^") | frozenset(chr(c) for c in range(0x2500, 0x2580))


def char_class(char: str) -> str:
    """`whitespace`, `separator` or `other`: each class has its own run threshold."""
    if char.isspace():
        return "whitespace"
    return "separator" if char in SEPARATORS else "other"


def _threshold(config: DetectorConfig, klass: str) -> int:
    """The run length at which a run of this character class is flagged."""
    if klass == "whitespace":
        return config.whitespace_run_threshold
    if klass == "separator":
        return config.separator_run_threshold
    return config.char_run_threshold


@register("char_run")
def char_run(
    text: str,
    token_ids: Sequence[int] | None,
    completion_tokens: int | None,
    config: DetectorConfig,
) -> Detection:
    """Longest run of one repeated character; whitespace and separators get higher thresholds."""
    longest, start, long_runs = char_runs(text, config.char_run_threshold)
    if longest == 0:
        return Detection(0, False, {})
    evidence: dict[str, Any] = {"char": text[start], "length": longest, "start": start}
    if longest < min(config.char_run_threshold, config.separator_run_threshold):
        return Detection(longest, False, evidence)
    # Only a long run reaches here; longest first (stable: earliest first among equals).
    for run_start, length in sorted(long_runs, key=lambda run: -run[1]):
        char = text[run_start]
        klass = char_class(char)
        if length >= _threshold(config, klass):
            flagged = {"char": char, "length": length, "start": run_start}
            return Detection(longest, True, {**flagged, "class": klass})
    return Detection(longest, False, {**evidence, "class": char_class(evidence["char"])})


@register("token_run")
def token_run(
    text: str,
    token_ids: Sequence[int] | None,
    completion_tokens: int | None,
    config: DetectorConfig,
) -> Detection:
    """Longest run of one repeated token id; token id 0 (`!` in Qwen vocabularies) is stricter."""
    if not token_ids:
        return Detection(0, False, {"available": False})
    length, token, start = longest_equal_run(token_ids)
    threshold = config.token0_run_threshold if token == 0 else config.token_run_threshold
    zero_run = _longest_zero_run(token_ids) if token != 0 else length
    flagged = length >= threshold or zero_run >= config.token0_run_threshold
    evidence = {"token_id": token, "length": length, "start": start, "token0_run": zero_run}
    return Detection(length, flagged, evidence)


def _longest_zero_run(token_ids: Sequence[int]) -> int:
    """Longest run of token id 0 anywhere in the sequence."""
    return longest_true_run(np.asarray(token_ids, dtype=np.int64) == 0)[0]


@register("word_loop")
def word_loop(
    text: str,
    token_ids: Sequence[int] | None,
    completion_tokens: int | None,
    config: DetectorConfig,
) -> Detection:
    """Longest stretch of words repeating a phrase of at most `loop_max_period` words."""
    words = text.split()
    if len(words) < config.loop_min_words:
        return Detection(0, False, {})
    # Words compared by their 64-bit hash: map(hash) runs at C speed, unlike a vocabulary dict.
    ids = np.fromiter(map(hash, words), np.int64, len(words))
    best = (0, 0, -1)  # covered words, period, start
    for period in range(1, config.loop_max_period + 1):
        if period >= ids.shape[0]:
            break
        run, start = longest_true_run(ids[period:] == ids[:-period])
        covered = run + period if run else 0
        if covered > best[0]:
            best = (covered, period, start)
    covered, period, start = best
    repeats = covered / period if period else 0.0
    flagged = covered >= config.loop_min_words and repeats >= config.loop_min_repeats
    evidence: dict[str, Any] = {"period": period, "repeats": round(repeats, 1), "start_word": start}
    if covered:
        evidence["phrase"] = " ".join(words[start : start + period])[:200]
    return Detection(covered, flagged, evidence)


@register("empty")
def empty(
    text: str,
    token_ids: Sequence[int] | None,
    completion_tokens: int | None,
    config: DetectorConfig,
) -> Detection:
    """Blank text although the server reported generating tokens."""
    reported = completion_tokens if completion_tokens is not None else len(token_ids or ())
    blank = not text or text.isspace()
    flagged = blank and reported >= config.empty_min_tokens
    return Detection(float(reported if blank else 0), flagged, {"reported_tokens": reported})
