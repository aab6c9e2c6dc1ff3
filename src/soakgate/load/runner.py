"""`run_soak`: open the store, create or resume the run, drive the soak, close everything."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import platform
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from soakgate import __version__
from soakgate.detectors import DetectorConfig, budget_warning
from soakgate.errors import SoakgateError, StoreFailedError, StoreLost, UsageError
from soakgate.load import resume
from soakgate.load.driver import note, soak
from soakgate.load.resume import prompts_digest
from soakgate.load.scoring import SoakScorer, prepare_scoring, until_signal
from soakgate.load.spec import (
    AnswerCheck,
    LoadSpec,
    OpenAnswerCheck,
    OpenTwinCheck,
    RequestCheck,
    SoakResult,
    TargetTally,
    TwinCheck,
)
from soakgate.prompts import Prompt, PromptPicker, builtin_prompts
from soakgate.records import Run
from soakgate.store import BatchWriter, Store, open_store
from soakgate.store.lock import RunLock
from soakgate.store.unstored import Sidecar
from soakgate.targets import RequestSpec, TargetSpec
from soakgate.targets.proxy import proxy_for

if TYPE_CHECKING:
    from soakgate.stats.plan import Plan

T = TypeVar("T")


@dataclass(slots=True)
class SoakConfig:
    """Everything `soakgate run` needs, already validated."""

    targets: list[TargetSpec]
    label: str
    request: RequestSpec
    load: LoadSpec
    db: Path
    prompts: list[Prompt] = field(default_factory=lambda: list(builtin_prompts()))
    prompt_order: str = "round-robin"
    seed: int = 0
    detectors: DetectorConfig = field(default_factory=DetectorConfig)
    store_text: str = "all"
    resume: str | None = None
    run_id: str | None = None
    campaign: str | None = None
    flush_interval_s: float = 0.5
    labels: dict[str, str] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)
    plan: Path | None = None
    until_verdict: bool = False
    watch_metrics: bool = True
    metrics_interval_s: float = 5.0
    progress_every_s: float = 30.0
    """Seconds between progress lines of the reference calibration (`--progress-every`)."""
    references: list[TargetSpec] = field(default_factory=list)
    reference_fraction: float = 0.03
    baseline_prompts: int = 8
    allow_foreign_tables: bool | None = None
    """Write into an SQLite file that holds other programs' tables (refused by default; None:
    the command has no option to allow it, so the refusal names none)."""
    explicit: frozenset[str] = frozenset()
    """Settings given on the command line (argparse dests): `resume` refuses one that differs
    from the stored run, and takes the stored value of every other."""
    scorer: SoakScorer | None = None
    """Reference scoring (reference/): calibrated before the soak, then scoring chosen rows."""
    twin_check: OpenTwinCheck | None = None
    """Twin requests (`checks.twins.open_twins`, handed in by the command); None: none."""
    answer_check: OpenAnswerCheck | None = None
    """What checks every request and answer (`checks.crosstalk.open_crosstalk`, handed in by
    the command), opened for the run; None: nothing."""
    probes: SoakProbes | None = None
    """What runs beside the requests (`probes.soak.StandardProbes`: the greedy differential
    against `references`, the watch of each target's /metrics). None: the plain soak (no
    metrics watch; `references` refused)."""

    def __post_init__(self) -> None:
        if not self.targets:
            raise UsageError("give at least one --target")
        names = [t.name for t in self.targets]
        if len(set(names)) != len(names):
            raise UsageError(f"target names must be unique: {', '.join(names)}")
        if self.load.concurrency < 1:
            raise UsageError(f"concurrency must be at least 1, not {self.load.concurrency}")
        bounded = self.load.requests is not None or self.load.duration_s is not None
        if not bounded and self.plan is None and self.resume is None:  # resume: the stored bound
            raise UsageError("give --requests or --duration (a soak must be bounded)")
        if self.until_verdict and self.plan is None:
            raise UsageError("--until-verdict needs --plan")
        if self.load.requests is not None and self.load.requests < 1:
            raise UsageError(f"requests must be at least 1, not {self.load.requests}")
        if self.load.duration_s is not None and self.load.duration_s <= 0:
            raise UsageError(f"duration must be positive, not {self.load.duration_s}")
        if self.references and self.probes is None:
            raise UsageError("a reference needs the soak's probes (SoakConfig.probes)")
        if self.store_text not in ("all", "flagged"):
            raise UsageError(f"--store-text must be all or flagged, not {self.store_text!r}")


def run_async(coroutine: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run` on uvloop's event loop, which costs the client ~10% less CPU per request
    (BENCHMARKS.md); the standard loop where uvloop is not installed. The cyclic collector is
    set for a soak while it runs (`soak_collections`)."""
    with soak_collections():
        try:
            import uvloop
        except ImportError:
            return asyncio.run(coroutine)
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coroutine)


