"""Detectors against brute-force references (hypothesis) and hand-made cases."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from soakgate.detectors import DetectorConfig, score_text
from soakgate.detectors.base import Output
from soakgate.detectors.builtin import char_run, empty, token_run, word_loop
from soakgate.detectors.runs import longest_equal_run, longest_ones, repeat_flags

CONFIG = DetectorConfig()


def brute_longest_run(text: str) -> int:
    """Reference: the longest run of one character, by grouping."""
    return max((len(list(group)) for _, group in itertools.groupby(text)), default=0)


@given(st.text(alphabet=st.characters(), max_size=300))
@settings(max_examples=300)
def test_char_run_score_equals_brute_force(text: str) -> None:
    assert char_run(Output(text, None, None), CONFIG).score == brute_longest_run(text)


@given(st.text(alphabet="ab!\n\x00\x7f", max_size=300) | st.text(max_size=300))
@settings(max_examples=300)
def test_repeat_flags_mark_exactly_the_repeated_neighbours(text: str) -> None:
    expected = bytes(int(a == b) for a, b in itertools.pairwise(text))
    assert repeat_flags(text) == expected


@given(st.text(alphabet="ab!\n -é😀", max_size=400))
@settings(max_examples=300)
def test_char_run_evidence_points_at_a_real_run(text: str) -> None:
    detection = char_run(Output(text, None, None), CONFIG)
    if text:
        start, length, char = (detection.evidence[k] for k in ("start", "length", "char"))
        assert text[start : start + length] == char * length


@given(st.lists(st.integers(0, 3), max_size=300) | st.lists(st.integers(1, 9), max_size=80))
def test_token0_run_is_the_longest_run_of_zeros(ids: list[int]) -> None:
    """With and without a zero anywhere (the detector answers "none" without an array when no
    token id is 0)."""
    expected = max((len(list(g)) for value, g in itertools.groupby(ids) if value == 0), default=0)
    detection = token_run(Output("", ids, None), CONFIG)
    assert detection.evidence.get("token0_run", 0) == expected


@given(st.lists(st.integers(0, 3), max_size=300))
def test_longest_equal_run_matches_groupby(ids: list[int]) -> None:
    runs = [(value, len(list(g))) for value, g in itertools.groupby(ids)]
    length = max((n for _, n in runs), default=0)
    first = next(((i, value) for i, (value, n) in enumerate(runs) if n == length), None)
    result = longest_equal_run(ids)
    assert result[0] == length
    if first is not None:  # the first longest run: its value and where it starts
        assert result[1] == first[1]
        assert result[2] == sum(n for _, n in runs[: first[0]])


def brute_longest_ones(bits: list[int], cap: int | None) -> tuple[int, int]:
    """Reference for longest_ones: every run listed, the first longest kept."""
    best, best_start, at = 0, -1, 0
    for value, group in itertools.groupby(bits):
        size = len(list(group))
        if value and min(size, cap or size) > best:
            best, best_start = min(size, cap or size), at
        at += size
    return best, best_start


@given(st.lists(st.integers(0, 1), max_size=400), st.none() | st.integers(1, 70))
@settings(max_examples=400)
def test_longest_ones_matches_brute_force(bits: list[int], cap: int | None) -> None:
    assert longest_ones(bytes(bits), cap) == brute_longest_ones(bits, cap)


@given(
    st.lists(st.tuples(st.integers(0, 1), st.integers(1, 9000)), max_size=6),
    st.none() | st.integers(1, 10000),
)
@settings(max_examples=60)
def test_longest_ones_matches_brute_force_on_long_runs(
    runs: list[tuple[int, int]], cap: int | None
) -> None:
    bits = [value for value, length in runs for _ in range(length)]
    assert longest_ones(bytes(bits), cap) == brute_longest_ones(bits, cap)


def brute_word_loop(words: list[str], max_period: int) -> tuple[int, int, int]:
    """Reference for word_loop: (covered words, period, start word) of the longest stretch in
    which every word equals the one `period` words before, over each period in turn."""
    best = (0, 0, -1)
    for period in range(1, max_period + 1):
        if period >= len(words):
            break
        matches = [int(words[i] == words[i + period]) for i in range(len(words) - period)]
        run, start = brute_longest_ones(matches, None)
        if run and run + period > best[0]:
            best = (run + period, period, start)
    return best


@given(st.lists(st.sampled_from(["a", "b", "c", "the", "cache"]), min_size=64, max_size=220))
@settings(max_examples=200)
def test_word_loop_matches_brute_force(words: list[str]) -> None:
    detection = word_loop(Output(" ".join(words), None, None), CONFIG)
    covered, period, start = brute_word_loop(words, CONFIG.loop_max_period)
    assert detection.score == covered
    assert detection.evidence["period"] == period
    assert detection.evidence["start_word"] == start


def test_bang_run_is_flagged_at_the_threshold_and_not_below() -> None:
    assert char_run(Output("ok " + "!" * 80, None, None), CONFIG).flagged
    assert not char_run(Output("ok " + "!" * 79, None, None), CONFIG).flagged
    strict = DetectorConfig(char_run_threshold=20)
    assert char_run(Output("!" * 20, None, None), strict).flagged


def test_whitespace_and_separator_runs_have_their_own_thresholds() -> None:
    indented = "def f():\n" + " " * 120 + "return 1\n"
    rule = "Title\n" + "-" * 120 + "\n"
    assert not char_run(Output(indented, None, None), CONFIG).flagged
    assert not char_run(Output(rule, None, None), CONFIG).flagged
    assert char_run(Output(" " * 400, None, None), CONFIG).flagged
    assert char_run(Output("=" * 160, None, None), CONFIG).flagged


def test_token_run_flags_token_zero_early_and_other_ids_late() -> None:
    assert token_run(Output("", [5, 0] + [0] * 15, None), CONFIG).flagged
    assert not token_run(Output("", [0] * 15, None), CONFIG).flagged
    assert not token_run(Output("", [7] * 63, None), CONFIG).flagged
    assert token_run(Output("", [7] * 64, None), CONFIG).flagged
    assert token_run(Output("", [7] * 20 + [0] * 16, None), CONFIG).evidence["token0_run"] == 16
    assert token_run(Output("x", None, None), CONFIG).evidence == {"available": False}


def test_word_loop_catches_repeated_phrases_but_not_prose() -> None:
    loop = "We start here. " + "the cache is " * 40
    assert word_loop(Output(loop, None, None), CONFIG).flagged
    assert word_loop(Output(loop, None, None), CONFIG).evidence["period"] == 3
    prose = " ".join(f"word{i}" for i in range(200))
    assert not word_loop(Output(prose, None, None), CONFIG).flagged


def test_empty_needs_reported_tokens() -> None:
    assert empty(Output("", None, 128), CONFIG).flagged
    assert empty(Output("  \n", None, 10), CONFIG).flagged
    assert not empty(Output("", None, 1), CONFIG).flagged  # a bare EOS
    assert not empty(Output("hello", None, 128), CONFIG).flagged


def test_score_text_applies_only_enabled_detectors() -> None:
    only = DetectorConfig(enabled=("char_run",))
    assert set(score_text("x", [1], 1, only)) == {"char_run"}
    assert set(score_text("x", [1], 1, CONFIG)) == {"char_run", "token_run", "word_loop", "empty"}


def test_config_round_trips_and_rejects_unknown_keys() -> None:
    import pytest

    from soakgate.errors import UsageError

    assert DetectorConfig.from_dict(CONFIG.to_dict()) == CONFIG
    with pytest.raises(UsageError):
        DetectorConfig.from_dict({"nope": 1})


def cut(text: str, tokens: int | None, max_tokens: int | None = None) -> Output:
    """An output that the token budget cut (`finish_reason` `length`)."""
    return Output(text, None, tokens, "length", max_tokens)


def test_a_bang_run_filling_half_of_a_cut_output_is_flagged_from_8_characters() -> None:
    prefix = "The answer is simply"  # 4 tokens of prose, then the collapse to the budget
    assert char_run(cut(prefix + "!" * 8, 16), CONFIG).flagged
    assert char_run(cut(prefix + "!" * 8, 16), CONFIG).evidence["tail"] is True
    assert not char_run(cut(prefix + "!" * 7, 14), CONFIG).flagged  # under 8 characters
    assert not char_run(cut(prefix + "!" * 9, 20), CONFIG).flagged  # under half the tokens
    assert not char_run(cut(prefix + "!" * 9 + ".", 16), CONFIG).flagged  # not at the end
    # the same text that stopped by itself is ordinary: `!!!!!!!!` in prose
    assert not char_run(Output(prefix + "!" * 8, None, 12, "stop"), CONFIG).flagged
    # no token count reported: the budget asked for stands in for it
    assert char_run(cut(prefix + "!" * 8, None, 16), CONFIG).flagged
    assert not char_run(cut(prefix + "!" * 8, None, 32), CONFIG).flagged
    assert not char_run(cut(prefix + "!" * 8, None, None), CONFIG).flagged


def test_tail_runs_of_letters_digits_whitespace_and_separators_are_left_to_the_thresholds() -> None:
    # tokenizers merge these (`xx`, `0000`, runs of spaces, `--------`): their characters are
    # not their tokens, and hex, URLs, indentation and rules are cut by budgets all the time
    for char in "x0 \n-=.語":
        assert not char_run(cut("Value: " + char * 12, 16), CONFIG).flagged, char
    for char in "!?)%,;":
        assert char_run(cut("Value: " + char * 12, 16), CONFIG).flagged, char


def test_a_word_loop_filling_half_of_a_cut_output_is_flagged_from_8_words() -> None:
    prose = "We begin with the cache"  # 5 words, then a loop to the budget
    loop = prose + " the model is ready" * 2  # period 4, twice: 8 words
    assert word_loop(cut(loop, 16), CONFIG).flagged
    assert word_loop(cut(loop, 16), CONFIG).evidence["period"] == 4
    assert word_loop(cut(prose + " cache" * 8, 16), CONFIG).evidence["repeats"] == 9  # + prose's
    assert not word_loop(Output(loop, None, 16, "stop"), CONFIG).flagged
    assert not word_loop(cut(prose + " the model" * 3, 16), CONFIG).flagged  # 6 words
    assert not word_loop(cut(prose * 3 + " the model is ready" * 2, 32), CONFIG).flagged  # < half
    assert not word_loop(cut(prose + " a b c d e f g h", 16), CONFIG).flagged  # no repeat
    # numbers and table rules repeat on purpose
    assert not word_loop(cut("weights = [" + "0.0, " * 12, 64), CONFIG).flagged
    assert not word_loop(cut("| a | b |\n" + "| --- " * 10, 32), CONFIG).flagged


def brute_tail_loop(words: list[str], max_period: int) -> tuple[int, int]:
    """Reference: (covered, period) of the longest stretch ending the words in which each word
    equals the one `period` before and the phrase occurs at least twice (first period wins)."""
    best = (0, 0)
    for period in range(1, max_period + 1):
        length = 0
        for size in range(2 * period, len(words) + 1):
            tail = words[len(words) - size :]
            if all(tail[i] == tail[i + period] for i in range(size - period)):
                length = size
        if length > best[0]:
            best = (length, period)
    return best


@st.composite
def prefix_and_loop(draw: st.DrawFn) -> list[str]:
    """A few random words, then a phrase of 1-8 words repeated, perhaps cut mid-phrase."""
    prefix = draw(st.lists(st.sampled_from("abcd"), max_size=8))
    phrase = draw(st.lists(st.sampled_from("abcde"), min_size=1, max_size=8))
    size = draw(st.integers(len(phrase) + 1, 6 * len(phrase)))
    return prefix + (phrase * 6)[:size]


@given(
    prefix_and_loop().filter(lambda words: len(words) >= 8)
    | st.lists(st.sampled_from("abc"), min_size=8, max_size=60)
)
@settings(max_examples=300)
def test_tail_loop_matches_brute_force(words: list[str]) -> None:
    covered, period = brute_tail_loop(words, CONFIG.loop_max_period)
    expected = covered >= max(8, 0.5 * len(words))
    detection = word_loop(cut(" ".join(words), len(words)), CONFIG)
    assert detection.flagged == expected
    if expected:
        assert (detection.score, detection.evidence["period"]) == (covered, period)


def test_a_period_seen_twice_wins_over_a_longer_one_seen_once_and_a_half() -> None:
    # a longer period matches more words from the end without holding its phrase twice
    detection = word_loop(cut("a c c a d e d e d e d d e d e d", 16), CONFIG)
    assert detection.flagged and (detection.score, detection.evidence["period"]) == (10, 5)


def test_budget_warning_names_each_detector_that_needs_more_tokens() -> None:
    from soakgate.detectors import budget_warning

    assert budget_warning(CONFIG, 16) is None and budget_warning(CONFIG, 4096) is None
    warning = budget_warning(CONFIG, 15) or ""
    assert warning.startswith("--max-tokens 15 is below what the detectors need: ")
    assert "char_run needs >= 16" in warning and "word_loop needs >= 16" in warning
    assert "token_run needs >= 16" in warning and "empty" not in warning
    assert "empty needs >= 4" in (budget_warning(CONFIG, 3) or "")
    only = DetectorConfig(enabled=("empty",))
    assert budget_warning(only, 8) is None  # only the enabled detectors count
    looser = DetectorConfig(tail_min_run=4, tail_min_words=4, token0_run_threshold=8)
    assert budget_warning(looser, 8) is None


def test_a_separator_run_that_fills_a_cut_output_is_flagged_as_punctuation_runs_are() -> None:
    # issue 29: `^^^^`, `----`, `====`, `~~~~` to the budget were left to the 160 threshold
    for char in "^-=~_*#":
        for budget in (16, 24, 32):
            flagged = char_run(cut(char * budget, budget), CONFIG)
            assert flagged.flagged and flagged.evidence["class"] == "separator", (char, budget)
            assert flagged.evidence["tail"] is True
            assert char_run(cut("\n" + char * budget + "\n", budget), CONFIG).flagged is False
        assert char_run(cut("\n\n" + char * 24, 24), CONFIG).flagged  # whitespace around aside
        assert char_run(cut("A " + char * 24, 24), CONFIG).flagged  # 24 of 26: nearly whole
        # a rule or underline cut by the budget follows text: left to the thresholds
        assert not char_run(cut("Results\n" + char * 24, 24), CONFIG).flagged, char
        assert not char_run(cut(char * 24, 24)._replace(finish_reason="stop"), CONFIG).flagged
    # box drawing ends cut tables, dots lead and think (`Hmm....`): never judged by the tail
    assert not char_run(cut("─" * 24, 24), CONFIG).flagged
    assert not char_run(cut("." * 24, 24), CONFIG).flagged


@pytest.mark.parametrize("name", ["table", "wide_table", "code", "markdown_rules", "box_drawing",
                                  "leader_dots", "ellipsis", "csv"])  # fmt: skip
def test_ordinary_output_cut_anywhere_by_the_budget_is_not_a_separator_collapse(name: str) -> None:
    """Every prefix of an ordinary output, as if the budget cut it there (about 4 characters a
    token, the budget at least 16): no separator run is flagged by the tail rule."""
    from tests.detectors.ordinary_corpus import CORPUS

    text = CORPUS[name]
    for end in range(1, len(text) + 1):
        piece = text[:end]
        found = char_run(cut(piece, max(16, end // 4)), CONFIG)
        assert not (found.flagged and found.evidence.get("class") == "separator"), (end, piece)
