"""Run one block: start the config's instances, guard them, soak, stop them, record everything."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from soakgate.campaign.blocks import Block
from soakgate.campaign.launch import Launcher, launch_spec, start_all
from soakgate.campaign.model import Campaign, ConfigEntry
from soakgate.campaign.reference import reference_specs, start_differential
from soakgate.campaign.soakcfg import block_run, soak_config
from soakgate.campaign.state import next_incarnation
from soakgate.detectors import budget_warning
from soakgate.guard.ledger import FaultLedger
from soakgate.guard.telemetry import Sampler, open_samplers
from soakgate.guard.watch import Guard
from soakgate.load.driver import soak
from soakgate.load.preregistration import register_plan
from soakgate.load.runner import (
    SoakConfig,
    open_answer_check,
    open_twin_check,
    store_failed,
    watch_streams,
)
from soakgate.load.spec import LoadSpec, SoakResult, TargetTally
from soakgate.probes.differential import Differential
from soakgate.prompts import PromptPicker
from soakgate.records import Event, Run
from soakgate.servers import LaunchSpec, ServerInstance
from soakgate.store import BatchWriter, ObservingWriter, Store
from soakgate.store.base import TargetCounts
from soakgate.store.unstored import Sidecar
from soakgate.targets import TargetSpec

MAX_SEGMENTS = 4
"""Soak passes per block: the first, plus top-ups for fault-window errors noticed at the end."""


@dataclass(slots=True)
class BlockResult:
    """What one block did."""

    block: Block
    run_id: str
    outcome: str
    """`completed`, `failed` (no instance came up) or `interrupted`."""
    tallies: dict[str, TargetTally] = field(default_factory=dict)
    """What this invocation's soak counted."""
    faults: int = 0
    stored: dict[str, TargetCounts] = field(default_factory=dict)
    """What the database holds for the block, per target, once it ended (earlier invocations
    of a resumed block included)."""
    warnings: list[str] = field(default_factory=list)
    """One line per target whose streams arrived whole (stored as `stream_buffered`)."""


@dataclass(slots=True)
class BlockContext:
    """Shared by every block of a campaign run."""

    campaign: Campaign
    store: Store
    db: Path
    logs: Path
    stop: asyncio.Event
    on_tick: Callable[[dict[str, TargetTally], float], None] | None = None
    on_event: Callable[[str, Event], None] | None = None
    """Shown each event of a block with the block's label (live metrics)."""
    engine: BlockSoak | None = None
    """How a block's instances run and are soaked (None: local subprocesses)."""
    dispatch: Dispatch | None = None
    """A Ray unit's lease on its request numbers (`campaign.dispatch.Lease`), if any."""


class Dispatch(Protocol):
    """Admits each request before it is numbered, and is told of it before it is sent."""

    async def admit(self, target: str) -> bool: ...

    def dispatched(self, target: str, seq: int) -> None: ...


@dataclass(slots=True)
class OpenBlock:
    """A block's run record and its one writer, set up alike for every engine."""

    config: ConfigEntry
    cfg: SoakConfig
    run: Run
    resumed: bool
    writer: ObservingWriter
    ledger: FaultLedger
    log_dir: Path
    specs: list[LaunchSpec]
    """The local engine's launch specs of the block's targets (one per device)."""


BlockSoak = Callable[[BlockContext, Block, OpenBlock], Awaitable[BlockResult]]
"""An engine: runs an opened block's instances and soak, every row through `OpenBlock.writer`."""


