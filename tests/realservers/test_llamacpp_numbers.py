"""Issue 29 item 3 on a real server: llama.cpp's log-probabilities (its own sampled tokens, five
alternatives each, greedy and sampled, chat and completions) pass the `inconsistent` check, which
tells tokens apart by id where llama.cpp gives one (its sampled entry writes a whole UTF-8
character where its alternatives write the token's byte)."""

from __future__ import annotations

from pathlib import Path

import pytest

from soakgate.servers.llamacpp import LlamaCppProcess
from soakgate.store import open_store
from tests.cli.helpers import soakgate

REQUESTS = 48


@pytest.mark.llamacpp
@pytest.mark.parametrize(
    ("endpoint", "temperature", "stream"),
    [("completions", "0", ()), ("chat", "0.8", ("--no-stream",)), ("chat", "0", ())],
)  # fmt: skip
def test_real_log_probabilities_are_never_called_inconsistent(
    llamacpp: LlamaCppProcess, tmp_path: Path, endpoint: str, temperature: str,
    stream: tuple[str, ...],
) -> None:  # fmt: skip
    db = tmp_path / "numbers.sqlite"
    result = soakgate("run", "--target", llamacpp.url, "--requests", str(REQUESTS),
                      "--concurrency", "8", "--max-tokens", "48", "--endpoint", endpoint,
                      "--temperature", temperature, "--logprobs", "--top-logprobs", "5",
                      "--prompt-order", "random", "--prompt-seed", "29", *stream, "--db", str(db),
                      "--quiet", "--no-watch-metrics", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    store = open_store(db)
    try:
        rows = list(store.generations())
        (run,) = store.runs()
    finally:
        store.close()
    assert run.detectors["inconsistent"]  # the run checked its numbers
    assert len(rows) == REQUESTS and all(g.ok for g in rows)
    assert [g.checks for g in rows] == [[]] * REQUESTS, [g.details for g in rows if g.checks]