SOAK_GC_THRESHOLD = 5_000
"""Container allocations between two young collections while a soak runs (CPython: 700)."""


@contextlib.contextmanager
def soak_collections() -> Iterator[None]:
    """CPython's cyclic collector set for a soak, and restored after it.

    A soak allocates a few dozen containers per request, most of which die with the request; at
    the default threshold a young collection runs every 700 allocations and walks everything
    then in flight, and each full one walks every object the imports made (numpy, rich, ...).
    Here what is alive when the soak starts is frozen (never walked again; unfrozen at the end,
    when what of it died is collected as usual) and young collections run every
    `SOAK_GC_THRESHOLD` allocations: about 3% of the client's CPU per request (BENCHMARKS.md
    §21). Cycles are still collected, later. Nothing is collected first: a collection there
    found ~15 objects for ~8 ms of the start-up. Soaks at once (in threads, or one inside
    another) share the setting: the first to start sets it, the last to end restores it.
    """
    global _SOAKING, _SAVED_THRESHOLD
    with _COLLECTOR_LOCK:
        if _SOAKING == 0:
            _SAVED_THRESHOLD = gc.get_threshold()
            gc.freeze()
            gc.set_threshold(SOAK_GC_THRESHOLD, *_SAVED_THRESHOLD[1:])
        _SOAKING += 1
    try:
        yield
    finally:
        with _COLLECTOR_LOCK:
            _SOAKING -= 1
            if _SOAKING == 0:
                gc.set_threshold(*_SAVED_THRESHOLD)
                gc.unfreeze()


_COLLECTOR_LOCK = threading.Lock()
_SOAKING = 0
"""Soaks of this process inside `soak_collections` now."""
_SAVED_THRESHOLD = gc.get_threshold()
"""The collector's thresholds before the first of them started."""


def new_run(config: SoakConfig) -> Run:
    """A fresh run record describing the load and the detectors applied."""
    load = {
        **config.request.to_dict(), "concurrency": config.load.concurrency,
        "requests_per_target": config.load.requests, "duration_s": config.load.duration_s,
        "rate": config.load.rate, "arrivals": config.load.arrivals if config.load.rate else None,
        "ramp_s": config.load.ramp_s,
        "prompt_order": config.prompt_order, "seed": config.seed,
        "sampling_seed": config.request.seed, "prompts": len(config.prompts),
        "prompts_sha256": prompts_digest(config.prompts), "store_text": config.store_text,
        **({"tls": config.targets[0].tls.stored()} if config.targets[0].tls.given else {}),
        **config.context,
    }  # fmt: skip
    proxies = {t.name: p.shown for t in config.targets if (p := proxy_for(t.url)) is not None}
    if proxies:
        load["proxy"] = proxies  # where the generation connections went through
    software = {"soakgate": __version__, "python": platform.python_version()}
    return Run(
        run_id=config.run_id or uuid.uuid4().hex[:12], label=config.label,
        targets=[t.name for t in config.targets], started_at=time.time(), load=load,
        detectors=config.detectors.to_dict(), software=software, campaign=config.campaign,
    )  # fmt: skip


