"""Reference scoring before the soak: reach every target and the reference, then calibrate on
the reference's own samples, and let a signal stop all of it at once (`until_signal`)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from soakgate.load.driver import note
from soakgate.load.spec import GenerationScorer
from soakgate.prompts import PromptPicker
from soakgate.records import Run
from soakgate.store import BatchWriter, Store
from soakgate.targets import RequestSpec
from soakgate.targets.client import discover_model, make_session

if TYPE_CHECKING:
    from soakgate.load.runner import SoakConfig
    from soakgate.reference.scorer import ScoringSettings


class SoakScorer(GenerationScorer, Protocol):
    """A GenerationScorer that is calibrated before the soak and released after it."""

    settings: ScoringSettings

    async def check(self) -> None: ...
    async def prepare(
        self, spec: RequestSpec, picker: PromptPicker, concurrency: int,
        progress: Callable[[int, int, float], None] | None = None,
    ) -> dict[str, Any]: ...  # fmt: skip
    def fingerprint(self, spec: RequestSpec, picker: PromptPicker) -> str: ...
    def reuse(self, stored: Mapping[str, Any]) -> None: ...
    async def close(self) -> None: ...


PROGRESS_EVERY_S = 30.0
"""Default seconds between the calibration's progress lines (after the first, its cost)."""


class CalibrationProgress:
    """Calibration progress on stderr: the first chunk's pace as the cost of the whole, then a
    line every `every_s` (count, rate, time left; 0: none after the first), so an unattended log
    shows it too."""

    def __init__(self, every_s: float = PROGRESS_EVERY_S) -> None:
        self.every_s = every_s
        self.printed_at: float | None = None

    def __call__(self, drawn: int, asked: int, seconds: float) -> None:
        rate = drawn / seconds if seconds > 0 else 0.0
        left = (asked - drawn) / rate if rate > 0 else 0.0
        if self.printed_at is None:
            line = (f"calibration: the first {drawn:,} of {asked:,} samples took {seconds:.0f} s "
                    f"({rate:.3g}/s): about {_duration(seconds + left)} in all")  # fmt: skip
        elif self.every_s and (seconds - self.printed_at >= self.every_s or drawn >= asked):
            line = (f"calibration: {drawn:,}/{asked:,} samples ({rate:.3g}/s), "
                    f"{_duration(left)} left")  # fmt: skip
        else:
            return
        self.printed_at = seconds
        print(f"soakgate: {line}", file=sys.stderr, flush=True)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def stored_calibration(store: Store, fingerprint: str) -> tuple[str, dict[str, Any]] | None:
    """The newest run in the store calibrated with this fingerprint: (run id, its calibration)."""
    for run in reversed(store.runs()):
        stored = run.detectors.get("reference")
        if isinstance(stored, dict) and stored.get("fingerprint") == fingerprint:
            return run.run_id, stored
    return None


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
    async with make_session() as session:
        for target in config.targets:
            await discover_model(session, target)
    await scorer.check()
    fingerprint = scorer.fingerprint(config.request, picker)
    found = None if scorer.settings.recalibrate else stored_calibration(writer.store, fingerprint)
    if found is not None:
        source, stored = found
        scorer.reuse(stored)
        calibration = {**stored, "reused_from": source}
        print(f"soakgate: reference calibration reused from run {source} (same reference, model "
              "files, prompts, sampling, samples and rate; --recalibrate draws a new one)",
              file=sys.stderr, flush=True)  # fmt: skip
        record(run, writer, calibration)
        return
    print(f"soakgate: calibrating reference scoring on {scorer.settings.calibration:,} of the "
          "reference's own samples (Ctrl-C stops it)", file=sys.stderr, flush=True)  # fmt: skip
    await calibrate(scorer, config, run, writer, picker, fingerprint)


async def calibrate(
    scorer: SoakScorer, config: SoakConfig, run: Run, writer: BatchWriter, picker: PromptPicker,
    fingerprint: str,
) -> None:  # fmt: skip
    """Calibrate reference scoring on the reference's own samples; store it with the run (an
    event and `run.detectors["reference"]`, with its fingerprint) and say so when it is too
    small to trust well."""
    try:
        calibration = await scorer.prepare(
            config.request,
            picker,
            config.load.concurrency,
            CalibrationProgress(config.progress_every_s),
        )
    except BaseException:
        await scorer.close()
        raise
    record(run, writer, {**calibration, "fingerprint": fingerprint})


def record(run: Run, writer: BatchWriter, calibration: dict[str, Any]) -> None:
    """Store a calibration with the run and print what it warns of."""
    run.detectors["reference"] = calibration
    writer.add_event(note(run, "reference_calibration", **calibration))
    if calibration.get("warning"):
        print(f"soakgate: warning: {calibration['warning']}", file=sys.stderr, flush=True)
    if calibration.get("sampling_note"):
        print(f"soakgate: note: {calibration['sampling_note']}", file=sys.stderr, flush=True)
