"""A campaign config with a plan registers the plan's hash in the ledger before any request."""

from __future__ import annotations

from pathlib import Path

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
