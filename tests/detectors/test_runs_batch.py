"""A batch's character runs measured at once (`char_runs_many`, as the soak scores a batch) are
what each text measured on its own gives (`char_runs`), and so are the rows a soak stores."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from soakgate.cli.main import main
from soakgate.detectors import DetectorConfig, char_runs_many, score_text
from soakgate.detectors.runs import BATCH_CHARACTERS, CROWDED_RUNS, char_runs
from soakgate.load import record
from soakgate.mockserver.process import MockProcess

# ASCII, Latin-1, astral and a lone surrogate: the code points change the array's width
_CHARS = st.sampled_from(["a", "b", "!", " ", "\n", ".", "é", "\U0001f600", "\ud800", "─"])
_TEXTS = st.lists(_CHARS, max_size=40).map("".join)
_RUNS = st.tuples(_CHARS, st.integers(1, 300)).map(lambda run: run[0] * run[1])
_LONG_TEXTS = st.lists(st.one_of(_TEXTS, _RUNS), max_size=6).map("".join)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.one_of(_TEXTS, _LONG_TEXTS), max_size=12),
    st.integers(1, 100),
    st.sampled_from([1, 7, 40, 300, BATCH_CHARACTERS]),
    st.sampled_from([0, CROWDED_RUNS]),  # 0: measured in one array however crowded the runs
)
def test_a_batch_measures_what_each_text_measures_alone(
    texts: list[str], min_length: int, chunk: int, crowded: int
) -> None:
    alone = [char_runs(text, min_length) for text in texts]
    assert char_runs_many(texts, min_length, chunk, crowded) == alone


@pytest.mark.parametrize(
    "texts",
    [
        ["aa", "a", "ab"],  # a run may not continue into the next text
        ["", "aa", ""],  # empty texts around (and the last comparison not cleared)
        ["!" * 4097, "x" * 70, "y"],  # past the searched lengths of the one-by-one measure
        ["é" * 3, "aaa", "\ud800\ud800"],  # one text not ASCII makes the whole array wide
    ],
)
def test_runs_end_with_their_text(texts: list[str]) -> None:
    for min_length in (2, 3, 80):
        alone = [char_runs(t, min_length) for t in texts]
        assert char_runs_many(texts, min_length, crowded=0) == alone


@pytest.mark.parametrize("batch_fails", [False, True])
def test_a_soaks_rows_are_scored_as_each_alone(
    start_mock: Callable[..., MockProcess], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    batch_fails: bool,
) -> None:  # fmt: skip
    """Through the CLI, with collapses injected (runs of `!`, loops, blanks): every stored row's
    scores, evidence and flags are what scoring its text alone gives, whether its batch was
    measured at once or (the batch's measure failing) row by row."""
    batches: list[int] = []

    def measured(texts: list[str], min_length: int) -> list[object]:
        batches.append(len(texts))
        if batch_fails:
            raise MemoryError("no room for the batch's array")
        return char_runs_many(texts, min_length)  # type: ignore[return-value]

    monkeypatch.setattr(record, "char_runs_many", measured)
    mock = start_mock("--seed", "7", "--collapse-rate", "0.2")
    db = tmp_path / "s.sqlite"
    code = main(["run", "--target", mock.url, "--requests", "600", "--concurrency", "16",
                 "--max-tokens", "64", "--no-stream", "--db", str(db), "--quiet",
                 "--no-watch-metrics"])  # fmt: skip
    assert code in (0, 1)  # 1: the collapses fail the run's gate
    with sqlite3.connect(db) as con:
        rows = con.execute(
            "SELECT text, completion_tokens, finish_reason, scores, details, flags "
            "FROM generations WHERE error_class IS NULL"
        ).fetchall()
    assert len(rows) > 500 and any(row[5] for row in rows)
    assert max(batches) > 1  # the soak measured batches of rows at once
    config = DetectorConfig()
    for text, completion_tokens, finish_reason, scores, details, flags in rows:
        alone = score_text(text, None, completion_tokens, config, finish_reason=finish_reason,
                           max_tokens=64)  # fmt: skip
        assert json.loads(scores) == {name: d.score for name, d in alone.items()}
        stored = json.loads(details)
        assert {k: v for k, v in stored.items() if k in alone} == {
            name: d.evidence for name, d in alone.items() if d.evidence
        }
        assert (flags.split(",") if flags else []) == [n for n, d in alone.items() if d.flagged]


def test_a_batch_crowded_with_short_runs_is_measured_one_by_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Texts made of pairs (`aabb...`, as a hostile server may send) would list a run for every
    other character; such a chunk is measured text by text, whose searches do not."""
    from soakgate.detectors import runs

    alone: list[str] = []
    measure = runs.char_runs

    def counted(text: str, min_length: int) -> runs.CharRunSummary:
        alone.append(text)
        return measure(text, min_length)

    monkeypatch.setattr(runs, "char_runs", counted)
    pairs = ["aabb" * 500, "ccdd" * 500]
    assert runs.char_runs_many(pairs, 80) == [measure(t, 80) for t in pairs]
    assert alone == pairs
    alone.clear()
    ordinary = ["the quick brown fox jumps over the lazy dog, all week long"] * 2
    assert runs.char_runs_many(ordinary, 80) == [measure(t, 80) for t in ordinary]
    assert alone == []  # measured in one array
