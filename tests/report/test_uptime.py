"""The report's rate against uptime per unit, and runs whose warm-up is soaked, not counted."""

from __future__ import annotations

import json

import numpy as np
from bench.processes import by_name, simulate
from tests.report.synth import add_run

from soakgate.report.analyze import analyze
from soakgate.report.model import ClusteringOptions
from soakgate.report.tables import render_json, render_markdown, render_table
from soakgate.report.uptime import unit_uptimes
from soakgate.store import MemoryStore

WARMUP = 1_500


def _store() -> MemoryStore:
    """Four blocks of a server whose hazard rises with uptime (90% of 0.5% after ~9,200), each
    soaked 1,500 requests before counting; and one short plain run of another label."""
    store = MemoryStore()
    runs = simulate(by_name("uptime"), np.random.default_rng(8), 4, 12_000, 0.005, True)
    for i, seq in enumerate(runs):
        add_run(store, "eager", "gpu0", list(seq), run_id=f"block-{i}", start=1.7e9 + i * 1e4,
                campaign="c1", load={"warmup_requests": WARMUP})  # fmt: skip
    add_run(store, "graph", "gpu0", list(np.zeros(900, dtype=bool)), start=1.8e9)
    return store


def test_warm_up_rows_are_kept_apart_and_never_counted(fast: ClusteringOptions) -> None:
    analysis = analyze(_store(), fast, clustering=False)
    eager = analysis.unit("eager", "gpu0")
    assert eager is not None and eager.n == 4 * (12_000 - WARMUP)
    warm = analysis.columns.warmups[("eager", "gpu0")]
    assert [w.requests for w in warm] == [WARMUP] * 4
    assert not any(w.requests for w in analysis.columns.warmups.get(("graph", "gpu0"), []))


def test_rate_rises_with_uptime_in_the_report(fast: ClusteringOptions) -> None:
    analysis = analyze(_store(), fast, clustering=False)
    rows = {row.name: row for row in unit_uptimes(analysis)}
    eager = rows["eager@gpu0"]
    assert (eager.runs, eager.fresh, eager.warmup_requests) == (4, 4, 4 * WARMUP)
    assert eager.bins[0].start == 0 and eager.bins[-1].end == 12_000  # uptime from the start
    assert sum(b.n for b in eager.bins) == 4 * 12_000
    assert eager.bins[0].rate < eager.bins[-1].rate / 2
    assert len(rows["graph@gpu0"].bins) == 1  # a short run: one bin
    document = json.loads(render_json(analysis))
    assert [u["unit"] for u in document["uptime"]] == ["eager@gpu0", "graph@gpu0"]
    assert document["uptime"][0]["fresh_runs"] == 4
    text = render_table(analysis, width=200)
    assert "rate against uptime (requests since each run's start" in text
    assert "eager@gpu0 (4 runs, 4 on fresh servers): 0-1,000" in text
    assert "warm-up soaked, not counted" in text
    assert "**rate against uptime" in render_markdown(analysis)


def test_short_runs_show_no_uptime_section(fast: ClusteringOptions) -> None:
    store = MemoryStore()
    add_run(store, "eager", "gpu0", [False] * 800)
    analysis = analyze(store, fast, clustering=False)
    assert unit_uptimes(analysis) == [] and json.loads(render_json(analysis))["uptime"] == []
    assert "rate against uptime" not in render_table(analysis, width=200)
