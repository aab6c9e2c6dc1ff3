"""Issue 29 item 1: an answer that carries another request's canary, or a long span of another
request's prompt that its own prompt does not explain, is flagged `crosstalk` with the request it
came from; stored apart from collapses, judged as an outcome of its own by `compare` and the
report, and counted live. Against the mock's ground truth (`--crosstalk-rate`), through the CLI,
streamed and not, completions and chat."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from soakgate.checks import Canaries, Crosstalk, CrosstalkSettings
from soakgate.mockserver.process import MockProcess
from soakgate.prompts import Prompt
from soakgate.prompts.builtin import builtin_prompts
from soakgate.records import Generation
from tests.cli.helpers import soakgate, stored_rows

REQUESTS = 400


def _answer(seq: int, prompt: Prompt, text: str) -> Generation:
    return Generation("run1", f"run1-{seq}", "t", "l", seq, prompt.prompt_id, "chat", False,
                      0.0, 0.0, text=text)  # fmt: skip


def _judged(check: Crosstalk, *rows: Generation) -> None:
    """The rows answered, then judged as one batch (as the soak's writer hands them over)."""
    for row in rows:
        check.answered(row)
    check.judge(rows)


def test_a_canary_names_its_request_and_a_forged_one_is_not_one() -> None:
    canaries = Canaries("run1")
    tag = canaries.tag(1234)
    assert canaries.found(f"the answer ... [{tag}] and {tag.lower()}") == [1234]
    forged = tag[:-1] + ("0" if tag[-1] != "0" else "1")
    assert canaries.found(f"text {forged} text") == []
    assert Canaries("run2").found(tag) == []  # another run's key
    marked = canaries.mark(Prompt("p", "Say hello."), 7)
    assert marked.prompt_id == "p" and marked.text.startswith("Say hello.")  # appended, not first
    assert canaries.found(marked.text) == [7]


def test_canaries_are_found_as_the_expression_alone_finds_them_in_any_case() -> None:
    """`found` answers most texts (no `SG-` in any case) without the expression: on random texts
    with genuine, forged and near-miss markers in mixed case, and letters whose upper case is
    an S or a G (the long s), it finds what the expression alone finds."""
    import random

    from soakgate.checks import canary as module

    canaries = Canaries("run1")
    rng = random.Random(3)
    pieces = ["the ", "sg-", "SG-", "sG-", "\u017fg-", "-", "12", "AB", " ", "\u00df", "[", "]"]

    def by_expression(text: str) -> list[int]:
        seqs: list[int] = []
        for match in module._TAG.finditer(text):
            seq = int(match.group(1), 16)
            if match.group(2).upper() == canaries._mac(seq) and seq not in seqs:
                seqs.append(seq)
        return seqs

    for trial in range(3_000):
        parts = rng.choices(pieces, k=rng.randint(0, 12))
        for _ in range(rng.randint(0, 2)):
            tag = canaries.tag(rng.randint(0, 5000))
            tag = rng.choice((tag, tag.lower(), tag.replace("SG", "\u017fG"), tag[:-1] + "0"))
            parts.insert(rng.randint(0, len(parts)), tag)
        text = "".join(parts)
        assert canaries.found(text) == by_expression(text), (trial, text)


def test_spans_of_another_prompt_flag_and_boilerplate_or_the_own_prompt_do_not() -> None:
    prompts = builtin_prompts()
    check = Crosstalk(CrosstalkSettings(), "run1")
    for seq in range(300):
        check.sent(seq, prompts[seq])
    own, other = prompts[10], prompts[123]
    cases = {
        "own prompt": (f"Sure. {own.text} Here it is.", None),
        # every topic's `long` prompt shares this template: boilerplate, never evidence
        "boilerplate": ("We should start with the problem it solves then describe how it works "
                        "step by step and give one concrete example with numbers", None),
        "another prompt": (f"Sure. {other.text}", other.prompt_id),
        "short overlap": ("It explains the Python garbage collector well.", None),
    }  # fmt: skip
    for name, (text, source) in cases.items():
        answer = _answer(300, own, text)
        _judged(check, answer)
        if source is None:
            assert answer.checks == [], name
        else:
            assert answer.checks == ["crosstalk"], name
            evidence = answer.details["crosstalk"]
            assert evidence["by"] == "prompt_span" and evidence["source_prompt"] == source
            assert evidence["source"] == "run1-123"  # the last request that sent that prompt


def test_the_window_forgets_requests_that_left_it_and_stays_bounded() -> None:
    prompts = [Prompt(f"p{i}", f"unique words number {i} alpha beta gamma delta epsilon zeta eta")
               for i in range(5000)]  # fmt: skip
    check = Crosstalk(CrosstalkSettings(window=64), "run1")
    for seq, prompt in enumerate(prompts):
        check.sent(seq, prompt)
        if seq % 500 == 499:  # a batch judged now and then: the window is brought forward
            _judged(check, _answer(seq, prompt, "nothing of any prompt"))
    recent, old = (
        _answer(5000, prompts[-1], prompts[-2].text),
        _answer(5001, prompts[-1], prompts[10].text),
    )
    _judged(check, recent, old)
    assert recent.checks == ["crosstalk"] and old.checks == []
    # what is kept: the prompts and the requests of at most two windows, no answer waiting
    assert len(check._spans) <= 2 * 64 and len(check._sends) <= 2 * 64 and not check._marks


def test_an_answer_noted_and_never_judged_does_not_hold_the_requests_for_ever() -> None:
    """Every answer of a soak is judged with its batch; one that were not would keep every
    request sent after it for its window. The check keeps at most LOG_LIMIT of them, and still
    judges (against what is left) an answer that comes back after that."""
    from soakgate.checks.crosstalk import LOG_LIMIT

    prompts = [
        Prompt(f"p{i}", f"words of prompt number {i} alpha beta gamma delta") for i in range(50)
    ]
    check = Crosstalk(CrosstalkSettings(window=64), "run1")
    check.sent(0, prompts[0])
    lost = _answer(0, prompts[0], prompts[1].text)
    check.answered(lost)  # never handed over in a batch, until the end
    for seq in range(1, LOG_LIMIT + 3000):
        check.sent(seq, prompts[seq % 50])
        if seq % 1000 == 0:
            _judged(check, _answer(seq, prompts[seq % 50], "nothing of any prompt"))
    assert len(check._sends) <= LOG_LIMIT + 1000 + 64
    check.judge([lost])  # judged after all: its moment is gone, nothing is found for it
    assert lost.checks == [] and not check._marks


def test_answer_spans_flag_a_run_shared_with_a_concurrent_answer_of_another_prompt() -> None:
    prompts = [Prompt(f"p{i}", f"question number {i}") for i in range(4)]
    check = Crosstalk(CrosstalkSettings(answers=True), "run1")
    for seq in range(4):
        check.sent(seq, prompts[seq])
    leaked = " ".join(f"w{i}" for i in range(20))  # 20 words no prompt holds

    def answer(seq: int, text: str, start: float, end: float) -> Generation:
        row = _answer(seq, prompts[seq % 4], text)
        row.started_at, row.ended_at = start, end
        _judged(check, row)
        return row

    source = answer(0, f"alpha {leaked} beta", 0.0, 2.0)
    victim = answer(1, f"gamma delta {leaked}", 1.0, 3.0)  # in flight with the source
    assert source.checks == [] and victim.checks == ["crosstalk"]
    evidence = victim.details["crosstalk"]
    assert evidence["by"] == "answer_span" and evidence["source"] == "run1-0"
    assert evidence["span"] == " ".join(f"w{i}" for i in range(16))
    later = answer(2, f"{leaked} again", 5.0, 6.0)  # not in flight with either
    assert later.checks == []
    check.sent(4, prompts[0])
    same = answer(4, f"{leaked}", 1.5, 2.5)  # the same prompt as the source
    assert same.checks == []
    other = " ".join(f"v{i}" for i in range(20))
    answer(5, other, 10.0, 11.0)
    answer(6, other, 12.0, 13.0)  # two prompts' answers hold it: the model's own phrase
    common = answer(7, f"x {other}", 10.5, 13.5)
    assert common.checks == []
    off = Crosstalk(CrosstalkSettings(), "run1")  # off by default
    off.sent(0, prompts[0]), off.sent(1, prompts[1])
    first, second = _answer(0, prompts[0], leaked), _answer(1, prompts[1], leaked)
    second.ended_at = 1.0
    _judged(off, first, second)
    assert second.checks == []


def _soak(tmp_path: Path, mock: MockProcess, db: Path, *extra: str) -> str:
    result = soakgate("run", "--target", mock.url, "--requests", str(REQUESTS), "--concurrency",
                      "8", "--max-tokens", "48", "--db", str(db), "--quiet",
                      "--no-watch-metrics", *extra, cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize(
    ("endpoint", "stream"),
    [("completions", ()), ("chat", ("--no-stream",)), ("completions", ("--no-stream",)),
     ("chat", ())],
)  # fmt: skip
def test_every_injected_leak_is_flagged_with_its_source_and_no_clean_row_is(
    tmp_path: Path, endpoint: str, stream: tuple[str, ...]
) -> None:
    truth = tmp_path / "truth.jsonl"
    db = tmp_path / "x.sqlite"
    with MockProcess(["--crosstalk-rate", "0.05", "--seed", "4"],
                     ground_truth_path=truth) as mock:  # fmt: skip
        _soak(tmp_path, mock, db, "--canaries", "--endpoint", endpoint, *stream)
        leaked = {r["request_id"]: r["crosstalk"] for r in mock.ground_truth() if r["crosstalk"]}
    rows = stored_rows(db)
    assert len(rows) == REQUESTS and 8 <= len(leaked) <= 40
    flagged = {rid: g.details["crosstalk"] for rid, g in rows.items() if g.checks}
    assert set(flagged) == set(leaked)  # every leak, and nothing else
    for rid, evidence in flagged.items():
        assert evidence["source"] == leaked[rid] and evidence["by"] == "canary", rid
        assert rows[rid].text is not None and evidence["canary"] in rows[rid].text
        assert not rows[rid].flags  # a failed check is not a collapse
    with sqlite3.connect(db) as connection:  # stored in its own column, found by its index
        plan = " ".join(
            r[-1]
            for r in connection.execute(
                "EXPLAIN QUERY PLAN SELECT id, checks FROM generations WHERE checks != ''"
            )
        )
        (stored,) = connection.execute("SELECT COUNT(*) FROM generations WHERE checks = "
                                       "'crosstalk' AND collapsed = 0").fetchone()  # fmt: skip
    assert "generations_checks" in plan and stored == len(leaked)


def test_without_canaries_the_prompt_spans_flag_only_leaks_with_their_source(
    tmp_path: Path,
) -> None:
    """Spans need no change to the prompts; a leak of words every prompt of a template shares is
    invisible to them (only a canary tells it), never a false flag."""
    truth = tmp_path / "truth.jsonl"
    db = tmp_path / "x.sqlite"
    with MockProcess(["--crosstalk-rate", "0.05", "--seed", "5"],
                     ground_truth_path=truth) as mock:  # fmt: skip
        _soak(tmp_path, mock, db)
        leaked = {r["request_id"]: r["crosstalk"] for r in mock.ground_truth() if r["crosstalk"]}
    rows = stored_rows(db)
    flagged = {rid: g.details["crosstalk"] for rid, g in rows.items() if g.checks}
    assert set(flagged) <= set(leaked) and len(flagged) >= len(leaked) // 2
    for rid, evidence in flagged.items():
        assert evidence["by"] == "prompt_span" and evidence["source"] == leaked[rid]
    for row in rows.values():  # the prompts went out as they are
        assert "SG-" not in (row.text or "")
    run = json.loads(sqlite3.connect(db).execute("SELECT detectors FROM runs").fetchone()[0])
    assert run["crosstalk"] == {"canaries": False, "spans": True, "span": 8, "window": 1024,
                                "answers": False, "answer_span": 16}  # fmt: skip


def test_rows_the_reference_scores_first_are_judged_against_the_window_of_their_moment(
    tmp_path: Path,
) -> None:
    """Under `--score-reference` a row is queued for the store once the reference has scored it,
    so rows reach the check's batches out of the order they came in; with a window of 64
    requests, a leak's source (a request in flight with it) is still found for each, and no
    clean row is flagged."""
    truth = tmp_path / "truth.jsonl"
    db = tmp_path / "x.sqlite"
    with MockProcess(["--crosstalk-rate", "0.05", "--seed", "5"],
                     ground_truth_path=truth) as mock, MockProcess(["--seed", "8"]) as reference:  # fmt: skip
        _soak(tmp_path, mock, db, "--score-reference", reference.url, "--calibration", "200", "--false-flag-rate", "0.01",
              "--crosstalk-window", "64")  # fmt: skip
        leaked = {r["request_id"]: r["crosstalk"] for r in mock.ground_truth() if r["crosstalk"]}
    rows = stored_rows(db)
    assert len(rows) == REQUESTS and 8 <= len(leaked) <= 40
    flagged = {rid: g.details["crosstalk"] for rid, g in rows.items() if g.checks}
    assert set(flagged) <= set(leaked) and len(flagged) >= len(leaked) // 2, (flagged, leaked)
    for rid, evidence in flagged.items():
        assert evidence["by"] == "prompt_span" and evidence["source"] == leaked[rid]
    with sqlite3.connect(db) as connection:  # stored (and judged) out of the order they came
        stored = [r[0] for r in connection.execute("SELECT ended_at FROM generations ORDER BY id")]
    assert stored != sorted(stored)


def _gate(tmp_path: Path, db: Path, *extra: str) -> Any:
    return soakgate("compare", str(db), "good", "bad", "--fail-on-differ", *extra, cwd=tmp_path)


def test_compare_and_report_judge_crosstalk_as_an_outcome_of_its_own(tmp_path: Path) -> None:
    db = tmp_path / "arms.sqlite"
    # a rate at which the one-run gate fails B on every draw (at a few per cent of answers an
    # INDETERMINATE at p > 0.001 passed it in ~3% of runs: simulated, 1,000 draws)
    with MockProcess(["--seed", "8"]) as good, MockProcess(
        ["--seed", "9", "--crosstalk-rate", "0.2"]
    ) as bad:  # fmt: skip
        for label, mock in (("good", good), ("bad", bad)):
            _soak(tmp_path, mock, db, "--canaries", "--label", label)
    gate = _gate(tmp_path, db)
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert "gate FAIL" in gate.stdout and "crosstalk" in gate.stdout.split("\n")[1]
    alone = _gate(tmp_path, db, "--outcome", "crosstalk")
    assert alone.returncode == 1 and alone.stdout.startswith("outcome: crosstalk")
    assert "collapses" not in alone.stdout  # judged alone
    collapses = _gate(tmp_path, db, "--outcome", "collapse")
    assert collapses.returncode == 0, collapses.stdout
    document = json.loads(soakgate("report", str(db), "--format", "json", cwd=tmp_path).stdout)
    found = {o["unit"]: o["crosstalk"] for o in document["outcomes"]}
    bad_unit = next(name for name in found if name.startswith("bad@"))
    good_unit = next(name for name in found if name.startswith("good@"))
    assert found[good_unit]["events"] == 0 and found[good_unit]["n"] == REQUESTS
    with sqlite3.connect(db) as connection:
        (stored,) = connection.execute(
            "SELECT COUNT(*) FROM generations WHERE label = 'bad' AND checks != ''"
        ).fetchone()
    assert found[bad_unit]["events"] == stored > 0


def test_a_resumed_run_keeps_the_canaries_it_started_with(tmp_path: Path) -> None:
    """Interrupted with --canaries and resumed without the flag: the stored settings hold, so
    leaks after the resume are still told by their canary, with their source."""
    import signal
    import subprocess
    import sys
    import time

    truth, db = tmp_path / "truth.jsonl", tmp_path / "r.sqlite"
    with MockProcess(["--crosstalk-rate", "0.1", "--seed", "6", "--tokens-per-s", "3000"],
                     ground_truth_path=truth) as mock:  # fmt: skip
        soaker = subprocess.Popen(
            [sys.executable, "-m", "soakgate", "run", "--target", f"gpu0={mock.url}",
             "--requests", "300", "--concurrency", "4", "--max-tokens", "48", "--canaries",
             "--db", str(db), "--quiet", "--no-watch-metrics"],
            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(mock.ground_truth()) < 60:
            time.sleep(0.2)
        soaker.send_signal(signal.SIGINT)
        assert soaker.wait(timeout=120) == 130
        (run_id,) = {g.run_id for g in stored_rows(db).values()}
        before = len(stored_rows(db))
        resumed = soakgate("run", "--resume", run_id, "--target", f"gpu0={mock.url}", "--db",
                           str(db), "--quiet", "--no-watch-metrics", cwd=tmp_path)  # fmt: skip
        assert resumed.returncode == 0, resumed.stderr
        leaked = {r["request_id"]: r["crosstalk"] for r in mock.ground_truth() if r["crosstalk"]}
    rows = stored_rows(db)
    assert len(rows) == 300 > before
    after = {rid for rid, g in rows.items() if g.seq >= before and rid in leaked}
    assert after  # leaks happened after the resume
    for rid in leaked:
        assert rows[rid].checks == ["crosstalk"], rid
        assert rows[rid].details["crosstalk"]["by"] == "canary"
        assert rows[rid].details["crosstalk"]["source"] == leaked[rid]


def test_a_divergent_greedy_answer_that_is_another_prompts_reference_answer_is_crosstalk() -> None:
    """The greedy differential keeps the reference's answers; a divergent answer that follows
    another prompt's for 16 tokens or more, and further than its own, is marked with that
    request, and the crosstalk check flags the row by it; so is one that, from where it left its
    own answer, goes on with a run of 16 or more of another answer's tokens its own does not
    hold."""
    from soakgate.probes.differential import Compared, Differential
    from soakgate.targets import Outcome

    def outcome(ids: list[int]) -> Outcome:
        answer = Outcome(started_at=0.0)
        answer.token_ids, answer.text = ids, " ".join(map(str, ids))
        return answer

    compared = Compared(Differential(None), session=None)  # type: ignore[arg-type]
    other = list(range(100, 140))
    compared.answers[("gpu0", "b")] = ("run1-7", outcome(other))
    # the same prompt (by id: another canary), whose answer this one follows longest, is no source
    compared.answers[("gpu0", "a")] = ("run1-3", outcome([*other[:35], 9]))
    leaked = outcome([*other[:30], 1, 2, 3])  # prompt A's answer: B's for 30 tokens
    assert compared.cross_check("gpu0", "a", leaked, own=0) == {
        "source": "run1-7", "shared": 30, "unit": "tokens", "source_prompt": "b"}  # fmt: skip
    assert compared.cross_check("gpu0", "a", outcome(other[:10]), own=0) is None  # short
    assert compared.cross_check("gpu1", "a", leaked, own=0) is None  # another target's
    assert compared.cross_check("gpu0", "a", leaked, own=31) is None  # its own goes on
    # from where it left its own answer, a run of another answer (from anywhere in it)
    mine = outcome(list(range(500, 540)))
    crossed = outcome([*mine.token_ids[:12], *other[5:27], 7])  # type: ignore[index]
    assert compared.cross_check("gpu0", "a", crossed, own=12, mine=mine) == {
        "source": "run1-7", "shared": 22, "unit": "tokens", "source_prompt": "b", "at": 12}  # fmt: skip
    short = outcome([*mine.token_ids[:12], *other[5:20], 7])  # type: ignore[index]
    assert compared.cross_check("gpu0", "a", short, own=12, mine=mine) is None  # 15 tokens
    explained = outcome([*other[5:27], 8])  # its own answer holds that run too
    assert compared.cross_check("gpu0", "a", crossed, own=12, mine=explained) is None
    wrong = outcome([*mine.token_ids[:12], 999, *mine.token_ids[13:]])  # type: ignore[index]
    assert compared.cross_check("gpu0", "a", wrong, own=12, mine=mine) is None  # a wrong token
    # text only (no ids): 64 characters, or the whole answer where its usage counts 16 tokens
    texts = Compared(Differential(None), session=None)  # type: ignore[arg-type]
    hexes = Outcome(started_at=0.0, text="+ commit 4e2a1c3d8d1a6a1a6d7e0a7f", completion_tokens=20)
    texts.answers[("gpu0", "b")] = ("run1-7", hexes)
    found = texts.cross_check("gpu0", "a", dataclasses.replace(hexes), own=0)
    assert found == {"source": "run1-7", "shared": 33, "unit": "characters", "source_prompt": "b"}
    hexes.completion_tokens = 15
    assert texts.cross_check("gpu0", "a", dataclasses.replace(hexes), own=0) is None
    row = _answer(9, Prompt("a", "prompt A"), "text")
    row.details["differential"] = {"greedy": True, "compared": True,
                                   "matches_other_prompt": {"source": "run1-7", "shared": 30,
                                                            "unit": "tokens"}}  # fmt: skip
    check = Crosstalk(CrosstalkSettings(), "run1")
    _judged(check, row)
    assert row.checks == ["crosstalk"] and row.details["crosstalk"]["by"] == "reference"
    assert row.details["crosstalk"]["source"] == "run1-7"


def test_words_are_the_regular_expressions_words_on_ascii_and_unicode_text() -> None:
    """`words_of` splits ASCII text with `bytes.translate` (its fast path): the same words as
    `\\w+` on the lower-cased text, punctuation, control characters and Unicode alike."""
    import random
    import re
    import string

    from soakgate.checks.crosstalk import words_of

    rng, word = random.Random(29), re.compile(r"\w+")
    alphabets = [string.printable + "éß—…\u00a0\u2028İ", "".join(map(chr, range(128)))]
    for alphabet in alphabets:
        for _ in range(5000):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
            assert words_of(text) == [w.encode() for w in word.findall(text.lower())], repr(text)


def _sorted_and_whole(prompts: list[Prompt], answers: list[str], monkeypatch: Any) -> list[Any]:
    """Each answer's evidence, found as shipped and with every answer hashed whole."""
    import soakgate.checks.crosstalk as crosstalk

    found = []
    for whole in (False, True):
        if whole:
            monkeypatch.setattr(crosstalk, "known_runs", lambda words, _k, _w: [(0, len(words))])
        check = Crosstalk(CrosstalkSettings(window=256), "run1")
        for seq, prompt in enumerate(prompts):
            check.sent(seq, prompt)
        rows = [_answer(1000 + n, prompts[n % 7], text) for n, text in enumerate(answers)]
        _judged(check, *rows)
        found.append([row.details.get("crosstalk") for row in rows])
    return found


def _every_word_runs(words: list[str], known: set[str], width: int) -> list[tuple[int, int]]:
    """Maximal runs of at least `width` known words, by testing every word (the oracle)."""
    runs, start = [], None
    for index, word in enumerate([*words, None]):
        if word is not None and word in known:
            start = index if start is None else start
            continue
        if start is not None and index - start >= width:
            runs.append((start, index))
        start = None
    return runs


def test_known_runs_sampling_every_width_th_word_finds_every_run() -> None:
    """`known_runs` looks up one word in `width` first and grows runs from the known ones: the
    same runs as testing every word, at every density and width, runs at the ends included."""
    import random

    from soakgate.checks.crosstalk import known_runs

    rng = random.Random(29)
    vocabulary = [f"w{i}" for i in range(40)]
    for trial in range(3_000):
        share = rng.choice((0.05, 0.3, 0.6, 0.85, 0.97, 1.0))
        known = set(rng.sample(vocabulary, round(share * len(vocabulary))))
        words = [rng.choice(vocabulary) for _ in range(rng.randrange(0, 90))]
        width = rng.choice((1, 2, 3, 8, 16))
        expected = _every_word_runs(words, known, width)
        assert list(known_runs(words, known, width)) == expected, (trial, width, words)


def test_hashing_only_runs_of_the_prompts_words_finds_what_hashing_every_span_finds(
    monkeypatch: Any,
) -> None:
    """The check hashes only the runs of an answer whose words some prompt of the window holds
    (a span can be a prompt's only there); on answers made of the prompts' words, of other
    words, and both, with spans of other prompts planted at random places, it finds exactly
    what hashing every span finds. Both ways find the planted spans."""
    import random

    rng = random.Random(7)
    vocabulary = [f"w{n}" for n in range(60)]
    prompts = [Prompt(f"p{n}", " ".join(rng.choices(vocabulary, k=40))) for n in range(200)]
    answers = []
    for n in range(600):
        mix = [vocabulary, [f"x{k}" for k in range(50)], [*vocabulary, "x1", "x2", "42"]][n % 3]
        words = rng.choices(mix, k=rng.randint(0, 70))
        if n % 2:  # a span of another prompt, at a random place
            source = prompts[rng.randrange(7, 200)].text.split()
            at = rng.randrange(0, 30)
            span = source[at : at + rng.randint(8, 12)]
            cut = rng.randint(0, len(words))
            words[cut:cut] = span
        answers.append(" ".join(words))
    shipped, whole = _sorted_and_whole(prompts, answers, monkeypatch)
    assert shipped == whole
    assert sum(e is not None and e["by"] == "prompt_span" for e in shipped) > 200


def test_a_prompt_set_whose_words_cover_the_answers_hashes_them_whole() -> None:
    """Sorting an answer's words into runs pays only when many are not the prompts' words: the
    check stops sorting while the prompts' words cover most answers, sorts one answer in
    SAMPLE_EVERY to see when they stop, and starts again then."""
    from soakgate.checks.crosstalk import SAMPLE_EVERY

    prompts = [
        Prompt(f"p{n}", f"alpha beta gamma delta {n} epsilon zeta eta theta") for n in range(9)
    ]
    check = Crosstalk(CrosstalkSettings(), "run1")
    for seq, prompt in enumerate(prompts):
        check.sent(seq, prompt)
    covered = "alpha beta gamma delta epsilon zeta eta theta " * 3
    for n in range(100):
        _judged(check, _answer(100 + n, prompts[0], covered))
    assert not check._filtering
    for n in range(40 * SAMPLE_EVERY):
        _judged(check, _answer(1000 + n, prompts[0], "other words here, none of a prompt " * 3))
    assert check._filtering


def _oracle(sent: list[tuple[int, Prompt]], mark: int, row: Generation, window: int) -> Any:
    """The prompt-span evidence of an answer by brute force: the prompts the `window` requests
    before the `mark`-th sent, each span of the answer in order."""
    from soakgate.checks.crosstalk import hashes, words_of

    latest: dict[str, int] = {}
    spans: dict[str, set[int]] = {}
    for seq, prompt in sent[max(0, mark - window) : mark]:
        latest[prompt.prompt_id] = seq
        spans[prompt.prompt_id] = set(hashes(words_of(prompt.text), 8))
    words = words_of(row.text or "")
    for index, span in enumerate(hashes(words, 8)):
        owners = [key for key, held in spans.items() if span in held]
        if len(owners) == 1 and row.prompt_id not in owners:
            return {"by": "prompt_span", "source": f"run1-{latest[owners[0]]}",
                    "source_prompt": owners[0], "span": b" ".join(words[index : index + 8]).decode(),
                    "window": window}  # fmt: skip
    return None


def test_answers_judged_a_batch_at_a_time_and_out_of_order_meet_the_window_of_their_moment() -> (
    None
):
    """The check only notes an answer (and how many requests had been sent) as it comes and
    judges it with its batch, as late as the reference's scoring makes it; every evidence is
    what the window held when the answer came (brute force over the requests sent), with
    prompts that leave the window, come back, and share boilerplate."""
    import random

    rng = random.Random(31)
    vocabulary = [f"w{n}" for n in range(30)]
    prompts = [Prompt(f"p{n}", " ".join(rng.choices(vocabulary, k=14))) for n in range(40)]
    window = 16
    check = Crosstalk(CrosstalkSettings(window=window), "run1")
    sent: list[tuple[int, Prompt]] = []
    waiting: list[tuple[Generation, int]] = []
    judged: list[tuple[Generation, int]] = []

    def judge(rows: list[tuple[Generation, int]]) -> None:
        rows = list({id(row): (row, mark) for row, mark in rows}.values())
        rng.shuffle(rows)  # the order rows are queued in, late ones among them
        check.judge([row for row, _ in rows])
        judged.extend(rows)
        taken = {id(row) for row, _ in rows}
        waiting[:] = [w for w in waiting if id(w[0]) not in taken]

    for step in range(4000):
        if rng.random() < 0.55 or not sent:
            late = [w for w in waiting if w[1] <= len(sent) - window]  # kept within a window
            if late:
                judge(late + rng.sample(waiting, min(len(waiting), 3)))
            prompt = prompts[min(int(rng.expovariate(1 / 12)), 39)]  # some prompts come back
            check.sent(len(sent), prompt)
            sent.append((len(sent), prompt))
        else:
            _, own = rng.choice(sent[-window:])
            words = rng.choices([*vocabulary, "x", "y", "z"], k=rng.randint(0, 30))
            if rng.random() < 0.6:  # a span of some prompt, sent or not, at a random place
                source = rng.choice(prompts).text.split()
                at = rng.randrange(0, 6)
                words[rng.randint(0, len(words)) : 0] = source[at : at + rng.randint(8, 9)]
            row = _answer(step + 10_000, own, " ".join(words))
            check.answered(row)
            waiting.append((row, len(sent)))
        if waiting and rng.random() < 0.1:
            judge(rng.sample(waiting, rng.randint(1, len(waiting))))
    judge(list(waiting))
    found = [row.details.get("crosstalk") for row, _ in judged]
    assert found == [_oracle(sent, mark, row, window) for row, mark in judged]
    assert 100 < sum(e is not None for e in found) < len(found) - 100