async def run_block(ctx: BlockContext, block: Block, run: Run | None) -> BlockResult:
    """Run (or continue, when `run` is given) one block to its end."""
    opened = _open(ctx, block, run)
    writer, run = opened.writer, opened.run
    sidecar = writer.spill = Sidecar(ctx.db, run)
    ctx.store.save_run(run)
    if opened.resumed:
        _replay_faults(ctx.store, run, opened.ledger)
    writer.add_event(_event(run, "resumed" if opened.resumed else "block_started", block,
                            devices=[d.name for d in ctx.campaign.devices]))  # fmt: skip
    if warning := budget_warning(opened.cfg.detectors, opened.cfg.request.max_tokens):
        writer.add_event(_event(run, "detector_budget", block, message=warning))
    try:
        result = await (ctx.engine or _soak_here)(ctx, block, opened)
    except BaseException:
        _abandon(ctx.store, writer, run)
        raise
    finally:
        if writer.failure is None:
            sidecar.close()
    if writer.failure is not None:  # the database failed: the campaign stops here
        error = store_failed(writer, sidecar, run, ctx.db)
        sidecar.close()
        raise error
    result.stored = _finish(ctx.store, writer, run, block, result)
    return result


def _abandon(store: Store, writer: ObservingWriter, run: Run) -> None:
    """A block that ended in an error (a bug) is stored `interrupted`, never left `running`:
    `--resume` continues it."""
    run.status, run.ended_at = "interrupted", time.time()
    with contextlib.suppress(Exception):  # the store itself may be what failed
        writer.flush()
        store.save_run(run)


def _open(ctx: BlockContext, block: Block, run: Run | None) -> OpenBlock:
    """The block's config, soak settings, run record (new or continued) and writer."""
    campaign = ctx.campaign
    config = next(c for c in campaign.configs if c.label == block.label)
    log_dir = ctx.logs / f"{block.index:03d}-{_safe(block.label)}-r{block.repetition}"
    specs = [launch_spec(campaign, config, d, i, log_dir) for i, d in enumerate(campaign.devices)]
    targets = [TargetSpec(s.url, s.name, model=campaign.server.model or None) for s in specs]
    soak_cfg = soak_config(campaign, config, block, targets, ctx.db)
    resumed = run is not None
    run = run or block_run(soak_cfg, campaign, config, block)
    if not resumed and config.plan is not None:  # into the ledger before any request is sent
        register_plan(ctx.store, config.plan, run, [block.label])
    ledger = FaultLedger()
    writer = ObservingWriter(ctx.store, ledger.observe, interval_s=soak_cfg.flush_interval_s)
    if ctx.on_event is not None:
        writer.on_event = functools.partial(ctx.on_event, block.label)
    run.status, run.ended_at = "running", None
    return OpenBlock(config, soak_cfg, run, resumed, writer, ledger, log_dir, specs)


async def _soak_here(ctx: BlockContext, block: Block, opened: OpenBlock) -> BlockResult:
    """The local engine: the instances are subprocesses of this process."""
    run, cfg = opened.run, opened.cfg
    references = reference_specs(ctx.campaign, opened.config, opened.log_dir)
    instances = [ServerInstance(s, next_incarnation(ctx.store, run if opened.resumed else None,
                                                    s.name))
                 for s in [*opened.specs, *references.values()]]  # fmt: skip
    launcher = Launcher(ctx.campaign, run, opened.writer, cfg.request, cfg.prompts)
    return await soak_instances(ctx, block, run, cfg, launcher, instances, opened.ledger,
                                references)  # fmt: skip


async def soak_instances(
    ctx: BlockContext, block: Block, run: Run, cfg: SoakConfig, launcher: Launcher,
    instances: list[ServerInstance], ledger: FaultLedger,
    references: Mapping[str, LaunchSpec] | None = None,
) -> BlockResult:  # fmt: skip
    """Start the instances, soak those that came up with the guard watching, stop them all
    (here, or on a Ray node for that node's one unit)."""
    result = BlockResult(block, run.run_id, "failed")
    target_names = {t.name for t in cfg.targets}
    try:
        up = await start_all(launcher, instances)
        if any(i.name in target_names for i in up):
            differential = await start_differential(
                cfg, run, launcher.writer, ctx.campaign.reference, references or {}, up,
                launcher.models,
            )  # fmt: skip
            result = await _guarded_soak(ctx, block, run, cfg, launcher, up, ledger,
                                         differential)  # fmt: skip
    finally:  # never leave a server running, whatever happened
        for instance in instances:
            await launcher.stop(instance)
    return result


