"""The in-process reference (`--reference-model`) on the real tiny model: a candidate serving the
same model (tests/hfserve.py, real prompt and token ids) is flagged at about the calibrated rate,
and one serving a truncated copy of it (2 of its 6 layers: it still writes words) is mostly
flagged; the calibration is the model's own samples, stored with the run."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.command_line import soakgate
from tests.hfserve import launched

MODEL = Path(__file__).resolve().parents[2].parent / "shared" / "models" / "tiny-llama-8k"
REPO = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1800),  # a model in-process: minutes of CPU, more on a loaded machine
    pytest.mark.skipif(not (MODEL / "config.json").is_file(), reason=f"no model at {MODEL}"),
]


@pytest.fixture
def serve(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[int], str]]:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the soak's own reference model too: 2 cores
    with contextlib.ExitStack() as stack:
        yield lambda layers: stack.enter_context(
            launched(MODEL, "--layers", str(layers), "--window", "128")
        )


def test_reference_model_scores_a_real_model_and_flags_a_truncated_one(
    serve: Callable[[int], str], tmp_path: Path
) -> None:
    db = tmp_path / "hf.sqlite"
    for label, layers in (("same-model", 6), ("two-layers", 2)):
        url = serve(layers)
        result = soakgate(
            "run", "--target", f"cpu0={url}", "--label", label, "--reference-model", str(MODEL),
            "--false-flag-rate", "0.05", "--calibration", "60", "--requests", "40",
            "--max-tokens", "8", "--no-stream", "--concurrency", "4", "--db", str(db),
            "--quiet", "--no-watch-metrics", cwd=tmp_path, timeout=1200,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
    with sqlite3.connect(db) as connection:
        counts = dict(connection.execute(
            "SELECT label, SUM(suspect) FROM generations WHERE suspect IS NOT NULL GROUP BY label"
        ).fetchall())  # fmt: skip
        scored = connection.execute("SELECT COUNT(*) FROM generations WHERE suspect IS NOT NULL "
                                    "AND json_extract(details, '$.reference.alignment') = "
                                    "'token_ids'").fetchone()[0]  # fmt: skip
        typical = connection.execute("SELECT COUNT(*) FROM generations WHERE "
                                     "json_extract(details, '$.reference.typical') IS NOT NULL"
                                     ).fetchone()[0]  # fmt: skip
        soak_z = connection.execute("SELECT COUNT(*) FROM generations WHERE "
                                    "json_extract(details, '$.reference.soak_z') IS NOT NULL"
                                    ).fetchone()[0]  # fmt: skip
        calibrations = [json.loads(d) for (d,) in connection.execute(
            "SELECT data FROM events WHERE kind = 'reference_calibration'")]  # fmt: skip
    assert scored == 80  # every row, on the candidate's own ids
    assert [c["reference"]["kind"] for c in calibrations] == ["transformers"] * 2
    assert all(c["n"] >= 57 for c in calibrations)  # the model's own samples, a few may fail
    # the exact entropy at every position: every row has its typicality, calibrated jointly
    assert typical == 80 and all(c["typical_threshold"] is not None for c in calibrations)
    # the soak samples (temperature 0.8): the whole-generation flag is its standardized
    # surprisal under that sampling distribution, exact in process, on every row
    assert all(c["whole_score"] == "soak_z" for c in calibrations)
    assert soak_z == 80
    # 5% calibrated: 2 expected of 40 (the threshold's own rate is random: below ~12%, 95%)
    assert counts["same-model"] <= 12, counts
    assert counts["two-layers"] >= 24, counts  # 183/200 (92%) in a longer run (README)


PHASES = """
import asyncio, sys, torch
from soakgate.prompts import builtin_prompts
from soakgate.reference.hf import HFReference
from soakgate.reference.http import ScoreRequest
from soakgate.targets import RequestSpec

reference = HFReference(sys.argv[1])
seen = []

def spied(method):  # torch's thread count is per thread: read it where the work ran
    def run(*args):
        out = method(*args)
        seen.append(f"{method.__name__}={torch.get_num_threads()}")
        return out
    return run

reference._sample_all = spied(reference._sample_all)
reference._forward = spied(reference._forward)

async def main() -> None:
    answers = await reference.sample(list(builtin_prompts()[:2]), RequestSpec(max_tokens=4), 2)
    outcome = answers[0][1]
    request = ScoreRequest(outcome.prompt_token_ids, outcome.token_ids, None, "")
    await reference.score(request)
    reference.calibrated()
    await reference.score(request)
    print(*seen)

asyncio.run(main())
"""


def test_the_calibration_uses_every_core_and_the_soak_leaves_one_to_the_client() -> None:
    """The calibration is drawn before the soak starts, on every usable core; once it is drawn
    the reference scores on every core but one (the soak's client needs it): in process, with
    the real model, torch's process-wide thread count in each phase. A calibration sample is
    scored while it is drawn (no forward pass of its own when `score` is asked for it)."""
    cores = len(os.sched_getaffinity(0))
    result = subprocess.run(
        [sys.executable, "-c", PHASES, str(MODEL)], cwd=REPO, capture_output=True, text=True,
        timeout=600, env={k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        f"_sample_all={cores}",  # the calibration's samples are scored as they are drawn
        f"_forward={max(1, cores - 1)}",
    ]
