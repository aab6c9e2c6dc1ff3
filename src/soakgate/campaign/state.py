"""Resume bookkeeping kept in the store itself: campaign and block events, runs tagged by block.

Campaign-level events use the pseudo run id `campaign:NAME`; block events use the block's run.
A block is done when its run has a `block_completed` event (outcome `completed` or `failed`);
a block with a run but no such event was interrupted and is continued (same run) on resume.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soakgate.campaign.blocks import Block
from soakgate.campaign.model import Campaign
from soakgate.errors import ConfigError, UsageError
from soakgate.records import Event, Run
from soakgate.servers.instance import process_matches, signal_group
from soakgate.store import Store, open_analysis


def campaign_run_id(name: str) -> str:
    """The pseudo run id that campaign-level events are stored under."""
    return f"campaign:{name}"


@dataclass(slots=True)
class BlockStatus:
    """What the store says about one planned block."""

    block: Block
    run: Run | None
    """The block's run, if it was started."""
    outcome: str | None
    """`completed` or `failed` once done; None when not started or interrupted."""


def failure_reason(store: Store, run_id: str) -> str:
    """Why a block failed, from its stored `server_start_failed` events (one line)."""
    events = store.events(run_id)
    errors = [str(e.data.get("error", "?")) for e in events if e.kind == "server_start_failed"]
    return "; ".join(dict.fromkeys(errors)) or "no server came up"


def begin(store: Store, campaign: Campaign, blocks: Sequence[Block], resume: bool) -> str:
    """Record the campaign's start (or resumption); refuse to mix two campaigns of one name."""
    run_id = campaign_run_id(campaign.name)
    started = [e for e in store.events(run_id) if e.kind == "campaign_started"]
    planned = [b.block_id for b in blocks]
    if started and not resume:
        raise UsageError(
            f"campaign {campaign.name!r} already has data in this database; "
            "add --resume to continue it, or give the campaign another name"
        )
    if started and started[0].data.get("blocks") != planned:
        raise ConfigError(
            f"campaign {campaign.name!r} was started with a different block plan; "
            "restore the original file or give the campaign another name"
        )
    kind = "campaign_resumed" if started else "campaign_started"
    data: dict[str, Any] = {
        "blocks": planned, "file": str(campaign.path), "file_sha256": campaign.sha256,
        "order": campaign.order, "repetitions": campaign.repetitions,
        "devices": [d.name for d in campaign.devices], "reference": campaign.reference,
        "pid": os.getpid(),
    }  # fmt: skip
    store.add([], [Event(run_id, time.time(), kind, None, data)])
    return kind


def block_statuses(store: Store, blocks: Sequence[Block]) -> list[BlockStatus]:
    """Each planned block with its run and outcome as stored."""
    ids = {b.block_id for b in blocks}
    runs = {r.campaign: r for r in store.runs() if r.campaign in ids}
    statuses = []
    for block in blocks:
        run = runs.get(block.block_id)
        outcome = None
        if run is not None:
            done = [e for e in store.events(run.run_id) if e.kind == "block_completed"]
            outcome = str(done[-1].data.get("outcome")) if done else None
        statuses.append(BlockStatus(block, run, outcome))
    return statuses


def reap_orphans(store: Store, runs: Sequence[Run]) -> list[int]:
    """Kill the process groups of servers a killed campaign left running (pid and exact command
    line must both match what was recorded at launch); returns the pids signalled."""
    reaped = []
    for run in runs:
        for event in store.events(run.run_id):
            if event.kind != "server_started":
                continue
            pid, argv = event.data.get("pid"), event.data.get("argv")
            if isinstance(pid, int) and isinstance(argv, list) and process_matches(pid, argv):
                signal_group(pid, signal.SIGKILL)
                reaped.append(pid)
                store.add([], [Event(run.run_id, time.time(), "orphan_stopped", event.target,
                                     {"pid": pid, "argv": argv})])  # fmt: skip
    return reaped


def stop_orphan_cluster(db: Path, campaign: Campaign) -> list[dict[str, Any]]:
    """Stop the `local:N` Ray clusters a killed driver of this campaign left running (before
    `--resume` starts its own beside them); what was stopped, for `orphan_stopped` events."""
    from soakgate.campaign.cluster import stop_local_cluster

    if campaign.cluster.local_nodes is None or not db.is_file():
        return []
    store = open_analysis(db)
    try:
        events = store.events(campaign_run_id(campaign.name))
        recorded = [e.data.get("local_cluster") for e in events if e.kind == "cluster"]
    finally:
        store.close()
    stopped = []
    for found in recorded:
        if not isinstance(found, dict) or not isinstance(found.get("id"), str):
            continue
        driver = found.get("driver_pid"), found.get("driver_argv")
        alive = (driver[0], list(driver[1])) if isinstance(driver[0], int) \
            and isinstance(driver[1], list) else None  # fmt: skip
        processes = [p for p in found.get("processes", []) if isinstance(p, list) and len(p) == 2]
        if pids := stop_local_cluster(found["id"], alive, processes):
            stopped.append({"cluster": found["id"], "pids": pids})
    return stopped


def next_incarnation(store: Store, run: Run | None, target: str) -> int:
    """First incarnation number for a (re)started block: one past any stored launch."""
    if run is None:
        return 0
    seen = [
        int(e.data.get("incarnation", -1))
        for e in store.events(run.run_id)
        if e.kind == "server_started" and e.target == target
    ]
    return max(seen, default=-1) + 1


def log_root(db: Path, campaign: Campaign) -> Path:
    """Folder for server logs, next to the database: `runs.logs/NAME/`."""
    return db.parent / f"{db.stem}.logs" / campaign.name
