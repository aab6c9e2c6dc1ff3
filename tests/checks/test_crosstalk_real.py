"""Issue 29 item 1 on a real model: a leak that makes the model continue *another* request's
prompt (`tests/hfserve.py --crosstalk-mode context`: a request answered from the prompt of one
still waiting, as a cache slot handed to the wrong request does) leaves no canary and no span of
text to find; where the greedy differential runs, the divergent answer is the reference's
greedy answer to the other prompt. The source is usually still in flight when the leaked answer
comes, its own comparison not made, so the check asks the reference about the requests sent by
then. Every leaked request the differential compared is flagged with its source."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from soakgate.store import open_store
from tests.command_line import soakgate

MODEL = Path(__file__).resolve().parents[2].parent / "shared" / "models" / "tiny-llama-8k"
REPO = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1800),  # a model in-process, twice: minutes on a loaded machine
    pytest.mark.skipif(not (MODEL / "config.json").is_file(), reason=f"no model at {MODEL}"),
]


@pytest.fixture
def serve(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # 2 shared cores: torch's threads would fight
    started: list[subprocess.Popen[str]] = []

    def start(*args: str) -> str:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.hfserve", str(MODEL), "--layers", "6", "--window",
             "128", *args], cwd=REPO, stdout=subprocess.PIPE, text=True, env={**os.environ},
        )  # fmt: skip
        started.append(process)
        assert process.stdout is not None
        line = process.stdout.readline()
        assert "listening on " in line, "tests.hfserve did not start"
        return line.rsplit(" ", 1)[1].strip()

    yield start
    for process in started:
        process.terminate()
        process.wait(30)
        if process.stdout is not None:
            process.stdout.close()


def test_a_real_context_leak_is_found_with_its_source_by_the_greedy_differential(
    serve: object, tmp_path: Path
) -> None:
    truth = tmp_path / "truth.jsonl"
    candidate = serve("--seed", "3", "--crosstalk-at-in-flight", "2",  # type: ignore[operator]
                      "--crosstalk-rate", "0.5", "--crosstalk-mode", "context",
                      "--ground-truth", str(truth))  # fmt: skip
    reference = serve()  # type: ignore[operator]
    db = tmp_path / "x.sqlite"
    result = soakgate(
        "run", "--target", candidate, "--reference", reference, "--reference-fraction", "1",
        "--requests", "60", "--concurrency", "8", "--no-stream", "--max-tokens", "24",
        "--db", str(db), "--quiet", "--no-watch-metrics", cwd=tmp_path, timeout=1500,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in truth.read_text().splitlines()]
    leaked = {r["request_id"]: r["crosstalk"] for r in records if r.get("crosstalk")}
    store = open_store(db)
    try:
        rows = {g.request_id: g for g in store.generations()}
    finally:
        store.close()
    compared = {rid for rid, g in rows.items() if g.details.get("differential", {}).get("compared")}
    mine = set(leaked) & compared
    assert len(mine) >= 3, (leaked, len(compared))
    for rid in mine:
        evidence = rows[rid].details.get("crosstalk")
        assert rows[rid].checks == ["crosstalk"] and evidence["by"] == "reference", (rid, evidence)
        assert evidence["source"] == leaked[rid], (rid, evidence, leaked[rid])
    clean = [rid for rid in compared - set(leaked) if rows[rid].checks]
    assert not clean, [rows[rid].details["crosstalk"] for rid in clean]
