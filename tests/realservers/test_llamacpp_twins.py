"""Issue 29 item 4 on a real server: llama.cpp honours a request's `seed`, so twin pairs (the
same body and seed, sampled at temperature 0.8) repeat at rest, each twin is compared with its
first, and the report reads the rate under load against the rate at rest. llama.cpp's answers
are not exactly reproducible (BENCHMARKS.md section 25: 1 of 64 pairs at rest differed late in
the answer), so the test asserts what a seed-ignoring server could not pass, not zero."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from soakgate.servers.llamacpp import LlamaCppProcess
from soakgate.store import open_store
from tests.cli.helpers import soakgate

REQUESTS = 64


@pytest.mark.llamacpp
def test_llama_cpp_repeats_seeded_twins_and_the_report_reads_them_against_rest(
    llamacpp: LlamaCppProcess, tmp_path: Path
) -> None:
    db = tmp_path / "twins.sqlite"
    result = soakgate("run", "--target", llamacpp.url, "--requests", str(REQUESTS),
                      "--concurrency", "8", "--max-tokens", "32", "--temperature", "0.8",
                      "--twin-fraction", "0.3", "--twin-at-rest", "12", "--db", str(db),
                      "--quiet", "--no-watch-metrics", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    store = open_store(db)
    try:
        rows = {g.request_id: g for g in store.generations()}
        (at_rest,) = [e.data for e in store.events() if e.kind == "twin_baseline"]
    finally:
        store.close()
    twins = [g for g in rows.values() if g.details.get("twin", {}).get("role") == "twin"]
    assert len(twins) >= 8 and all(g.ok for g in rows.values())
    assert all(g.checks in (["twin_mismatch"], ["+twin_mismatch"]) for g in twins)
    # a server that ignored seeds would differ in nearly every sampled pair
    assert at_rest["pairs"] == 12 and at_rest["mismatched"] <= 3, at_rest
    repeated = sum(g.checks == ["+twin_mismatch"] for g in twins)
    assert repeated >= len(twins) // 2, [g.details["twin"] for g in twins]
    document = json.loads(soakgate("report", str(db), "--format", "json", cwd=tmp_path).stdout)
    (unit,) = [o for o in document["outcomes"] if not o["aggregate"]]
    assert unit["twin_mismatch"]["n"] == len(twins) and unit["twin_mismatch"]["reading"]
