"""The driver side of a Ray campaign: each unit of a block gets an actor that Ray places on a
node with a free GPU (a one-bundle placement group of Ray's resources, softly aimed at the node
the unit ran on before); its rows are drained in batches into the block's one writer (the
campaign's single SQLite store); and a node or actor lost mid-block is a fault window, as the
guard records a dead server: `engine_fault`, a new placement (a restart), `fault_window`, and
`instance_retired` when no node takes it. Every error Ray raises for a unit ends there (or, once
the campaign is stopping, in an interrupted unit); a block whose units cannot all be placed
fails."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any

from soakgate.campaign.block import BlockContext, BlockResult, OpenBlock, stored_windows
from soakgate.campaign.blocks import Block
from soakgate.campaign.cluster import ClusterSettings, Connected, connected, local_processes
from soakgate.campaign.dispatch import DispatchBook, resent_event_data
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


class _Stopped(Exception):
    """The campaign was stopped while a unit waited on Ray."""


@contextlib.contextmanager
def ray_engine(campaign: Campaign) -> Iterator[RayEngine]:
    """The Ray engine of a campaign, connected to (or having started) its cluster."""
    with connected(campaign.cluster) as cluster:
        yield RayEngine(cluster, campaign.cluster)


class RayEngine:
    """Runs a block's units as Ray actors (a `BlockSoak`)."""

    def __init__(self, cluster: Connected, settings: ClusterSettings) -> None:
        self.ray, self.settings, self.cluster = cluster.ray, settings, cluster
        self.homes: dict[str, str] = {}
        """Target -> the node it last ran on (asked for again, softly, in the next block)."""

    def describe(self) -> dict[str, Any]:
        """The cluster as the campaign found it: address, the driver's node, each node's GPUs;
        for `local:N`, the cluster's id and this process (what `--resume` stops when it died)."""
        nodes = [{"node_id": n["NodeID"], "hostname": n.get("NodeManagerHostname", ""),
                  "alive": n.get("Alive", False), "gpus": n.get("Resources", {}).get("GPU", 0)}
                 for n in self.ray.nodes()]  # fmt: skip
        driver = self.ray.get_runtime_context().get_node_id()
        found = {"address": self.settings.address, "driver_node_id": driver, "nodes": nodes}
        if self.cluster.local_cluster is not None:
            argv = Path("/proc/self/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
            found["local_cluster"] = {
                "id": self.cluster.local_cluster, "driver_pid": os.getpid(),
                "driver_argv": [a.decode() for a in argv],
                "processes": local_processes(self.cluster.local),
            }  # fmt: skip
        return found

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
        actors = await asyncio.gather(*(u.place(0) for u in units))
        placed = [(u, a) for u, a in zip(units, actors, strict=True) if a is not None]
        if ctx.stop.is_set() or len(placed) < len(units):
            # All units or none: a block missing units is not the replicate it was planned as.
            for unit, actor in placed:
                unit.release(actor)
            outcome = "interrupted" if ctx.stop.is_set() else "failed"
        else:
            outcomes = await _run_units(placed)
            if ctx.stop.is_set():
                outcome = "interrupted"
            else:
                outcome = "failed" if all(o == "failed" for o in outcomes) else "completed"
        models = {name: m for u in units for name, m in u.models.items()}
        run.software["models"] = {**run.software.get("models", {}), **models}
        opened.writer.flush()
        faults = sum(1 for e in ctx.store.events(run.run_id) if e.kind == "engine_fault")
        return BlockResult(block, run.run_id, outcome, tallies, faults)


async def _run_units(placed: list[tuple[_Unit, Any]]) -> list[str]:
    """Each placed unit's outcome. A unit that raises (a bug: Ray's errors are faults) stops
    the others, whose actors are killed, and its error is raised."""
    tasks = [asyncio.ensure_future(unit.run(actor)) for unit, actor in placed]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for task in tasks:
            task.cancel()  # no-op for the finished ones
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in tasks:
        if not task.cancelled() and (error := task.exception()) is not None:
            raise error
    return [task.result() for task in tasks]


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
        self.book = DispatchBook(device.name, opened.cfg.load.concurrency)

    @property
    def run_record(self) -> Run:
        return self.opened.run

    async def run(self, actor: Any) -> str:
        """The unit's outcome on its placed actor: its soak's, `lost` when its node went and no
        other took it, `interrupted` when the campaign stopped meanwhile."""
        guard = self.ctx.campaign.guard
        for attempt in range(1, guard.max_restarts + 2):
            lost = await self._serve(actor)
            if not isinstance(lost, Exception):
                return lost.outcome
            actor = await self._recover(lost, attempt)
            if actor is None:
                return "interrupted" if self.ctx.stop.is_set() else "lost"
        return "lost"

    async def place(self, attempt: int) -> Any:
        """An actor on a node with free GPU(s), or None: none was found in time (recorded as
        `server_start_failed`, or `restart_failed` for a re-placement), or the campaign stopped.

        A placement group reserves the GPU(s) first (bounded by `placement_timeout`: no node
        had them free), then the actor starts in it (bounded by the server's start-up timeout:
        a slow worker start is not a missing GPU). Any error Ray raises is such a failure."""
        ray, settings, name = self.engine.ray, self.engine.settings, self.device.name
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        gpus, group, actor = settings.devices_per_instance, None, None
        error = f"{name}: no Ray node had {gpus} free GPU(s) within "
        error += f"{settings.placement_timeout_s:g} s"
        try:
            group = placement_group([{"GPU": gpus}], strategy="STRICT_PACK",
                                    _soft_target_node_id=self.engine.homes.get(name))  # fmt: skip
            await self._bounded(_wait(group.ready()), settings.placement_timeout_s)
            strategy = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=0)
            actor = ray.remote(UnitHost).options(num_gpus=gpus, num_cpus=0, max_restarts=0,
                                                 scheduling_strategy=strategy).remote()  # fmt: skip
            error = f"{name}: its Ray actor did not start within "
            error += f"{self.ctx.campaign.server.startup_timeout_s:g} s"
            where = await self._bounded(_wait(actor.where.remote()),
                                        self.ctx.campaign.server.startup_timeout_s)  # fmt: skip
        except (TimeoutError, _Stopped, ray.exceptions.RayError) as exc:
            self._let_go(actor, group)
            if isinstance(exc, _Stopped):
                return None
            if not isinstance(exc, TimeoutError):
                error = f"{name}: Ray could not start its actor: {_first_line(exc)}"
            self._event("server_start_failed" if attempt == 0 else "restart_failed",
                        error=error, attempt=attempt)  # fmt: skip
            return None
        self.groups[id(actor)] = group
        self.engine.homes[name] = str(where["node_id"])
        self._event("unit_placed", attempt=attempt, **where)
        return actor

    def release(self, actor: Any) -> None:
        """Kill a placed actor and free its GPU(s)."""
        self._let_go(actor, self.groups.pop(id(actor), None))

    def _let_go(self, actor: Any, group: Any) -> None:
        """Kill an actor and remove its placement group, whatever state Ray is in."""
        from ray.util.placement_group import remove_placement_group

        with contextlib.suppress(Exception):  # gone already, or its node with it
            if actor is not None:
                self.engine.ray.kill(actor)
        with contextlib.suppress(Exception):
            if group is not None:
                remove_placement_group(group)

    async def _bounded(self, waiting: Awaitable[Any], timeout_s: float) -> Any:
        """`waiting`'s result within `timeout_s` (else TimeoutError) unless the campaign stops
        first (`_Stopped`)."""
        task = asyncio.ensure_future(waiting)
        stop = asyncio.ensure_future(self.ctx.stop.wait())
        try:
            await asyncio.wait({task, stop}, timeout=timeout_s,
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        finally:
            stop.cancel()
            if not task.done():
                task.cancel()
            _retrieve(task)
        if task.done() and not task.cancelled():
            return task.result()
        raise _Stopped() if self.ctx.stop.is_set() else TimeoutError()

    async def _serve(self, actor: Any) -> UnitReport | Exception:
        """Run the unit's part of the block on its actor, draining its rows, until it ends
        (its report) or its node or actor is lost, or Ray fails it in any other way (the
        error)."""
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
                    if pending.done():
                        report: UnitReport = pending.result()
                        await asyncio.wait_for(self._drain(actor), guard.health_timeout_s)
                        self.models.update(report.models)
                        self._event("dispatch_lease", through=self.book.ended(), final=True)
                        return report
                except TimeoutError as exc:
                    failures += 1
                    if failures >= guard.health_failures:
                        return exc
                except ray.exceptions.RayError as exc:
                    error: Exception = exc
                    return error
        finally:
            if not pending.done():
                pending.cancel()
            _retrieve(pending)
            self.release(actor)

    async def _drain(self, actor: Any) -> None:
        """Store what the unit scored since the last drain (through the block's one writer),
        renewing its lease first when it runs short."""
        if (through := self.book.renewal()) is not None:
            self._event("dispatch_lease", through=through)  # stored before the unit may use it
        generations, events, sent = await _wait(actor.drain.remote(self.book.lease))
        self.book.reported(sent)
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
        """A lost node or actor (or any error Ray raised for the unit) is an engine fault:
        place the unit again (with the guard's back-off) and record the window; None when it
        is retired for the rest of the block, or the campaign is stopping (the unit is then
        interrupted, and `--resume` places it again)."""
        guard, name = self.ctx.campaign.guard, self.device.name
        before = self._incarnation() - 1
        start, detected = self.last_drained, time.time()
        self.engine.homes.pop(name, None)
        cause = "unit_error" if isinstance(error, self.engine.ray.exceptions.RayTaskError) \
            else "node_lost"  # fmt: skip
        self._event("engine_fault", cause=cause, window_start=start, detected_at=detected,
                    incarnation=before, error=_first_line(error),
                    sent_through=self.book.mark, lease_through=self.book.lease,
                    note="rows the unit had not shipped yet were lost with it")  # fmt: skip
        self.opened.ledger.declare_dead(name, before, start)
        actor = None
        if attempt <= guard.max_restarts and not self.ctx.stop.is_set():
            with contextlib.suppress(TimeoutError):
                delay = guard.restart_backoff_s * 2 ** (attempt - 1)
                await asyncio.wait_for(self.ctx.stop.wait(), delay)
            if not self.ctx.stop.is_set():
                actor = await self.place(attempt)
        end = time.time() if actor is not None else None
        self._event("fault_window", start=start, end=end, cause=cause, detected_at=detected,
                    recovered=actor is not None, attempts=attempt, incarnation_before=before,
                    incarnation_after=before + 1 if actor is not None else None,
                    duration_s=None if end is None else round(end - start, 3),
                    interrupted=actor is None and self.ctx.stop.is_set())  # fmt: skip
        if actor is None and not self.ctx.stop.is_set():
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
        next_seq = max(mine, default=base - 1) + 1
        cause = "actor_lost" if self.book.lease >= 0 else "driver_stopped"
        if new := self.book.start(next_seq, store.events(run.run_id)):
            missing = next_seq - base - len(mine)  # numbers below it sent once, rows lost
            self._event("resent", **resent_event_data(cause, new, missing))
        self._event("dispatch_lease", through=self.book.renewal())
        return UnitOrder(
            self.ctx.campaign, self.block, run, self.device, self.position, self.opened.log_dir,
            self.ctx.db, {name: counts[name]} if name in counts else {},
            next_seq, self._incarnation(), windows, self._stored_errors(),
            self.book.lease, tuple(self.book.resends),
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


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Take a task's exception once it is done, so that asyncio never reports it as never
    retrieved (an actor's call fails with the actor, whether anyone still waits on it or not)."""
    task.add_done_callback(lambda t: t.cancelled() or t.exception())


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
