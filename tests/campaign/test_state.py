"""Resume bookkeeping in the store: one campaign per name, the plan is fixed, blocks know their
state, orphaned servers are found by pid and exact command line."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from soakgate.campaign import load_campaign, plan_blocks
from soakgate.campaign.state import begin, block_statuses, reap_orphans
from soakgate.errors import ConfigError, UsageError
from soakgate.records import Event, Run
from soakgate.store import open_store
from tests.campaign.helpers import write_campaign


def test_a_campaign_name_is_started_once_then_only_resumed_with_the_same_plan(
    tmp_path: Path,
) -> None:
    campaign = load_campaign(write_campaign(tmp_path, {"a": "", "b": ""}, requests=3))
    blocks = plan_blocks(campaign.name, ["a", "b"], "interleaved", 1)
    store = open_store(tmp_path / "runs.sqlite")
    try:
        assert begin(store, campaign, blocks, resume=False) == "campaign_started"
        with pytest.raises(UsageError, match="add --resume"):
            begin(store, campaign, blocks, resume=False)
        assert begin(store, campaign, blocks, resume=True) == "campaign_resumed"
        with pytest.raises(ConfigError, match="different block plan"):
            begin(store, campaign, plan_blocks(campaign.name, ["a", "b"], "interleaved", 2), True)
    finally:
        store.close()


def test_block_status_comes_from_runs_and_events(tmp_path: Path) -> None:
    blocks = plan_blocks("t", ["a", "b", "c"], "sequential", 1)
    store = open_store(tmp_path / "runs.sqlite")
    try:
        for block, done in ((blocks[0], "completed"), (blocks[1], None)):
            run = Run(f"run-{block.label}", block.label, ["cpu:0"], time.time(),
                      campaign=block.block_id)  # fmt: skip
            store.save_run(run)
            if done:
                event = Event(run.run_id, time.time(), "block_completed", None, {"outcome": done})
                store.add([], [event])
        statuses = block_statuses(store, blocks)
    finally:
        store.close()
    assert [(s.run.run_id if s.run else None, s.outcome) for s in statuses] == [
        ("run-a", "completed"), ("run-b", None), (None, None),
    ]  # fmt: skip


def test_orphans_are_killed_only_when_pid_and_command_line_match(tmp_path: Path) -> None:
    orphan = subprocess.Popen(["sleep", "60"], start_new_session=True)
    bystander = subprocess.Popen(["sleep", "61"], start_new_session=True)
    store = open_store(tmp_path / "runs.sqlite")
    try:
        run = Run("r", "a", ["cpu:0"], time.time(), campaign="t/000-a-r0")
        store.save_run(run)
        started = [
            Event("r", time.time(), "server_started", "cpu:0",
                  {"pid": orphan.pid, "argv": ["sleep", "60"]}),
            Event("r", time.time(), "server_started", "cpu:1",  # pid reused by another program
                  {"pid": bystander.pid, "argv": ["vllm", "serve"]}),
        ]  # fmt: skip
        store.add([], started)
        assert reap_orphans(store, [run]) == [orphan.pid]
        assert orphan.wait(10) == -9
        assert bystander.poll() is None
        assert [e.kind for e in store.events("r")].count("orphan_stopped") == 1
    finally:
        store.close()
        bystander.kill()
        bystander.wait(10)
        orphan.wait(10)
