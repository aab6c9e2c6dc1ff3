"""The node side of a Ray campaign: one small actor per (config, device) instance, placed by Ray
on a node with a free GPU. The server is a subprocess of the actor, pinned to the GPU(s) Ray
assigned; the unit's guard (NVML on that node) and its soak client run in the actor as well, so
traffic stays on the node. Rows are scored here (the CPU of scoring spreads over the nodes and
the driver only writes) and wait in an outbox that the driver drains in batches into the
campaign's one database. Nothing here imports Ray: the driver wraps `UnitHost` as an actor."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from soakgate.campaign.block import BlockContext, soak_instances
from soakgate.campaign.blocks import Block
from soakgate.campaign.dispatch import Lease
from soakgate.campaign.launch import Launcher, launch_spec
from soakgate.campaign.model import Campaign
from soakgate.campaign.soakcfg import soak_config
from soakgate.guard.ledger import FaultLedger
from soakgate.load.spec import TargetTally
from soakgate.records import Event, Generation, Run
from soakgate.servers import ServerInstance
from soakgate.servers.command import Device
from soakgate.store.base import TargetCounts
from soakgate.store.batch import ObservingWriter
from soakgate.store.outbox import OutboxStore, Resend
from soakgate.targets import TargetSpec


@dataclass(frozen=True, slots=True)
class UnitOrder:
    """Everything a unit needs to run its part of a block, sent by the driver."""

    campaign: Campaign
    block: Block
    run: Run
    device: Device
    """The campaign's device entry: its name is the target; Ray chooses the GPU."""
    position: int
    """The device's position in the campaign (its base_port slot)."""
    log_dir: Path
    db: Path
    """The driver's database (named in settings only; the node never opens it)."""
    counts: dict[str, TargetCounts] = field(default_factory=dict)
    """The target's tallies already stored (a continued block)."""
    next_seq: int = 0
    """First sequence number of this unit's requests (its own range of the run's numbers)."""
    incarnation: int = 0
    """Incarnation number of the server's first launch."""
    windows: tuple[tuple[int, float], ...] = ()
    """Stored fault windows of the target: (incarnation before, start)."""
    errors: tuple[tuple[int, float], ...] = ()
    """Stored error rows of the target: (incarnation, ended_at), for the fault ledger."""
    lease: int = -1
    """Highest request number the unit may send until the driver renews it (-1: no bound)."""
    resends: tuple[Resend, ...] = ()
    """Numbers sent (or possibly sent) by lost actors of this unit: marked on re-sent rows."""


@dataclass(slots=True)
class UnitReport:
    """What a unit's part of a block did."""

    outcome: str
    models: dict[str, str]
    tally: TargetTally | None


class UnitHost:
    """One instance and its soak on a Ray node (`ray.remote(UnitHost)` on the driver)."""

    def __init__(self) -> None:
        self._store: OutboxStore | None = None
        self._writer: ObservingWriter | None = None
        self._stop: asyncio.Event | None = None
        self._stopped = False
        self._lease: Lease | None = None

    def where(self) -> dict[str, Any]:
        """The node this actor runs on and the GPUs Ray gave it."""
        import ray  # present: this runs in a Ray worker

        context = ray.get_runtime_context()
        return {"node_id": context.get_node_id(), "hostname": socket.gethostname(),
                "gpu_ids": [str(g) for g in ray.get_gpu_ids()], "pid": os.getpid()}  # fmt: skip

    async def run(self, order: UnitOrder) -> UnitReport:
        """Start the server on the assigned GPU(s), guard and soak it, stop it."""
        self._stop = asyncio.Event()
        if self._stopped:  # a stop that came before the soak began still counts
            self._stop.set()
        gpus = self.where()["gpu_ids"]
        device = Device(order.device.vendor, ",".join(gpus) or order.device.index,
                        order.device.name)  # fmt: skip
        campaign = dataclasses.replace(order.campaign, devices=(device,))
        config = next(c for c in campaign.configs if c.label == order.block.label)
        spec = launch_spec(campaign, config, device, order.position, order.log_dir)
        spec.die_with_parent = True  # a lost actor must not leave its server running
        target = TargetSpec(spec.url, spec.name, model=campaign.server.model or None)
        cfg = soak_config(campaign, config, order.block, [target], order.db)
        store = self._store = OutboxStore(device.name, order.counts, order.next_seq,
                                          order.resends)  # fmt: skip
        lease = None
        if order.lease >= 0:
            lease = self._lease = Lease(order.next_seq, order.lease)
            if self._stopped:
                lease.close()
        ledger = FaultLedger()
        for before, start in order.windows:
            ledger.declare_dead(device.name, before, start)
        for incarnation, ended_at in order.errors:
            ledger.observe(_error_row(device.name, incarnation, ended_at))
        writer = self._writer = ObservingWriter(
            store, ledger.observe, interval_s=cfg.flush_interval_s
        )
        ctx = BlockContext(campaign, store, order.db, order.log_dir.parent, self._stop,
                           dispatch=lease)  # fmt: skip
        launcher = Launcher(campaign, order.run, writer, cfg.request, cfg.prompts)
        instance = ServerInstance(spec, order.incarnation)
        try:
            result = await soak_instances(ctx, order.block, order.run, cfg, launcher, [instance],
                                          ledger)  # fmt: skip
        finally:
            if lease is not None and lease.waited:
                writer.add_event(Event(order.run.run_id, time.time(), "lease_wait", device.name,
                                       {"message": _LEASE_WAIT}))  # fmt: skip
            writer.flush()
        return UnitReport(result.outcome, dict(launcher.models), result.tallies.get(device.name))

    def drain(self, lease: int = -1) -> tuple[list[Generation], list[Event], int]:
        """The rows and events stored since the last call (scored), and the highest request
        number sent; `lease` renews how far the unit may send (the driver stored it first)."""
        if self._lease is not None:
            self._lease.renew(lease)
        if self._writer is not None:
            self._writer.maybe_flush()
        sent = -1 if self._lease is None else self._lease.sent
        rows, events = ([], []) if self._store is None else self._store.take()
        return rows, events, sent

    def stop(self) -> None:
        """Stop the soak (the campaign was interrupted); in-flight requests finish as usual."""
        self._stopped = True
        if self._stop is not None:
            self._stop.set()
        if self._lease is not None:
            self._lease.close()


_LEASE_WAIT = (
    "the unit sent requests faster than the driver drained its rows and waited for its lease "
    "to be renewed (soakgate.campaign.dispatch): its load had short pauses"
)


def _error_row(target: str, incarnation: int, ended_at: float) -> Generation:
    """A stand-in error row for the fault ledger (it reads only these four fields)."""
    return Generation(
        run_id="", request_id="", target=target, label="", seq=0, prompt_id="",
        endpoint="", stream=False, started_at=ended_at, ended_at=ended_at,
        incarnation=incarnation, error_class="replayed",
    )  # fmt: skip
