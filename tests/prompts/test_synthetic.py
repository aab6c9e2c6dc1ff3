"""Synthetic prompts by token-length distribution (`run --prompt-tokens DIST`, issue 30 item 3):
lengths drawn as asked (checked by simulation), prompts cut at the served model's token
boundaries when its tokenizer is given (checked with the shared model's), seeded, stored with
the run, and bad flags one line and exit 2. Through the real CLI against the mock."""

from __future__ import annotations

import json
import random
import sqlite3
import statistics
from pathlib import Path

import pytest
from tests.cli.helpers import one_error_line, soakgate
from tests.realservers.helpers import model_dir

from soakgate.mockserver.process import MockProcess
from soakgate.prompts.synthetic import LengthDistribution, synthetic_prompts

tokenizers = pytest.importorskip("tokenizers")
TOKENIZER = model_dir() / "tokenizer.json"
needs_tokenizer = pytest.mark.skipif(not TOKENIZER.exists(), reason="no shared model")


def _length(prompt_id: str) -> int:
    return int(prompt_id.rsplit("-", 1)[1].removesuffix("t"))


def test_lengths_follow_the_distribution() -> None:
    """20,000 draws each: the sample mean within 4 standard errors of the distribution's."""
    n = 20_000
    for text, mean, sd in [
        ("normal:300,50", 300.0, 50.0),
        ("uniform:10,20", 15.0, (121 / 12) ** 0.5),
    ]:
        rng = random.Random(1)
        draws = [LengthDistribution.parse(text).draw(rng) for _ in range(n)]
        assert abs(statistics.fmean(draws) - mean) < 4 * sd / n**0.5, text
    uniform = [LengthDistribution.parse("uniform:10,20").draw(random.Random(i)) for i in range(500)]
    assert min(uniform) == 10 and max(uniform) == 20
    rng = random.Random(2)
    logs = sorted(LengthDistribution.parse("lognormal:200,0.5").draw(rng) for _ in range(n))
    # the median of the lognormal: its sample median's sd is about 1.2533 * 0.5 * 200 / sqrt(n)
    assert abs(logs[n // 2] - 200) < 4 * 1.2533 * 0.5 * 200 / n**0.5 + 1
    assert LengthDistribution.parse("512").draw(rng) == 512


@needs_tokenizer
def test_prompts_retokenize_to_their_length_with_the_models_tokenizer() -> None:
    tokenizer = tokenizers.Tokenizer.from_file(str(TOKENIZER))
    prompts = synthetic_prompts(LengthDistribution.parse("lognormal:300,0.8"), 300, 0,
                                str(TOKENIZER.parent))  # fmt: skip
    lengths = [_length(p.prompt_id) for p in prompts]
    assert max(lengths) > 10_000 // 10 and min(lengths) < 150  # a real spread, long ones too
    for prompt, length in zip(prompts, lengths, strict=True):
        got = len(tokenizer.encode(prompt.text, add_special_tokens=False).ids)
        assert abs(got - length) <= 2, (prompt.prompt_id, got)
    again = synthetic_prompts(LengthDistribution.parse("lognormal:300,0.8"), 300, 0,
                              str(TOKENIZER))  # fmt: skip
    assert again == prompts  # seeded; the file or its folder alike
    assert synthetic_prompts(LengthDistribution.parse("lognormal:300,0.8"), 300, 1) != prompts


@needs_tokenizer
def test_run_soaks_synthetic_prompts_and_stores_them_with_the_run(tmp_path: Path) -> None:
    tokenizer = tokenizers.Tokenizer.from_file(str(TOKENIZER))
    with MockProcess(["--tokens-per-s", "0"]) as mock:
        done = soakgate("run", "--target", mock.url, "--prompt-tokens", "uniform:20,60",
                        "--synthetic-prompts", "25", "--tokenizer", str(TOKENIZER.parent),
                        "--requests", "25", "--max-tokens", "4", "--db", "s.sqlite", "--quiet",
                        "--no-watch-metrics", cwd=tmp_path)  # fmt: skip
        estimated = soakgate("run", "--target", mock.url, "--prompt-tokens", "40",
                             "--requests", "3", "--max-tokens", "4", "--db", "e.sqlite",
                             "--quiet", "--no-watch-metrics", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0 and estimated.returncode == 0, done.stderr + estimated.stderr
    with sqlite3.connect(tmp_path / "s.sqlite") as connection:
        (load,) = connection.execute("SELECT load FROM runs").fetchone()
        used = {p for (p,) in connection.execute("SELECT prompt_id FROM generations")}
        stored = dict(connection.execute("SELECT prompt_id, text FROM prompts").fetchall())
    assert json.loads(load)["synthetic_prompts"] == {
        "lengths": "uniform:20,60", "count": 25, "tokenizer": str(TOKENIZER.parent),
        "estimated": False}  # fmt: skip
    assert len(used) == 25 and used <= set(stored)
    for prompt_id in used:
        got = len(tokenizer.encode(stored[prompt_id], add_special_tokens=False).ids)
        assert 20 - 2 <= got <= 60 + 2 and abs(got - _length(prompt_id)) <= 2
    with sqlite3.connect(tmp_path / "e.sqlite") as connection:
        (load,) = connection.execute("SELECT load FROM runs").fetchone()
        texts = [t for (t,) in connection.execute("SELECT text FROM prompts")]
    assert json.loads(load)["synthetic_prompts"]["estimated"] is True
    assert texts and all(len(t.split()) == 30 for t in texts)  # 40 tokens at 3/4 word each


@pytest.mark.parametrize(
    ("flags", "message"),
    [(["--prompt-tokens", "normal:5"], "--prompt-tokens 'normal:5' is not"),
     (["--prompt-tokens", "0"], "is not a length distribution"),
     (["--prompt-tokens", "uniform:50,10"], "is not a length distribution"),
     (["--synthetic-prompts", "5"], "--synthetic-prompts needs --prompt-tokens"),
     (["--tokenizer", "x"], "--tokenizer needs --prompt-tokens"),
     (["--prompt-tokens", "50", "--prompts", "p.jsonl"], "leave out --prompts"),
     (["--prompt-tokens", "50", "--tokenizer", "/nonexistent"], "--tokenizer /nonexistent")],
)  # fmt: skip
def test_bad_synthetic_prompt_flags_are_one_line_and_exit_2(
    flags: list[str], message: str, tmp_path: Path
) -> None:
    (tmp_path / "p.jsonl").write_text('{"prompt": "hi"}\n')
    done = soakgate("run", "--target", "http://127.0.0.1:9", "--requests", "3", *flags,
                    "--db", "x.sqlite", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2 and message in one_error_line(done)
    assert not (tmp_path / "x.sqlite").exists()
