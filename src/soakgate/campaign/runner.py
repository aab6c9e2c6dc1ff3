"""`run_campaign`: walk the planned blocks in order, skipping finished ones on resume."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from soakgate.campaign.block import BlockContext, BlockResult, BlockSoak, run_block
from soakgate.campaign.blocks import Block, plan_blocks
from soakgate.campaign.model import Campaign, load_campaign
from soakgate.campaign.soakcfg import check_block_plans
from soakgate.campaign.state import (
    BlockStatus,
    begin,
    block_statuses,
    campaign_run_id,
    failure_reason,
    log_root,
    reap_orphans,
    stop_orphan_cluster,
)
from soakgate.load.runner import run_async
from soakgate.load.spec import TargetTally
from soakgate.records import Event
from soakgate.store import Store, open_store


@dataclass(slots=True)
class CampaignResult:
    """What a campaign invocation did."""

    campaign: Campaign
    blocks: list[Block]
    ran: list[BlockResult] = field(default_factory=list)
    """Blocks run (or continued) by this invocation."""
    skipped: list[BlockStatus] = field(default_factory=list)
    """Blocks already done before this invocation (resume)."""
    interrupted: bool = False
    """True when a signal stopped the campaign; `--resume` continues it."""
    failures: dict[str, str] = field(default_factory=dict)
    """Block id -> why it failed, for every failed block of the campaign (earlier ones too)."""


def run_campaign(
    path: str | Path,
    db: str | Path,
    resume: bool = False,
    on_block: Callable[[Block, str], None] | None = None,
    on_tick: Callable[[dict[str, TargetTally], float], None] | None = None,
    allow_foreign_tables: bool = False,
    on_event: Callable[[str, Event], None] | None = None,
) -> CampaignResult:
    """Run (or resume) a campaign file against the database `db`; SIGINT/SIGTERM stop it
    cleanly after the current block's in-flight requests, with everything stored.
    `allow_foreign_tables` writes into an SQLite file that holds other programs' tables;
    `on_tick` and `on_event(label, event)` watch the blocks' soaks (live metrics)."""
    campaign = load_campaign(path)
    check_block_plans(campaign)
    blocks = plan_blocks(campaign.name, [c.label for c in campaign.configs], campaign.order,
                         campaign.repetitions)  # fmt: skip
    # A killed driver's local:N cluster is stopped before a new one starts beside it.
    orphans = stop_orphan_cluster(Path(db), campaign) if resume else []
    with _engine(campaign) as engine:  # connected (or started) before anything is stored
        return _run(campaign, blocks, db, resume, allow_foreign_tables, engine,
                    (on_block, on_tick, on_event), orphans)  # fmt: skip


def _run(
    campaign: Campaign, blocks: list[Block], db: str | Path, resume: bool,
    allow_foreign_tables: bool, engine: BlockSoak | None, hooks: tuple[Any, Any, Any],
    orphans: list[dict[str, Any]],
) -> CampaignResult:  # fmt: skip
    store = open_store(db, allow_foreign_tables)
    try:
        begin(store, campaign, blocks, resume)
        run_id = campaign_run_id(campaign.name)
        store.add([], [Event(run_id, time.time(), "orphan_stopped", None, o) for o in orphans])
        if (describe := getattr(engine, "describe", None)) is not None:  # the Ray cluster
            store.add([], [Event(run_id, time.time(), "cluster", None, describe())])
        statuses = block_statuses(store, blocks)
        reap_orphans(store, [s.run for s in statuses if s.run is not None and s.outcome is None])
        result = CampaignResult(campaign, blocks, skipped=[s for s in statuses if s.outcome])
        run_async(_walk(store, Path(db), campaign, statuses, result, *hooks, engine))
        kind = "campaign_interrupted" if result.interrupted else "campaign_completed"
        final = block_statuses(store, blocks)
        result.failures = {
            s.block.block_id: failure_reason(store, s.run.run_id)
            for s in final
            if s.outcome == "failed" and s.run is not None
        }
        if result.interrupted or all(s.outcome for s in final):
            ran = [r.block.block_id for r in result.ran]
            event = Event(campaign_run_id(campaign.name), time.time(), kind, None, {"ran": ran})
            store.add([], [event])
        return result
    finally:
        store.close()


async def _walk(
    store: Store, db: Path, campaign: Campaign, statuses: list[BlockStatus],
    result: CampaignResult, on_block: Callable[[Block, str], None] | None,
    on_tick: Callable[[dict[str, TargetTally], float], None] | None,
    on_event: Callable[[str, Event], None] | None = None, engine: BlockSoak | None = None,
) -> None:  # fmt: skip
    """Run the blocks that are not done, in plan order, until done or stopped."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    ctx = BlockContext(campaign, store, db, log_root(db, campaign), stop, on_tick, on_event,
                       engine)  # fmt: skip
    try:
        for status in statuses:
            if status.outcome or stop.is_set():
                continue
            if on_block is not None:
                on_block(status.block, "continuing" if status.run else "starting")
            block_result = await run_block(ctx, status.block, status.run)
            result.ran.append(block_result)
            if on_block is not None:
                on_block(status.block, block_result.outcome)
        result.interrupted = stop.is_set()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


@contextlib.contextmanager
def _engine(campaign: Campaign) -> Iterator[BlockSoak | None]:
    """None for the local engine; the Ray engine, connected, for `[cluster] engine = "ray"`
    (imported only then: soakgate without the `ray` extra never imports Ray)."""
    if campaign.cluster.engine == "local":
        yield None
        return
    from soakgate.campaign.ray_block import ray_engine

    with ray_engine(campaign) as engine:
        yield engine