def resumed_run(store: Store, config: SoakConfig) -> Run:
    """The stored run to continue; its label and targets must match the command line, and it
    continues with its stored request and load settings (`load.resume`), refusing explicit
    flags that differ and a run that already completed."""
    run = next((r for r in store.runs() if r.run_id == config.resume), None)
    if run is None:
        raise UsageError(f"no run {config.resume!r} in {config.db}")
    if run.label != config.label or run.targets != [t.name for t in config.targets]:
        raise UsageError(f"run {run.run_id} is {run.label} on {', '.join(run.targets)}")
    counts = store.counts(run.run_id)
    resume.check_resumable(run, sum(c.requests for c in counts.values()))
    conflicts = resume.settings_conflicts(run, config, config.explicit)
    if conflicts:
        raise UsageError(
            f"run {run.run_id} resumes with its stored settings; these flags differ: "
            f"{'; '.join(conflicts)} (drop them, or start a new run)"
        )
    resume.check_prompts(run, config.prompts)
    rows = (g.ended_at for g in store.generations(run.run_id)) if run.load.get("duration_s") else ()
    resume.apply_stored_settings(
        run, config, resume.soaked_seconds(run, store.events(run.run_id), rows)
    )
    run.status = "running"
    return run


class SoakProbes(Protocol):
    """What a soak runs beside its requests, supplied by its caller (`probes.soak`); the load
    loop imports none of it."""

    async def request_check(
        self, config: SoakConfig, run: Run, writer: BatchWriter, picker: PromptPicker
    ) -> RequestCheck | None:
        """Before the first request: the check made on the requests it chooses (the greedy
        differential against `config.references`), or None."""
        ...

    def watch_metrics(
        self, config: SoakConfig, run: Run, writer: BatchWriter
    ) -> Callable[[], Coroutine[Any, Any, None]]:
        """Start watching the targets' /metrics in the soak's event loop; the coroutine
        function returned stops it."""
        ...


class SoakObserver(Protocol):
    """Something that watches a soak from outside the driver (a live report): told a few times
    a second how far the soak is, and once that it ended (`stopped_by`, None on a failure)."""

    def on_tick(self, tallies: dict[str, TargetTally], elapsed_s: float) -> None:
        """Progress: per-target tallies and seconds of soak so far."""

    def close(self, stopped_by: str | None) -> None:
        """The soak ended, its rows and run record stored."""


def _ticks(
    on_tick: Callable[[dict[str, TargetTally], float], None] | None,
    observers: Sequence[SoakObserver],
) -> Callable[[dict[str, TargetTally], float], None] | None:
    hooks = [*([on_tick] if on_tick else []), *(o.on_tick for o in observers)]
    if not hooks:
        return None

    def tick(tallies: dict[str, TargetTally], elapsed_s: float) -> None:
        for hook in hooks:
            hook(tallies, elapsed_s)

    return tick


def run_soak(
    config: SoakConfig,
    on_tick: Callable[[dict[str, TargetTally], float], None] | None = None,
    store: Store | None = None,
    observers: Sequence[SoakObserver] = (),
) -> SoakResult:
    """Run (or resume) one soak to its end; Ctrl-C/SIGTERM stop it cleanly with nothing lost
    (a second one cancels what is in flight). A database that fails mid-soak stops it: the rows
    it did not take go to a sidecar file, and StoreFailedError says where. `observers` are
    told of progress and of the end (after the run record is stored)."""
    own_store = store is None
    store = store or open_store(config.db, config.allow_foreign_tables)
    stopped_by: str | None = None
    try:
        run = resumed_run(store, config) if config.resume else new_run(config)
        with RunLock(config.db, run.run_id):
            result = _run_locked(config, store, run, _ticks(on_tick, observers))
            stopped_by = result.stopped_by
            return result
    finally:
        if own_store:
            store.close()
        for observer in observers:
            observer.close(stopped_by)