async def _guarded_soak(
    ctx: BlockContext, block: Block, run: Run, cfg: SoakConfig, launcher: Launcher,
    up: list[ServerInstance], ledger: FaultLedger, differential: Differential | None = None,
) -> BlockResult:  # fmt: skip
    """Soak the instances that came up (reference instances included), with the guard watching
    and restarting them; `differential` pairs each target with its reference."""
    writer = launcher.writer
    samplers, notes = _telemetry(ctx.campaign, up)
    for text in notes:
        writer.add_event(_event(run, "note", block, message=text))
    guard = Guard(run, up, ctx.campaign.guard, writer, launcher.bring_up, ledger, samplers)
    watcher = asyncio.create_task(guard.watch())
    picker = PromptPicker(cfg.prompts, cfg.prompt_order, cfg.seed)
    names = {i.name for i in up}
    targets = [t for t in cfg.targets if t.name in names]
    tallies: dict[str, TargetTally] = {}
    models: dict[str, str] = {}
    warnings: list[str] = []
    on_tick = watch_streams(ctx.on_tick, writer, run, warnings)  # one per block: every pass
    stopped_by = "limit"
    try:
        for segment in range(MAX_SEGMENTS):
            targets = [
                TargetSpec(t.url, t.name, model=launcher.models.get(t.name)) for t in targets
            ]
            result = await _segment(ctx, run, cfg, picker, writer, targets, guard, differential,
                                    on_tick)  # fmt: skip
            _merge(tallies, result.tallies)
            models.update(run.software.get("models", {}))
            run.software["models"] = dict(models)  # a top-up pass covers only some targets
            stopped_by = result.stopped_by
            if stopped_by != "limit" or cfg.load.requests is None:
                break
            await guard.settled(ctx.campaign.server.startup_timeout_s * 2)
            targets = _short(ctx.store, run, cfg.load, guard, targets)
            if not targets:
                break
            writer.add_event(_event(run, "top_up", block, segment=segment + 1,
                                    targets=[t.name for t in targets]))  # fmt: skip
    finally:
        await guard.close()
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    outcome = "interrupted" if stopped_by == "stop" and ctx.stop.is_set() else "completed"
    if stopped_by == "store_failed":
        return BlockResult(block, run.run_id, "failed", tallies, warnings=warnings)
    faults = sum(1 for e in ctx.store.events(run.run_id) if e.kind == "engine_fault")
    return BlockResult(block, run.run_id, outcome, tallies, faults, warnings=warnings)


async def _segment(
    ctx: BlockContext, run: Run, cfg: SoakConfig, picker: PromptPicker,
    writer: BatchWriter, targets: list[TargetSpec], guard: Guard,
    differential: Differential | None,
    on_tick: Callable[[dict[str, TargetTally], float], None],
) -> SoakResult:  # fmt: skip
    """One soak pass; the campaign's stop event stops it (the driver sets its own at the end).
    `on_tick` also watches the streams (`load.runner.watch_streams`)."""
    stop = asyncio.Event()
    relay = asyncio.create_task(_relay(ctx.stop, stop))
    gate, dispatch = guard.gate, ctx.dispatch
    if dispatch is not None:
        gate = functools.partial(_both_gates, guard.gate, dispatch.admit)
    try:
        return await soak(
            run, targets, cfg.request, cfg.load, picker, cfg.detectors, writer,
            store_text=cfg.store_text, stop=stop, on_tick=on_tick,
            incarnation=guard.incarnation, gate=gate, credit=guard.credit,
            check=differential,
            on_dispatch=dispatch.dispatched if dispatch is not None else None,
            answer_check=open_answer_check(cfg, run), twins=open_twin_check(cfg, run, writer),
        )  # fmt: skip
    finally:
        relay.cancel()


