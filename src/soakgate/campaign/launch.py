"""Build a block's server instances from the template and bring one up (launch, health, warm-up)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from soakgate.campaign.model import Campaign, ConfigEntry
from soakgate.errors import ServerError, TargetError
from soakgate.prompts import Prompt
from soakgate.records import Event, Run
from soakgate.servers import LaunchSpec, ServerInstance, free_port, render_command
from soakgate.servers.command import Device, render_env
from soakgate.store import BatchWriter
from soakgate.targets import Outcome, RequestSpec, TargetSpec
from soakgate.targets.client import connect, make_session


def launch_spec(
    campaign: Campaign, config: ConfigEntry, device: Device, position: int, log_dir: Path,
    instance: str | None = None,
) -> LaunchSpec:  # fmt: skip
    """The instance of `config` on `device`: rendered argv, pinned environment, port, logs.

    `instance` names it (target name, log file, `{instance}`) when it is not the device's own
    instance, e.g. a reference instance sharing the device; `position` picks its base_port slot.
    """
    server = campaign.server
    name = instance or device.name
    port = server.base_port + position if server.base_port else free_port(server.host)
    values = {
        "model": server.model, "port": str(port), "flags": config.flags,
        "device": device.index, "python": sys.executable, "log_dir": str(log_dir),
        "campaign_dir": str(log_dir.parent), "block": log_dir.name,
        "label": config.label, "instance": name, "host": server.host,
    }  # fmt: skip
    host = f"[{server.host}]" if ":" in server.host else server.host
    env = {**render_env(server.env, values), **render_env(config.env, values), **device.env()}
    return LaunchSpec(
        name=name, argv=render_command(server.command, values), env=env, url=f"http://{host}:{port}",
        log_dir=log_dir, health_paths=server.health_paths, stop_grace_s=server.stop_grace_s,
    )  # fmt: skip


class Launcher:
    """Starts instances of one block and records each launch as events."""

    def __init__(
        self, campaign: Campaign, run: Run, writer: BatchWriter, request: RequestSpec,
        prompts: Sequence[Prompt],
    ) -> None:  # fmt: skip
        self.campaign, self.run, self.writer = campaign, run, writer
        self.request, self.prompts = request, list(prompts)
        self.models: dict[str, str] = {}
        self._device_locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._failed_exit: dict[str, int | None] = {}

    async def bring_up(self, instance: ServerInstance) -> None:
        """Launch, wait until healthy (bounded), warm up; ServerError on any failure.

        Instances pinned to a common device start one at a time (first starts and the guard's
        restarts alike), and one that fails is stopped before the next starts: vLLM sizes its
        KV cache from the whole device's free memory while it starts, so a neighbour loading or
        freeing memory then is charged to it (vllm-project/vllm#55827, #56830) and one of them
        fails or starts with a shrunken cache."""
        async with contextlib.AsyncExitStack() as held:
            for key in _device_keys(instance):
                await held.enter_async_context(self._device_locks.setdefault(key, asyncio.Lock()))
            try:
                await self._bring_up(instance)
            except ServerError:
                self._failed_exit[instance.name] = instance.poll()  # its own, before we stop it
                await instance.stop()
                raise

    async def _bring_up(self, instance: ServerInstance) -> None:
        server = self.campaign.server
        instance.launch()
        self._event("server_started", instance, pid=instance.pid, argv=instance.spec.argv,
                    incarnation=instance.incarnation, url=instance.spec.url,
                    log_path=str(instance.log_path), pinned=_pins(instance))  # fmt: skip
        await instance.wait_healthy(server.startup_timeout_s)
        model = await self._warm_up(instance, server.warmup_requests)
        self.models[instance.name] = model
        self._event("server_ready", instance, incarnation=instance.incarnation,
                    health_path=instance.health_path, model=model,
                    startup_s=round(time.time() - instance.started_at, 3),
                    warmup_requests=server.warmup_requests)  # fmt: skip

    async def start_or_record(self, instance: ServerInstance) -> bool:
        """Bring an instance up; on failure store the error and its log tail, stop it, False."""
        try:
            await self.bring_up(instance)
        except ServerError as exc:
            self._event("server_start_failed", instance, error=str(exc),
                        exit_code=self._failed_exit.pop(instance.name, instance.poll()),
                        incarnation=instance.incarnation,
                        argv=instance.spec.argv, log_path=str(instance.log_path),
                        log_tail=instance.log_tail(self.campaign.guard.log_tail_chars))  # fmt: skip
            await self.stop(instance)
            return False
        return True

    async def stop(self, instance: ServerInstance) -> None:
        """Stop an instance (group SIGTERM, then SIGKILL) and record its exit."""
        if instance.pid is None:
            return
        code = await instance.stop()
        self._event("server_stopped", instance, pid=instance.pid, exit_code=code,
                    incarnation=instance.incarnation)  # fmt: skip

    async def _warm_up(self, instance: ServerInstance, count: int) -> str:
        """Discover the model and send `count` requests that are not stored; the model name."""
        target = TargetSpec(
            instance.spec.url, instance.name, model=self.campaign.server.model or None
        )
        async with make_session() as session:
            try:
                client = await connect(session, target)
            except TargetError as exc:
                raise ServerError(f"{instance.name}: {exc}") from None
            model = client.model
            failures = []
            for i in range(count):
                prompt = self.prompts[i % len(self.prompts)]
                outcome = await client.generate(
                    prompt, self.request, f"warmup-{i}", Outcome(time.time())
                )
                if outcome.error_class:
                    failures.append(f"{outcome.error_class}: {outcome.error_detail}")
            if count and len(failures) == count:
                raise ServerError(f"{instance.name}: every warm-up request failed ({failures[-1]})")
        return model

    def _event(self, kind: str, instance: ServerInstance, **data: object) -> None:
        self.writer.add_event(Event(self.run.run_id, time.time(), kind, instance.name, dict(data)))
        self.writer.flush()


def _device_keys(instance: ServerInstance) -> list[tuple[str, str]]:
    """(variable, device) for each device the instance is pinned to, e.g. `cuda:0,1` gives two;
    sorted, so instances that share devices take their locks in one order (no deadlock)."""
    return sorted({(k, part) for k, v in _pins(instance).items() for part in v.split(",")})


def _pins(instance: ServerInstance) -> dict[str, str]:
    """The device-pinning variables set for the instance."""
    names = ("CUDA_VISIBLE_DEVICES", "ZE_AFFINITY_MASK", "HIP_VISIBLE_DEVICES")
    return {k: v for k, v in instance.spec.env.items() if k in names}


async def start_all(
    launcher: Launcher, instances: Sequence[ServerInstance]
) -> list[ServerInstance]:
    """Start every instance concurrently; the ones that came up."""
    started = await asyncio.gather(*(launcher.start_or_record(i) for i in instances))
    return [i for i, ok in zip(instances, started, strict=True) if ok]