def _run_locked(
    config: SoakConfig, store: Store, run: Run,
    on_tick: Callable[[dict[str, TargetTally], float], None] | None,
) -> SoakResult:  # fmt: skip
    writer = BatchWriter(store, interval_s=config.flush_interval_s)
    sidecar = writer.spill = Sidecar(config.db, run)
    try:
        result = _drive_run(config, store, run, writer, on_tick)
        if writer.failure is not None:
            raise store_failed(writer, sidecar, run, config.db)
        store.save_run(run)
        return result
    finally:
        sidecar.close()


def _drive_run(
    config: SoakConfig, store: Store, run: Run, writer: BatchWriter,
    on_tick: Callable[[dict[str, TargetTally], float], None] | None,
) -> SoakResult:  # fmt: skip
    """Soak and record how the run ended; a bug keeps the rows and marks the run `failed`."""
    try:
        if config.resume:
            writer.add_event(note(run, "resumed", duration_left_s=config.load.duration_s))
        warning = budget_warning(config.detectors, config.request.max_tokens)
        if warning:  # stored with the run, so a report of it says why short collapses went unseen
            writer.add_event(note(run, "detector_budget", message=warning))
        plan = _preregister(store, config, run)
        result = run_async(_soak_with_signals(config, run, writer, on_tick, plan))
    except BaseException:  # a bug: keep the rows, mark the run, let the error be seen
        writer.flush()
        run.status, run.ended_at = "failed", time.time()
        with contextlib.suppress(SoakgateError):
            store.save_run(run)
        raise
    run.ended_at = time.time()
    run.status = "interrupted" if result.stopped_by == "stop" else "completed"
    writer.add_event(note(run, "ended", stopped_by=result.stopped_by))
    writer.flush()
    return result


def store_failed(writer: BatchWriter, sidecar: Sidecar, run: Run, db: Path) -> StoreFailedError:
    """Close a run whose database failed: mark it `failed` wherever it can be written, and the
    one-line error that says what failed and where the rows went."""
    assert writer.failure is not None
    run.status = "failed"
    with contextlib.suppress(SoakgateError):
        sidecar.write_run(run)
    with contextlib.suppress(SoakgateError):
        writer.store.save_run(run)
    lost = isinstance(writer.failure, StoreLost)
    what = f"{writer.failure}" if lost else f"writing {db} failed ({writer.failure})"
    stored = "" if lost else f"{writer.flushed_rows} rows were stored in {db}; "
    if writer.spill_error is not None or sidecar.path is None:
        where = f"{writer.pending} rows could not be saved: {writer.spill_error}"
    else:
        into = "NEW.sqlite" if lost else str(db)
        where = (f"{sidecar.generations} rows not stored are in {sidecar.path} "
                 f"(load them with: soakgate import {into} {sidecar.path})")  # fmt: skip
    return StoreFailedError(f"{what}; the soak was stopped; {stored}{where}")


async def _soak_with_signals(
    config: SoakConfig,
    run: Run,
    writer: BatchWriter,
    on_tick: Callable[[dict[str, TargetTally], float], None] | None,
    plan: Plan | None = None,
) -> SoakResult:
    """Drive the soak with SIGINT/SIGTERM wired to a clean stop."""
    stop = asyncio.Event()
    verdict = asyncio.Event()
    monitor = None
    if plan is not None and config.until_verdict:
        from soakgate.load.preregistration import SequentialMonitor

        monitor = SequentialMonitor(plan, verdict, writer.add_event, run.run_id)
        if config.resume:
            writer.flush()
            monitor.resume(writer.store)
        asyncio.get_running_loop().create_task(_relay(verdict, stop))
    loop = asyncio.get_running_loop()
    abort = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, _on_signal, stop, abort, config.load.grace_s)
    picker = PromptPicker(config.prompts, config.prompt_order, config.seed)
    probes = config.probes
    check = await probes.request_check(config, run, writer, picker) if probes else None
    if config.scorer is not None and not await until_signal(
        stop, prepare_scoring(config.scorer, config, run, writer, picker)
    ):  # a signal during the calibration: nothing was sent to the targets, nothing is lost
        await config.scorer.close()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        return SoakResult(run, {t.name: TargetTally(t.name) for t in config.targets}, 0.0, "stop")
    watchers = None
    if probes is not None and config.watch_metrics:
        watchers = probes.watch_metrics(config, run, writer)
    warnings: list[str] = []
    on_tick = watch_streams(on_tick, writer, run, warnings)
    try:
        result = await soak(
            run, config.targets, config.request, config.load, picker, config.detectors, writer,
            store_text=config.store_text, stop=stop, on_tick=on_tick, check=check,
            labels=config.labels, on_generation=monitor.observe if monitor else None,
            abort=abort, scorer=config.scorer, answer_check=open_answer_check(config, run),
            twins=open_twin_check(config, run, writer),
        )  # fmt: skip
        on_tick(result.tallies, result.elapsed_s)  # the rows of the last batch too
        result.warnings.extend(warnings)
        if verdict.is_set():
            result.stopped_by = "verdict"
        return result
    finally:
        if watchers is not None:
            await watchers()
        if config.scorer is not None:
            await config.scorer.close()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def open_twin_check(config: SoakConfig, run: Run, writer: BatchWriter) -> TwinCheck | None:
    """The config's twin check opened for `run` (None without one)."""
    if config.twin_check is None:
        return None
    return config.twin_check(run, writer, config.resume is not None)


