"""The driver side of a Ray campaign: each unit of a block gets an actor that Ray places on a
node with a free GPU (a one-bundle placement group of Ray's resources, softly aimed at the node
the unit ran on before); its rows are drained in batches into the block's one writer (the
campaign's single SQLite store); and a node or actor lost mid-block is a fault window, as the
guard records a dead server: `engine_fault`, a new placement (a restart), `fault_window`, and
`instance_retired` when no node takes it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any

from soakgate.campaign.block import BlockContext, BlockResult, OpenBlock, stored_windows
from soakgate.campaign.blocks import Block
from soakgate.campaign.cluster import ClusterSettings, connected
from soakgate.campaign.model import Campaign
from soakgate.campaign.ray_node import UnitHost, UnitOrder, UnitReport
from soakgate.campaign.state import next_incarnation
from soakgate.load.spec import TargetTally
from soakgate.records import Event, Run
from soakgate.servers.command import Device

SEQ_RANGE = 10**12
"""Each unit numbers its requests in its own range of the run's sequence numbers (device i:
from i * SEQ_RANGE), so units on different nodes never share a request id. A multiple of 100,
so `store_text = "flagged"` keeps every hundredth text of every unit as it does locally."""


@contextlib.contextmanager
def ray_engine(campaign: Campaign) -> Iterator[RayEngine]:
    """The Ray engine of a campaign, connected to (or having started) its cluster."""
    with connected(campaign.cluster) as ray:
        yield RayEngine(ray, campaign.cluster)


class RayEngine:
    """Runs a block's units as Ray actors (a `BlockSoak`)."""

    def __init__(self, ray: Any, settings: ClusterSettings) -> None:
        self.ray, self.settings = ray, settings
        self.homes: dict[str, str] = {}
        """Target -> the node it last ran on (asked for again, softly, in the next block)."""

    def describe(self) -> dict[str, Any]:
        """The cluster as the campaign found it: address, the driver's node, each node's GPUs."""
        nodes = [{"node_id": n["NodeID"], "hostname": n.get("NodeManagerHostname", ""),
                  "alive": n.get("Alive", False), "gpus": n.get("Resources", {}).get("GPU", 0)}
                 for n in self.ray.nodes()]  # fmt: skip
        driver = self.ray.get_runtime_context().get_node_id()
        return {"address": self.settings.address, "driver_node_id": driver, "nodes": nodes}

    async def __call__(self, ctx: BlockContext, block: Block, opened: OpenBlock) -> BlockResult:
        run = opened.run
        ctx.store.save_prompts(run.run_id, opened.cfg.prompts)
        tallies = {d.name: TargetTally(d.name, label=run.label) for d in ctx.campaign.devices}
        started = time.monotonic()

        def tick() -> None:
            if ctx.on_tick is not None:
                ctx.on_tick(tallies, time.monotonic() - started)

        units = [_Unit(self, ctx, block, opened, i, d, tallies[d.name], tick)
                 for i, d in enumerate(ctx.campaign.devices)]  # fmt: skip
        outcomes = await asyncio.gather(*(u.run() for u in units))
        models = {name: m for u in units for name, m in u.models.items()}
        run.software["models"] = {**run.software.get("models", {}), **models}
        if ctx.stop.is_set():
            outcome = "interrupted"
        else:
            outcome = "failed" if all(o == "failed" for o in outcomes) else "completed"
        opened.writer.flush()
        faults = sum(1 for e in ctx.store.events(run.run_id) if e.kind == "engine_fault")
        return BlockResult(block, run.run_id, outcome, tallies, faults)


