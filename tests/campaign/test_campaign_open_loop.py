"""A campaign's `[load]` takes the open-loop and synthetic-prompt settings of `run` (issue 30
item 3): `rate`, `arrivals`, `ramp`, `prompt_tokens`, `synthetic_prompts`, `tokenizer`. Every
block soaks with them and stores them; a bad value is one line and exit 2 before any server
starts. Through the real CLI with real mock servers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.campaign.helpers import query, write_campaign
from tests.cli.helpers import one_error_line, soakgate


def test_every_block_soaks_open_loop_with_synthetic_prompts(tmp_path: Path) -> None:
    path = write_campaign(
        tmp_path, {"eager": "", "graph": ""}, requests=6,
        load='rate = 40\narrivals = "constant"\nramp = "1s"\nprompt_tokens = "uniform:10,30"\n'
        "synthetic_prompts = 8",
    )  # fmt: skip
    db = tmp_path / "c.sqlite"
    done = soakgate("campaign", str(path), "--db", str(db), "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    loads = [json.loads(text) for (text,) in query(db, "SELECT load FROM runs")]
    assert len(loads) == 2  # a block per config, each over both devices
    for load in loads:
        assert (load["rate"], load["arrivals"], load["ramp_s"]) == (40.0, "constant", 1.0)
        assert load["synthetic_prompts"] == {"lengths": "uniform:10,30", "count": 8,
                                             "tokenizer": None, "estimated": True,
                                             "words_per_token": 0.75}  # fmt: skip
    schedules = [
        json.loads(d) for (d,) in query(db, "SELECT data FROM events WHERE kind = 'arrivals'")
    ]
    assert len(schedules) == 4 and all(s["ramp_s"] == 1.0 for s in schedules)
    prompt_ids = {p for (p,) in query(db, "SELECT prompt_id FROM generations")}
    assert prompt_ids and all(p.startswith("synthetic-") for p in prompt_ids)


@pytest.mark.parametrize(
    ("load", "message"),
    [("rate = -1", "rate must be a number"), ("rate = 0", "rate must be a number > 0"),
     ('arrivals = "bursty"', "arrivals"), ('ramp = "soon"', "ramp must be a duration"),
     ('prompt_tokens = "normal:5"', "prompt_tokens: --prompt-tokens 'normal:5' is not"),
     ('tokenizer = "nowhere"', "tokenizer"),
     ('prompt_tokens = "50"\nprompts = "p.jsonl"', "prompts or prompt_tokens, not both")],
)  # fmt: skip
def test_bad_open_loop_settings_are_one_line_and_exit_2(
    tmp_path: Path, load: str, message: str
) -> None:
    (tmp_path / "p.jsonl").write_text('{"prompt": "hi"}\n')
    path = write_campaign(tmp_path, {"eager": ""}, requests=3, load=load)
    done = soakgate("campaign", str(path), "--db", str(tmp_path / "c.sqlite"), cwd=tmp_path)
    assert done.returncode == 2 and message in one_error_line(done)
    assert not (tmp_path / "c.sqlite").exists()