def open_answer_check(config: SoakConfig, run: Run) -> AnswerCheck | None:
    """The config's answer check opened for `run` (None without one)."""
    if config.answer_check is None:
        return None
    return config.answer_check(run, config.resume is not None)


def watch_streams(
    on_tick: Callable[[dict[str, TargetTally], float], None] | None, writer: BatchWriter,
    run: Run, warnings: list[str],
) -> Callable[[dict[str, TargetTally], float], None]:  # fmt: skip
    """`on_tick`, and a look at each target's streams: the first time they arrive whole (a
    buffering proxy), a `stream_buffered` event and a warning line in `warnings`; once per
    target for as long as the returned function is used (a campaign block soaks in several
    passes, each with fresh tallies)."""
    warned: set[str] = set()

    def tick(tallies: dict[str, TargetTally], elapsed_s: float) -> None:
        if on_tick is not None:
            on_tick(tallies, elapsed_s)
        for name, tally in tallies.items():
            if (message := tally.streams.warning(name)) is not None and name not in warned:
                warned.add(name)
                warnings.append(message)
                event = note(run, "stream_buffered", message=message, judged=tally.streams.judged,
                             whole=tally.streams.whole)  # fmt: skip
                event.target = name
                writer.add_event(event)

    return tick


def _on_signal(stop: asyncio.Event, abort: asyncio.Event, grace_s: float) -> None:
    """First Ctrl-C/SIGTERM: stop issuing and let what is in flight finish; second: stop now
    (in-flight requests are stored as `cancelled`)."""
    if stop.is_set():
        abort.set()
        return
    stop.set()
    print(f"soakgate: stopping; requests in flight may finish for up to {grace_s:g} s "
          "(signal again to stop now)", file=sys.stderr)  # fmt: skip


async def _relay(source: asyncio.Event, target: asyncio.Event) -> None:
    """Set `target` once `source` is set (a verdict stops the soak like Ctrl-C, but is no stop)."""
    await source.wait()
    target.set()


def _preregister(store: Store, config: SoakConfig, run: Run) -> Plan | None:
    """Register the plan's hash before the first request; size the soak from the plan if unset."""
    if config.plan is None:
        return None
    labels = sorted(set(config.labels.values()) or {run.label})
    # the statistics are imported only for a soak with a plan (start-up: BENCHMARKS.md 20)
    from soakgate.load.preregistration import planned_requests, register_plan

    plan, _ = register_plan(store, config.plan, run, labels)
    warmup = plan.warmup_requests or 0
    if config.load.requests is None and config.load.duration_s is None:
        config.load = dataclasses.replace(config.load, requests=planned_requests(plan) + warmup)
        run.load["requests_per_target"] = config.load.requests
    if warmup:  # soaked and stored, never counted: the report and compare leave these out
        run.load["warmup_requests"] = warmup
    return plan
