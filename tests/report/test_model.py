"""The analysis model: units, aggregates, rates, throughput, clustering and warnings."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from tests.report.synth import add_run, bernoulli, bursty

from soakgate.records import Event
from soakgate.report.analyze import analyze
from soakgate.report.api import load_analysis
from soakgate.report.model import AGGREGATE, ClusteringOptions
from soakgate.report.tables import summary_rows
from soakgate.stats.plan import make_plan, plan_sha256, plan_to_dict
from soakgate.store import MemoryStore, open_store


def test_units_and_aggregates_are_tallied_exactly(
    two_label_db: Path, fast: ClusteringOptions
) -> None:
    analysis = load_analysis(two_label_db, fast)
    names = [(u.label, u.target, u.aggregate) for u in analysis.units]
    assert names == [
        ("eager", "gpu0", False), ("eager", "gpu1", False), ("eager", AGGREGATE, True),
        ("graph", "gpu0", False), ("graph", "gpu1", False), ("graph", AGGREGATE, True),
    ]  # fmt: skip
    gpu0 = analysis.unit("eager", "gpu0")
    assert gpu0 is not None and gpu0.rate is not None
    expected = bernoulli(3000, 0.004, 1)
    collapses = sum(bad for i, bad in enumerate(expected) if i not in (5, 9))
    assert (gpu0.requests, gpu0.n, gpu0.collapses) == (3000, 2998, collapses)
    assert gpu0.errors_by_class == {"timeout": 1, "http_5xx": 1}
    assert gpu0.rate.ci_low < gpu0.rate.rate < gpu0.rate.ci_high
    # 3000 requests 0.05 s apart, each 0.5 s long; 32 tokens per clean generation.
    assert gpu0.duration_s == pytest.approx(2999 * 0.05 + 0.5)
    assert gpu0.tok_s == pytest.approx(2998 * 32 / gpu0.duration_s)
    assert gpu0.clean_tok_s == pytest.approx((2998 - collapses) * 32 / gpu0.duration_s)
    eager = analysis.unit("eager")
    assert eager is not None and eager.aggregate and eager.targets == ("gpu0", "gpu1")
    assert eager.n == 2998 + 3000 and eager.clustering is None
    # Both targets ran side by side: the aggregate's throughput is their sum.
    assert eager.duration_s == pytest.approx(gpu0.duration_s)
    assert eager.tok_s == pytest.approx((2998 + 3000) * 32 / gpu0.duration_s)


def test_zero_collapses_give_the_one_sided_bound(fast: ClusteringOptions) -> None:
    store = MemoryStore()
    add_run(store, "quiet", "gpu0", [False] * 1000)
    unit = analyze(store, fast).units[0]
    assert unit.rate is not None and unit.collapses == 0
    bound = unit.rate.upper_bound_one_sided
    assert bound == pytest.approx(1 - 0.05 ** (1 / 1000))
    assert bound is not None and math.isclose(bound, 3 / 1000, rel_tol=0.01)  # rule of three


def test_memory_and_sqlite_stores_give_the_same_report(
    tmp_path: Path, fast: ClusteringOptions
) -> None:
    memory, sqlite = MemoryStore(), open_store(tmp_path / "s.sqlite")
    for store in (memory, sqlite):
        add_run(store, "a", "t0", bursty(2500, 8), errors={3: "timeout"})
        add_run(store, "a", "t0", bernoulli(1500, 0.01, 9), start=1_700_009_000.0)
    assert summary_rows(analyze(memory, fast)) == summary_rows(analyze(sqlite, fast))
    unit = analyze(sqlite, fast).units[0]
    assert len(unit.slices) == 2 and [s.requests for s in unit.slices] == [2500, 1500]
    sqlite.close()


def test_bursty_target_is_clustered_and_independent_one_is_not(
    two_label_db: Path, fast: ClusteringOptions
) -> None:
    analysis = load_analysis(two_label_db, fast)
    bursty_unit, calm = analysis.unit("graph", "gpu0"), analysis.unit("graph", "gpu1")
    assert bursty_unit is not None and bursty_unit.clustering is not None
    assert calm is not None and calm.clustering is not None
    assert bursty_unit.clustering.clustered and bursty_unit.clustering.design_effect > 2
    assert bursty_unit.clustering.effective_n < bursty_unit.n / 2
    assert not calm.clustering.clustered


def test_clean_runs_raise_no_warning(two_label_db: Path, fast: ClusteringOptions) -> None:
    assert load_analysis(two_label_db, fast, clustering=False).warnings == []


def test_idle_gap_resume_and_short_runs_are_warned(fast: ClusteringOptions) -> None:
    store = MemoryStore()
    add_run(store, "gappy", "gpu0", bernoulli(800, 0.01, 1), pause_at=400, pause_s=90.0)
    resumed = add_run(store, "resumed", "gpu0", bernoulli(800, 0.01, 2), start=1_700_100_000.0,
                      events=[Event("resumed-gpu0-1700100000", 1_700_100_010.0, "resumed")])  # fmt: skip
    assert resumed.run_id == "resumed-gpu0-1700100000"
    add_run(store, "short", "gpu0", bernoulli(800, 0.01, 3), start=1_700_200_000.0,
            requests_asked=1000)  # fmt: skip
    planned = add_run(store, "planned", "gpu0", bernoulli(800, 0.01, 4), start=1_700_300_000.0)
    plan = make_plan("h", ("planned", "other"), 0.01, 2.0)
    store.append_ledger("plan", {"sha256": plan_sha256(plan), "run_id": planned.run_id,
                                 "plan": plan_to_dict(plan)}, at=1_700_299_999.0)  # fmt: skip
    warnings = "\n".join(analyze(store, fast, clustering=False).warnings)
    assert "gappy@gpu0): 1 idle gap(s) in the load, longest 90 s" in warnings
    assert "resumed-gpu0-1700100000 (resumed) was resumed 1 time(s)" in warnings
    assert "short@gpu0): 800 of the 1000 requests asked for" in warnings
    assert f"planned@gpu0): n=800 is shorter than its plan's n={plan.n_per_arm}" in warnings
    assert warnings.count("burst-scoped runs can miss state-dependent failures") == 3


def test_sequence_is_time_ordered_over_clean_generations(fast: ClusteringOptions) -> None:
    store = MemoryStore()
    pattern = [False, True, False, False, True]
    add_run(store, "a", "t", pattern, errors={2: "timeout"})
    unit = analyze(store, fast, clustering=False).units[0]
    assert unit.sequence is not None
    assert np.array_equal(unit.sequence, [False, True, False, True])


def test_the_report_prints_the_long_range_design_effect_not_the_500_window_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    import numpy as np
    from bench.processes import by_name, simulate

    from soakgate.cli.main import main
    from soakgate.stats.clustering import dispersion_test
    from soakgate.stats.dependence import long_range_design_effect
    from soakgate.store import open_store

    seq = simulate(by_name("reset-2000"), np.random.default_rng(12), 1, 40_000, 0.002)[0]
    db = tmp_path / "long.sqlite"
    store = open_store(db)
    add_run(store, "resets", "gpu0", list(seq))
    store.close()
    assert main(["report", str(db), "--format", "json"]) == 0
    (row,) = [u for u in json.loads(capsys.readouterr().out)["units"] if u["target"] == "gpu0"]
    expected = long_range_design_effect([seq]).design_effect
    assert row["design_effect"] == pytest.approx(expected)
    assert expected > 2 * dispersion_test(seq, 500)[1]
    assert row["effective_n"] == pytest.approx(40_000 / expected)
