"""Reference scoring before the soak: reach every target and the reference, then calibrate on
the reference's own samples, and let a signal stop all of it at once (`until_signal`)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from soakgate.load.driver import note
from soakgate.load.spec import GenerationScorer
from soakgate.prompts import PromptPicker
from soakgate.records import Run
from soakgate.store import BatchWriter
from soakgate.targets import RequestSpec
from soakgate.targets.client import discover_model, make_session

if TYPE_CHECKING:
    from soakgate.load.runner import SoakConfig


class SoakScorer(GenerationScorer, Protocol):
    """A GenerationScorer that is calibrated before the soak and released after it."""

    async def check(self) -> None: ...
    async def prepare(
        self, spec: RequestSpec, picker: PromptPicker, concurrency: int
    ) -> dict[str, Any]: ...
    async def close(self) -> None: ...


async def until_signal(stop: asyncio.Event, work: Coroutine[Any, Any, None]) -> bool:
    """Run `work` until it is done (True) or a signal sets `stop` first (False: `work` is
    cancelled at once)."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait((task, stopped), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        return False
    task.result()  # its error, if it failed
    return True


async def prepare_scoring(
    scorer: SoakScorer, config: SoakConfig, run: Run, writer: BatchWriter, picker: PromptPicker
) -> None:
    """Reach every target and the reference before the calibration (which takes minutes): an
    unreachable one is a TargetError now, in one line."""
    async with make_session(len(config.targets)) as session:
        for target in config.targets:
            await discover_model(session, target)
    await scorer.check()
    print("soakgate: calibrating reference scoring on the reference's own samples (Ctrl-C stops "
          "it)", file=sys.stderr, flush=True)  # fmt: skip
    await calibrate(scorer, config, run, writer, picker)


async def calibrate(
    scorer: SoakScorer, config: SoakConfig, run: Run, writer: BatchWriter, picker: PromptPicker
) -> None:
    """Calibrate reference scoring on the reference's own samples; store it with the run (an
    event and `run.detectors["reference"]`) and say so when it is too small to trust well."""
    try:
        calibration = await scorer.prepare(config.request, picker, config.load.concurrency)
    except BaseException:
        await scorer.close()
        raise
    run.detectors["reference"] = calibration
    writer.add_event(note(run, "reference_calibration", **calibration))
    if calibration.get("warning"):
        print(f"soakgate: warning: {calibration['warning']}", file=sys.stderr, flush=True)
    if calibration.get("sampling_note"):
        print(f"soakgate: note: {calibration['sampling_note']}", file=sys.stderr, flush=True)
