"""`run_search`: the search's walk (`search.walk`) with every block a campaign block on real
servers: guarded, stored in one database, and read back instead of run again on `--resume`."""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soakgate.campaign.block import BlockContext, run_block
from soakgate.campaign.blocks import Block
from soakgate.campaign.state import campaign_run_id, failure_reason, log_root, reap_orphans
from soakgate.errors import ConfigError, UsageError
from soakgate.load.runner import run_async
from soakgate.records import Event, Run
from soakgate.search.knobs import compose
from soakgate.search.model import Search, load_search
from soakgate.search.summary import partial_p_value
from soakgate.search.walk import Probe, Stopped, Walk, Walked
from soakgate.store import Store, open_store
from soakgate.store.base import TargetCounts


@dataclass(slots=True)
class SearchResult:
    """What a search invocation found, and how much it soaked."""

    search: Search
    walked: Walked
    ran_blocks: int = 0
    """Blocks this invocation ran (the others were read back from the store)."""


def run_search(
    path: str | Path, db: str | Path, resume: bool = False,
    on_block: Callable[[Block, str], None] | None = None,
) -> SearchResult:  # fmt: skip
    """Run (or resume) a search file against the database `db`; SIGINT/SIGTERM stop it after
    the current block, everything stored."""
    search = load_search(path)
    store = open_store(db)
    try:
        _begin(store, search, resume)
        soaker = _StoredSoaker(search, store, Path(db), on_block)
        walk = Walk(search.design, len(search.knobs), search.settings.baseline_every, soaker,
                    (search.clean.label, search.failing.label))  # fmt: skip
        walked = run_async(soaker.guarded(walk))
        if not walked.interrupted:
            _finish(store, search, walked)
        return SearchResult(search, walked, soaker.ran)
    finally:
        store.close()


class _StoredSoaker:
    """Blocks on real servers; a block finished in an earlier invocation is read back."""

    def __init__(self, search: Search, store: Store, db: Path,
                 on_block: Callable[[Block, str], None] | None) -> None:  # fmt: skip
        self.search, self.store, self.db, self.on_block = search, store, db, on_block
        self.name = search.campaign.name
        self.stored = {r.campaign: r for r in store.runs()
                       if r.campaign and r.campaign.startswith(self.name + "/")}  # fmt: skip
        self.stop = asyncio.Event()
        self.ran = 0
        reap_orphans(store, [r for r in self.stored.values() if r.status != "completed"])

    async def guarded(self, walk: Walk) -> Walked:
        """Walk with SIGINT/SIGTERM setting the stop event (the current block ends cleanly)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.stop.set)
        try:
            return await walk.run()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    async def block(self, probe: Probe, index: int, repetition: int) -> tuple[int, int]:
        if self.stop.is_set():
            raise Stopped("interrupted: rerun with --resume", interrupted=True)
        block = Block(index, probe.label, repetition,
                      f"{self.name}/{index:03d}-{probe.label}-r{repetition}")  # fmt: skip
        probe.blocks.append(block.block_id)
        run = self.stored.get(block.block_id)
        counts = _done_counts(self.store, run)
        return counts if counts is not None else await self._run(block, probe, run)

    async def _run(self, block: Block, probe: Probe, run: Run | None) -> tuple[int, int]:
        search = self.search
        config = dataclasses.replace(
            compose(search.clean, search.failing, list(search.knobs), probe.knobs, probe.label),
            requests=search.settings.block_requests, duration_s=None,
        )  # fmt: skip
        campaign = dataclasses.replace(search.campaign, configs=(config,))
        ctx = BlockContext(campaign, self.store, self.db, log_root(self.db, campaign), self.stop)
        if self.on_block is not None:
            self.on_block(block, "continuing" if run else "starting")
        result = await run_block(ctx, block, run)
        self.ran += 1
        if self.on_block is not None:
            self.on_block(block, result.outcome)
        if result.outcome == "interrupted":
            raise Stopped("interrupted: rerun with --resume", interrupted=True)
        if result.outcome == "failed":
            reason = failure_reason(self.store, result.run_id)
            raise Stopped(f"block {block.block_id} failed: {reason}")
        return _failures_answered(result.stored.values())

    def decided(self, probe: Probe) -> None:
        decision = probe.decision
        assert decision is not None
        run_id = campaign_run_id(self.name)
        seen = {e.data.get("probe") for e in self.store.events(run_id) if e.kind == "search_probe"}
        if probe.index in seen:  # stored by the invocation that decided it first
            return
        data: dict[str, Any] = {
            "probe": probe.index, "role": probe.role, "label": probe.label, "depth": probe.depth,
            "knobs": [self.search.knobs[i].describe() for i in probe.knobs],
            "outcome": decision.outcome, "failures": probe.failures, "answered": probe.answered,
            "evidence": decision.evidence, "truncated": decision.truncated,
            "blocks": list(probe.blocks),
        }  # fmt: skip
        self.store.add([], [Event(run_id, time.time(), "search_probe", None, data)])


def _done_counts(store: Store, run: Run | None) -> tuple[int, int] | None:
    """(failures, answered) of a finished stored block; None when it must (still) run."""
    if run is None:
        return None
    done = [e for e in store.events(run.run_id) if e.kind == "block_completed"]
    if not done or done[-1].data.get("outcome") != "completed":
        return None
    return _failures_answered(store.counts(run.run_id).values())


def _failures_answered(counts: Iterable[TargetCounts]) -> tuple[int, int]:
    """A block's failures (flagged generations) and answered requests, every target's."""
    counts = list(counts)
    return sum(c.collapses for c in counts), sum(c.requests - c.errors for c in counts)


def _begin(store: Store, search: Search, resume: bool) -> None:
    """Record the search's start (or resumption); refuse to mix two searches of one name."""
    run_id = campaign_run_id(search.campaign.name)
    started = [e for e in store.events(run_id) if e.kind in ("search_started", "campaign_started")]
    if started and not resume:
        raise UsageError(f"{search.campaign.name!r} already has data in this database; add "
                         "--resume to continue it, or give the search another name")  # fmt: skip
    if started and started[0].data.get("file_sha256") != search.campaign.sha256:
        raise ConfigError(f"search {search.campaign.name!r} was started from a different file; "
                          "restore it or give the search another name")  # fmt: skip
    data = {
        "file": str(search.campaign.path), "file_sha256": search.campaign.sha256,
        "knobs": [dataclasses.asdict(k) for k in search.knobs],
        "design": dataclasses.asdict(search.design),
        "settings": dataclasses.asdict(search.settings),
    }  # fmt: skip
    kind = "search_resumed" if started else "search_started"
    store.add([], [Event(run_id, time.time(), kind, None, data)])


def _finish(store: Store, search: Search, walked: Walked) -> None:
    named = None if walked.named is None else [search.knobs[i].describe() for i in walked.named]
    found = walked.dispersion
    data = {
        "named": named, "stopped": walked.stopped, "probes": len(walked.probes),
        "dispersion": None if found is None else dataclasses.asdict(found),
        "partial": partial_p_value(walked) if walked.named is not None else None,
    }  # fmt: skip
    run_id = campaign_run_id(search.campaign.name)
    store.add([], [Event(run_id, time.time(), "search_finished", None, data)])
