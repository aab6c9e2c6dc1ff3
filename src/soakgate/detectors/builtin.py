"""The built-in detectors: character runs, token-id runs, repeated-phrase loops, empty output.

A degenerate model does not stop: its run or loop goes on to the end of the token budget. So
in an output that the budget cut (`finish_reason` `length`) a run or loop that reaches the end
and covers at least `tail_fraction` of it is flagged however short the budget, where the
absolute thresholds would need 80 characters or 64 words.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from soakgate.detectors.base import Detection, DetectorConfig, Output, register
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


def _tail_budget_need(config: DetectorConfig, smallest: int) -> int:
    """The least budget at which a tail of `tail_fraction` of it is `smallest` long."""
    return max(smallest, math.ceil(smallest / config.tail_fraction))


def _char_run_needs(config: DetectorConfig) -> tuple[int, str]:
    return _tail_budget_need(config, config.tail_min_run), (
        f"a run must fill {config.tail_fraction:.0%} of a cut output and be >= "
        f"{config.tail_min_run} characters"
    )


@register("char_run", needs=_char_run_needs)
def char_run(output: Output, config: DetectorConfig) -> Detection:
    """Longest run of one repeated character; whitespace and separators get higher thresholds.
    In an output cut by its budget, also a run of a punctuation or symbol character that reaches
    the end and covers `tail_fraction` of its tokens (one per character, as a token-0 run has)."""
    text = output.text
    measured = output.char_runs
    longest, start, long_runs = measured or char_runs(text, config.char_run_threshold)
    if longest == 0:
        return Detection(0, False, {})
    evidence: dict[str, Any] = {"char": text[start], "length": longest, "start": start}
    if longest < min(config.char_run_threshold, config.separator_run_threshold):
        tail = _tail_char_run(text, output.budget_tokens, config)
        return Detection(longest, True, tail) if tail else Detection(longest, False, evidence)
    # Only a long run reaches here; longest first (stable: earliest first among equals).
    for run_start, length in sorted(long_runs, key=lambda run: -run[1]):
        char = text[run_start]
        klass = char_class(char)
        if length >= _threshold(config, klass):
            flagged = {"char": char, "length": length, "start": run_start}
            return Detection(longest, True, {**flagged, "class": klass})
    tail = _tail_char_run(text, output.budget_tokens, config)
    if tail:
        return Detection(longest, True, tail)
    return Detection(longest, False, {**evidence, "class": char_class(evidence["char"])})


def _tail_char_run(text: str, budget_tokens: int | None, config: DetectorConfig) -> dict[str, Any]:
    """Evidence of a run of one punctuation or symbol character (`!`, `?`, `)`, ...) that ends a
    cut output and fills at least `tail_fraction` of its tokens counted as one per character;
    {} when there is none. Letters and digits are left out (tokenizers merge their runs, `xx`,
    `0000`, so counting characters overstates their tokens, and hex and URLs repeat them), and
    so are whitespace, box drawing and dots (indentation, tables, leader dots and a thinking
    `Hmm.....` cut by the budget are ordinary): their runs are judged by the thresholds alone.
    Another ASCII separator (`^`, `-`, `=`, ...) is judged so only when its run is also (nearly)
    the whole output (`tail_separator_whole`): a rule or an underline cut by the budget follows
    text, a collapse fills the budget."""
    if budget_tokens is None or len(text) < config.tail_min_run:
        return {}
    last = text[-1]
    if text[-config.tail_min_run] != last or last.isalnum():
        return {}
    klass = char_class(last)
    if klass == "whitespace" or (klass == "separator" and (not last.isascii() or last == ".")):
        return {}
    length = len(text) - len(text.rstrip(last))
    if length < config.tail_min_run or length < config.tail_fraction * budget_tokens:
        return {}
    if klass == "separator" and length < config.tail_separator_whole * len(text.strip()):
        return {}
    start = len(text) - length
    return {"char": last, "length": length, "start": start, "class": klass, "tail": True,
            "budget_tokens": budget_tokens}  # fmt: skip


def _token_run_needs(config: DetectorConfig) -> tuple[int, str]:
    return (
        config.token0_run_threshold,
        f"a run of token id 0 must be >= {config.token0_run_threshold}",
    )


@register("token_run", needs=_token_run_needs)
def token_run(output: Output, config: DetectorConfig) -> Detection:
    """Longest run of one repeated token id; token id 0 (`!` in Qwen vocabularies) is stricter."""
    token_ids = output.token_ids
    if not token_ids:
        return Detection(0, False, {"available": False})
    length, token, start = longest_equal_run(token_ids)
    threshold = config.token0_run_threshold if token == 0 else config.token_run_threshold
    zero_run = _longest_zero_run(token_ids) if token != 0 else length
    flagged = length >= threshold or zero_run >= config.token0_run_threshold
    evidence = {"token_id": token, "length": length, "start": start, "token0_run": zero_run}
    return Detection(length, flagged, evidence)


def _longest_zero_run(token_ids: Sequence[int]) -> int:
    """Longest run of token id 0 anywhere in the sequence (most have none: a membership test
    at C speed, 1/60 of building the array, answers that)."""
    if 0 not in token_ids:
        return 0
    return longest_true_run(np.asarray(token_ids, dtype=np.int64) == 0)[0]


def _word_loop_needs(config: DetectorConfig) -> tuple[int, str]:
    return _tail_budget_need(config, config.tail_min_words), (
        f"a loop must fill {config.tail_fraction:.0%} of a cut output and cover >= "
        f"{config.tail_min_words} words"
    )


@register("word_loop", needs=_word_loop_needs)
def word_loop(output: Output, config: DetectorConfig) -> Detection:
    """Longest stretch of words repeating a phrase of at most `loop_max_period` words; in an
    output cut by its budget, also a loop that reaches the end and covers `tail_fraction` of
    its words."""
    words = output.text.split()
    cut = output.finish_reason == "length"
    if len(words) < config.loop_min_words:
        if cut and len(words) >= config.tail_min_words:
            return _tail_loop(words, config) or Detection(0, False, {})
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
    if not flagged and cut:
        tail = _tail_loop(words, config)
        if tail is not None:
            return Detection(covered, True, tail.evidence)
    evidence: dict[str, Any] = {"period": period, "repeats": round(repeats, 1), "start_word": start}
    if covered:
        evidence["phrase"] = " ".join(words[start : start + period])[:200]
    return Detection(covered, flagged, evidence)


def _tail_loop(words: list[str], config: DetectorConfig) -> Detection | None:
    """A loop that ends the words, repeats its phrase at least twice, covers at least
    `tail_min_words` and `tail_fraction` of the words, and has letters in its phrase (lists of
    numbers and table rules repeat on purpose); None when there is none.

    Plain Python from the end: ordinary text breaks off after a comparison or two per period."""
    count, best = len(words), (0, 0)  # covered words, period
    if words[-1] not in words[-1 - config.loop_max_period : -1]:
        return None  # most ordinary text: its last word is not among the few before it
    for period in range(1, min(config.loop_max_period, count // 2) + 1):
        matched = 0
        while matched < count - period and words[-1 - matched] == words[-1 - matched - period]:
            matched += 1
        if matched >= period and matched + period > best[0]:  # the phrase twice, at least
            best = (matched + period, period)
    covered, period = best
    if covered < max(config.tail_min_words, config.tail_fraction * count):
        return None
    phrase = words[count - period :]
    if not any(char.isalpha() for word in phrase for char in word):
        return None
    evidence = {
        "period": period, "repeats": round(covered / period, 1), "start_word": count - covered,
        "phrase": " ".join(phrase)[:200], "tail": True,
    }  # fmt: skip
    return Detection(covered, True, evidence)


def _empty_needs(config: DetectorConfig) -> tuple[int, str]:
    return (
        config.empty_min_tokens,
        f"a blank output must report >= {config.empty_min_tokens} tokens",
    )


@register("empty", needs=_empty_needs)
def empty(output: Output, config: DetectorConfig) -> Detection:
    """Blank text although the server reported generating tokens."""
    text, completion_tokens = output.text, output.completion_tokens
    reported = completion_tokens if completion_tokens is not None else len(output.token_ids or ())
    blank = not text or text.isspace()
    flagged = blank and reported >= config.empty_min_tokens
    return Detection(float(reported if blank else 0), flagged, {"reported_tokens": reported})