class _Unit:
    """One (config, device) unit of a block: placed, drained, re-placed when its node is lost."""

    def __init__(
        self, engine: RayEngine, ctx: BlockContext, block: Block, opened: OpenBlock,
        position: int, device: Device, tally: TargetTally, tick: Any,
    ) -> None:  # fmt: skip
        self.engine, self.ctx, self.block, self.opened = engine, ctx, block, opened
        self.position, self.device, self.tally, self.tick = position, device, tally, tick
        self.models: dict[str, str] = {}
        self.last_drained = time.time()
        self.groups: dict[int, Any] = {}
        """Actor -> the placement group holding its GPU(s) (removed with the actor)."""

    @property
    def run_record(self) -> Run:
        return self.opened.run

    async def run(self) -> str:
        """The unit's outcome: its soak's, `failed` when it never came up, `lost` when its node
        went and no other took it."""
        guard = self.ctx.campaign.guard
        actor = await self._place(0)
        if actor is None:
            return "failed"
        for attempt in range(1, guard.max_restarts + 2):
            lost = await self._serve(actor)
            if not isinstance(lost, Exception):
                return lost.outcome
            actor = await self._recover(lost, attempt)
            if actor is None:
                return "lost"
        return "lost"

    async def _place(self, attempt: int) -> Any:
        """An actor on a node with free GPU(s), or None (recorded) when none was found in time.

        A placement group reserves the GPU(s) first (bounded by `placement_timeout`: no node
        had them free), then the actor starts in it (bounded by the server's start-up timeout:
        a slow worker start is not a missing GPU)."""
        ray, settings, name = self.engine.ray, self.engine.settings, self.device.name
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        gpus = settings.devices_per_instance
        group = placement_group([{"GPU": gpus}], strategy="STRICT_PACK",
                                _soft_target_node_id=self.engine.homes.get(name))  # fmt: skip
        actor = None
        try:
            error = f"{name}: no Ray node had {gpus} free GPU(s) within "
            error += f"{settings.placement_timeout_s:g} s"
            await asyncio.wait_for(_wait(group.ready()), settings.placement_timeout_s)
            strategy = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=0)
            actor = ray.remote(UnitHost).options(num_gpus=gpus, num_cpus=0, max_restarts=0,
                                                 scheduling_strategy=strategy).remote()  # fmt: skip
            error = f"{name}: its Ray actor did not start within "
            error += f"{self.ctx.campaign.server.startup_timeout_s:g} s"
            where = await asyncio.wait_for(_wait(actor.where.remote()),
                                           self.ctx.campaign.server.startup_timeout_s)  # fmt: skip
        except (TimeoutError, *_lost_errors(ray)) as exc:  # type: ignore[misc]
            if not isinstance(exc, TimeoutError):
                error = f"{name}: its Ray actor died before it started: {_first_line(exc)}"
            if actor is not None:
                ray.kill(actor)
            remove_placement_group(group)
            self._event("server_start_failed" if attempt == 0 else "restart_failed",
                        error=error, attempt=attempt)  # fmt: skip
            return None
        self.groups[id(actor)] = group
        self.engine.homes[name] = str(where["node_id"])
        self._event("unit_placed", attempt=attempt, **where)
        return actor

    async def _serve(self, actor: Any) -> UnitReport | Exception:
        """Run the unit's part of the block on its actor, draining its rows, until it ends
        (its report) or its node or actor is lost (the error)."""
        ray, guard = self.engine.ray, self.ctx.campaign.guard
        pending = asyncio.ensure_future(_wait(actor.run.remote(self._order())))
        stopping, failures = False, 0
        try:
            while True:
                await asyncio.wait({pending}, timeout=self.opened.cfg.flush_interval_s)
                if self.ctx.stop.is_set() and not stopping:
                    stopping = True
                    actor.stop.remote()
                try:
                    await asyncio.wait_for(self._drain(actor), guard.health_timeout_s)
                    failures = 0
                except TimeoutError as exc:
                    failures += 1
                    if failures >= guard.health_failures:
                        return exc
                except _lost_errors(ray) as exc:
                    return exc
                if pending.done():
                    try:
                        report: UnitReport = pending.result()
                    except _lost_errors(ray) as exc:
                        return exc
                    await self._drain(actor)
                    self.models.update(report.models)
                    return report
        finally:
            if not pending.done():
                pending.cancel()
            ray.kill(actor)
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self.groups.pop(id(actor)))

    async def _drain(self, actor: Any) -> None:
        """Store what the unit scored since the last drain (through the block's one writer)."""
        generations, events = await _wait(actor.drain.remote())
        writer = self.opened.writer
        for generation in generations:
            self.tally.count(generation)
            writer.add_generation(generation)
        for event in events:
            writer.add_event(event)
        if events:
            writer.flush()  # faults must survive a crash right after, as the guard's do
        else:
            writer.maybe_flush()
        self.last_drained = time.time()
        self.tick()

    async def _recover(self, error: Exception, attempt: int) -> Any:
        """A lost node or actor is an engine fault: place the unit again (with the guard's
        back-off) and record the window; None when it is retired for the rest of the block."""
        guard, name = self.ctx.campaign.guard, self.device.name
        before = self._incarnation() - 1
        start, detected = self.last_drained, time.time()
        self.engine.homes.pop(name, None)
        self._event("engine_fault", cause="node_lost", window_start=start, detected_at=detected,
                    incarnation=before, error=_first_line(error),
                    note="rows the unit had not shipped yet were lost with it")  # fmt: skip
        self.opened.ledger.declare_dead(name, before, start)
        actor = None
        if attempt <= guard.max_restarts and not self.ctx.stop.is_set():
            with contextlib.suppress(TimeoutError):
                delay = guard.restart_backoff_s * 2 ** (attempt - 1)
                await asyncio.wait_for(self.ctx.stop.wait(), delay)
            if not self.ctx.stop.is_set():
                actor = await self._place(attempt)
        end = time.time() if actor is not None else None
        self._event("fault_window", start=start, end=end, cause="node_lost", detected_at=detected,
                    recovered=actor is not None, attempts=attempt, incarnation_before=before,
                    incarnation_after=before + 1 if actor is not None else None,
                    duration_s=None if end is None else round(end - start, 3))  # fmt: skip
        if actor is None:
            self._event("instance_retired", after_attempts=attempt)
        return actor

    def _order(self) -> UnitOrder:
        """The unit's instructions, from what the driver's store holds for its target now."""
        store, run, name = self.ctx.store, self.run_record, self.device.name
        self.opened.writer.flush()
        counts = store.counts(run.run_id)
        windows = tuple((before, start) for target, before, start
                        in stored_windows(store, run.run_id) if target == name)  # fmt: skip
        base = self.position * SEQ_RANGE
        mine = [s for s in _seqs(store.request_ids(run.run_id), run.run_id)
                if base <= s < base + SEQ_RANGE]  # fmt: skip
        return UnitOrder(
            self.ctx.campaign, self.block, run, self.device, self.position, self.opened.log_dir,
            self.ctx.db, {name: counts[name]} if name in counts else {},
            max(mine, default=base - 1) + 1, self._incarnation(), windows,
            self._stored_errors(),
        )  # fmt: skip

    def _stored_errors(self) -> tuple[tuple[int, float], ...]:
        """(incarnation, ended_at) of the target's stored error rows (the fault ledger's)."""
        if not self.opened.resumed and not self.tally.errors:
            return ()
        return tuple((g.incarnation, g.ended_at) for g in
                     self.ctx.store.generations(self.run_record.run_id)
                     if g.target == self.device.name and not g.ok)  # fmt: skip

    def _incarnation(self) -> int:
        return next_incarnation(self.ctx.store, self.run_record, self.device.name)

    def _event(self, kind: str, **data: Any) -> None:
        event = Event(self.run_record.run_id, time.time(), kind, self.device.name, data)
        self.opened.writer.add_event(event)
        self.opened.writer.flush()


async def _wait(ref: Any) -> Any:
    """Await a Ray object ref from asyncio."""
    return await asyncio.wrap_future(ref.future())


def _lost_errors(ray: Any) -> tuple[type[Exception], ...]:
    """Ray's errors for an actor (or its node) that is gone or cannot be reached."""
    errors = ray.exceptions
    names = ("RayActorError", "ActorUnavailableError", "WorkerCrashedError", "ObjectLostError",
             "NodeDiedError", "OwnerDiedError")  # fmt: skip
    return tuple(getattr(errors, n) for n in names if hasattr(errors, n))


def _seqs(request_ids: set[str], run_id: str) -> Iterator[int]:
    """Sequence numbers of a run's request ids (`RUN-SEQ`)."""
    prefix = f"{run_id}-"
    for request_id in request_ids:
        tail = request_id.removeprefix(prefix) if request_id.startswith(prefix) else ""
        if tail.isdigit():
            yield int(tail)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:300] if text else type(error).__name__
