"""A campaign config with a plan registers the plan's hash in the ledger before any request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from soakgate.campaign import run_campaign
from soakgate.stats.plan import make_plan, write_plan
from soakgate.store import open_store
from tests.campaign.helpers import write_campaign


def test_planned_blocks_are_registered_before_their_data(tmp_path: Path) -> None:
    digest = write_plan(make_plan("h", ["eager", "graph"], 0.3, 2.0), tmp_path / "plan.toml")
    path = write_campaign(tmp_path, {"eager": "", "graph": ""}, requests=6, repetitions=1)
    text = path.read_text().replace("requests = 6\n", "requests = 6\n")
    text = text.replace("flags = ''\n", "flags = ''\nplan = 'plan.toml'\n")
    path.write_text(text)
    db = tmp_path / "runs.sqlite"
    run_campaign(path, db)
    store = open_store(db)
    ledger = store.ledger()
    runs = {r.run_id: r for r in store.runs() if r.campaign}
    first_request = {
        run_id: min(g.started_at for g in store.generations(run_id)) for run_id in runs
    }
    store.close()
    assert len(ledger) == len(runs) == 2
    for entry in ledger:
        assert entry.payload["sha256"] == digest == runs[entry.payload["run_id"]].plan_sha256
        assert entry.at < first_request[entry.payload["run_id"]]


def _block_campaign(tmp_path: Path, repetitions: int, warmup: int | None = None) -> Path:
    plan = make_plan("graph collapses more", ["eager", "graph"], 0.05, 8.0, blocks=4,
                     requests_per_block=12, warmup_requests=warmup)  # fmt: skip
    write_plan(plan, tmp_path / "plan.toml")
    path = write_campaign(
        tmp_path, {"eager": "--collapse-rate 0.02", "graph": "--collapse-rate 0.6"},
        requests=999, repetitions=repetitions,
    )  # fmt: skip
    text = path.read_text().replace("requests = 999\n", "plan = 'plan.toml'\n")
    path.write_text(text)
    return path


def test_a_block_plan_with_too_few_blocks_is_refused_before_anything_runs(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = _block_campaign(tmp_path, repetitions=1)  # 1 repetition x 2 devices < 4 blocks
    done = subprocess.run(
        [sys.executable, "-m", "soakgate", "campaign", str(path), "--db", str(tmp_path / "r.sqlite")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "set repetitions = 2" in done.stderr
    assert done.stderr.count("\n") == 1 and not (tmp_path / "r.sqlite").exists()


def test_a_campaign_runs_the_block_plan_and_compare_judges_its_blocks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from soakgate.cli.main import main

    db = tmp_path / "runs.sqlite"
    run_campaign(_block_campaign(tmp_path, repetitions=2), db)
    store = open_store(db)
    counts = {}
    for run in store.runs():
        if run.campaign:
            for g in store.generations(run.run_id):
                counts[(run.run_id, g.target)] = counts.get((run.run_id, g.target), 0) + 1
    store.close()
    assert len(counts) == 8 and set(counts.values()) == {12}  # 4 blocks per arm of 12
    assert main(["compare", str(db), "eager", "graph", "--plan", str(tmp_path / "plan.toml")]) == 0
    out = capsys.readouterr().out
    assert "design: replicate blocks, 4 + 4 blocks (one per run and target): campaign blocks" in out
    assert "plan verdict: DIFFER by quasi_poisson" in out and "plan deviations: none" in out


def test_a_block_plans_warm_up_is_soaked_stored_and_never_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from soakgate.cli.main import main
    from soakgate.report.api import load_analysis

    db = tmp_path / "runs.sqlite"
    run_campaign(_block_campaign(tmp_path, repetitions=2, warmup=5), db)
    store = open_store(db)
    blocks = [run for run in store.runs() if run.campaign]
    stored = {(r.run_id, t): sum(g.target == t for g in store.generations(r.run_id))
              for r in blocks for t in r.targets}  # fmt: skip
    store.close()
    assert {run.load["warmup_requests"] for run in blocks} == {5}
    assert len(stored) == 8 and set(stored.values()) == {17}  # 5 soaked + 12 counted per block
    analysis = load_analysis(db, clustering=False)
    eager = [u for u in analysis.units if u.label == "eager" and not u.aggregate]
    assert sum(u.n for u in eager) + sum(u.errors for u in eager) == 4 * 12
    assert sum(w.requests for group in analysis.columns.warmups.values() for w in group) == 8 * 5
    assert main(["compare", str(db), "eager", "graph", "--plan", str(tmp_path / "plan.toml")]) == 0
    out = capsys.readouterr().out
    assert "4 + 4 blocks" in out and "plan deviations: none" in out
    assert main(["report", str(db), "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["uptime"] == [] or all(
        u["warmup_requests"] == 2 * 5 for u in document["uptime"]
    )
