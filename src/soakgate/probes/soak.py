"""The probes a soak runs beside its requests (`load.runner.SoakProbes`), given to it by its
caller: the greedy differential against `--reference` (after measuring the references' own
nondeterminism) and the watch of each target's Prometheus `/metrics` (speculative decoding and
the server's own load). The load loop imports none of this; `soakgate run`, `demo`, `sweep` and
the campaign pass `StandardProbes()` in `SoakConfig.probes`."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Coroutine
from typing import Any

from soakgate.load.driver import note
from soakgate.load.runner import SoakConfig
from soakgate.probes.differential import Differential, reference_baseline
from soakgate.probes.serverload import ServerLoadWatch
from soakgate.probes.specwatch import watch
from soakgate.prompts import PromptPicker
from soakgate.records import Event, Run
from soakgate.store import BatchWriter
from soakgate.targets import TargetSpec
from soakgate.targets.client import Session


class StandardProbes:
    """Every probe `soakgate run` runs beside a soak (`load.runner.SoakProbes`)."""

    async def request_check(
        self, config: SoakConfig, run: Run, writer: BatchWriter, picker: PromptPicker
    ) -> Differential | None:
        """The greedy differential against the first reference, once the references' own
        nondeterminism is measured and stored (`reference_baseline` event); None without one."""
        if not config.references:
            return None
        prompts = [picker.pick(seq) for seq in range(config.baseline_prompts)]
        baseline = await reference_baseline(config.references, prompts, config.request)
        writer.add_event(note(run, "reference_baseline", **dataclasses.asdict(baseline),
                              informative=baseline.informative,
                              compared_with=config.references[0].name))  # fmt: skip
        return Differential(config.references[0], config.reference_fraction)

    def watch_metrics(
        self, config: SoakConfig, run: Run, writer: BatchWriter
    ) -> Callable[[], Coroutine[Any, Any, None]]:
        """Scrape each target's /metrics during the soak; returns a coroutine function that
        stops it."""
        done = asyncio.Event()
        session = Session()  # connections of their own, apart from the soak's

        def recorder(target: str) -> Callable[[str, dict[str, object]], None]:
            def record(kind: str, data: dict[str, object]) -> None:
                writer.add_event(Event(run.run_id, time.time(), kind, target, dict(data)))

            return record

        def watcher(target: TargetSpec) -> Coroutine[Any, Any, None]:
            record, url = recorder(target.name), f"{target.url}/metrics"
            load = ServerLoadWatch(record)  # the server's own load, beside the spec-decode watch
            pool = session.pool(target.url, target.tls)
            return watch(pool, url, done, record, config.metrics_interval_s, also=[load])

        tasks = [asyncio.create_task(watcher(t)) for t in config.targets]

        async def stop() -> None:
            done.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            await session.close()

        return stop