async def _both_gates(
    first: Callable[[str], Awaitable[bool]], second: Callable[[str], Awaitable[bool]], target: str
) -> bool:
    return await first(target) and await second(target)


async def _relay(source: asyncio.Event, sink: asyncio.Event) -> None:
    await source.wait()
    sink.set()


def _short(
    store: Store, run: Run, load: LoadSpec, guard: Guard, targets: list[TargetSpec]
) -> list[TargetSpec]:
    """Serving targets that still owe requests (fault-window errors were credited back)."""
    counts = store.counts(run.run_id)
    limit = load.requests or 0
    serving = set(guard.serving())
    return [
        t for t in targets
        if t.name in serving
        and (counts[t.name].requests if t.name in counts else 0) < limit + guard.credit(t.name)
    ]  # fmt: skip


def stored_windows(store: Store, run_id: str) -> Iterator[tuple[str, int, float]]:
    """(target, incarnation before, start) of each fault window stored for the run."""
    for event in store.events(run_id):
        if event.kind == "fault_window" and event.target is not None:
            before = int(event.data.get("incarnation_before", 0))
            yield event.target, before, float(event.data.get("start", 0.0))


def _replay_faults(store: Store, run: Run, ledger: FaultLedger) -> None:
    """Rebuild the fault ledger of an interrupted block from its stored windows and rows."""
    for target, before, start in stored_windows(store, run.run_id):
        ledger.declare_dead(target, before, start)
    for generation in store.generations(run.run_id):
        ledger.observe(generation)


def _telemetry(campaign: Campaign, up: list[ServerInstance]) -> tuple[list[Sampler], list[str]]:
    """Samplers for the devices of the instances that came up."""
    if not campaign.guard.telemetry:
        return [], []
    by_vendor: dict[str, dict[str, str]] = {}
    names = {i.name for i in up}
    for device in campaign.devices:
        if device.name in names:
            by_vendor.setdefault(device.vendor, {})[device.name] = device.index
    return open_samplers(by_vendor)


def _finish(
    store: Store, writer: ObservingWriter, run: Run, block: Block, result: BlockResult
) -> dict[str, TargetCounts]:
    """Close the run record; a finished block gets `block_completed` (what resume looks for).
    The block's stored counts per target."""
    run.ended_at = time.time()
    run.status = {"completed": "completed", "failed": "failed"}.get(result.outcome, "interrupted")
    writer.flush()
    stored = store.counts(run.run_id)
    counts = {
        name: {"requests": c.requests, "errors": c.errors, "collapses": c.collapses}
        for name, c in stored.items()
    }
    kind = "block_interrupted" if result.outcome == "interrupted" else "block_completed"
    writer.add_event(_event(run, kind, block, outcome=result.outcome, counts=counts))
    writer.flush()
    store.save_run(run)
    return stored


def _merge(total: dict[str, TargetTally], part: dict[str, TargetTally]) -> None:
    for name, tally in part.items():
        into = total.setdefault(name, TargetTally(name))
        into.requests += tally.requests
        into.errors += tally.errors
        into.collapses += tally.collapses
        into.tokens += tally.tokens
        into.clean_tokens += tally.clean_tokens
        for key, n in tally.errors_by_class.items():
            into.errors_by_class[key] = into.errors_by_class.get(key, 0) + n
        into.backoffs += tally.backoffs
        into.backoff_s += tally.backoff_s
        into.up = tally.up if tally.up is not None else into.up
        into.latency.add(tally.latency)
        into.ttft.add(tally.ttft)
        if tally.last_at is not None:
            into.last_at = max(into.last_at or tally.last_at, tally.last_at)


def _event(run: Run, kind: str, block: Block, **data: object) -> Event:
    return Event(run.run_id, time.time(), kind, None, {"block": block.block_id, **data})


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)
