"""The clean control must look ordinary, and degenerate outputs must look like real collapses."""

from __future__ import annotations

import random
from itertools import groupby

from soakgate.mockserver.inject import degenerate, perturb
from soakgate.mockserver.text import (
    BANG_ID,
    CORPUS_IDS,
    CORPUS_TEXT,
    EMPTY_ID,
    VOCAB,
    WORD_IDS,
    clean_tokens,
    detokenize,
    prompt_token_count,
    prompt_token_ids,
)


def longest_run(text: str) -> int:
    return max((len(list(group)) for _, group in groupby(text)), default=0)


def test_vocabulary_has_bang_at_id_zero_and_a_few_hundred_pieces() -> None:
    assert VOCAB[BANG_ID] == "!"
    assert VOCAB[EMPTY_ID] == ""
    assert 200 <= len(VOCAB) <= 600
    assert len(set(VOCAB)) == len(VOCAB)


def test_corpus_text_matches_its_token_ids() -> None:
    assert detokenize(CORPUS_IDS) == CORPUS_TEXT


def test_ordinary_output_has_no_long_character_runs_and_rarely_bang() -> None:
    assert longest_run(CORPUS_TEXT) <= 3
    assert CORPUS_IDS.count(BANG_ID) / len(CORPUS_IDS) < 0.005
    assert EMPTY_ID not in CORPUS_IDS


def test_ordinary_output_has_no_repeated_phrase_loops() -> None:
    # A loop is a phrase of 1-4 tokens repeated back to back three times.
    ids = CORPUS_IDS
    for width in range(1, 5):
        loops = sum(
            ids[i : i + width]
            == ids[i + width : i + 2 * width]
            == ids[i + 2 * width : i + 3 * width]
            for i in range(0, len(ids) - 3 * width)
        )
        assert loops == 0, width


def test_clean_tokens_are_prefix_stable_and_wrap_around() -> None:
    short_ids, short_text = clean_tokens(100, 10)
    long_ids, long_text = clean_tokens(100, 50)
    assert long_ids[:10] == short_ids and long_text.startswith(short_text)
    ids, text = clean_tokens(len(CORPUS_IDS) - 5, 20)
    assert len(ids) == 20 and text == detokenize(ids)


def test_bang_run_has_a_tail_of_at_least_100_token_zero() -> None:
    rng = random.Random(1)
    for _ in range(50):
        clean, text = clean_tokens(rng.randrange(1000), 128)
        ids, out = degenerate("bang_run", clean, text, rng)
        tail = len(ids) - next(i for i in range(len(ids)) if all(t == 0 for t in ids[i:]))
        assert len(ids) == 128 and tail >= 100
        assert out.endswith("!" * tail) and out == detokenize(ids)


def test_word_loop_repeats_a_short_phrase_to_the_end() -> None:
    rng = random.Random(2)
    clean, text = clean_tokens(0, 256)
    ids, out = degenerate("word_loop", clean, text, rng)
    tail = ids[-100:]
    period = next(p for p in range(1, 5) if tail[p:] == tail[:-p])
    assert 1 <= period <= 4 and all(t in WORD_IDS for t in tail)
    assert out == detokenize(ids) and len(ids) == 256


def test_empty_reports_tokens_but_no_text() -> None:
    clean, text = clean_tokens(0, 40)
    ids, out = degenerate("empty", clean, text, random.Random(3))
    assert out == "" and len(ids) == 40


def test_perturb_replaces_a_few_words_with_other_words() -> None:
    rng = random.Random(4)
    clean, _ = clean_tokens(500, 128)
    for _ in range(50):
        ids, text, count = perturb(clean, 3, rng)
        changed = [i for i, (a, b) in enumerate(zip(ids, clean, strict=True)) if a != b]
        assert 1 <= count <= 3 and len(changed) == count
        assert all(ids[i] in WORD_IDS for i in changed)
        assert text == detokenize(ids) and longest_run(text) <= 3


def test_prompt_ids_agree_with_count() -> None:
    for prompt in ["", "a", "hello world", "é" * 7]:
        assert len(prompt_token_ids(prompt)) == prompt_token_count(prompt)
