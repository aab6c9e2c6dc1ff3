"""`soakgate replay`: send the stored requests of collapsed rows again and say what triggers them.

Each collapsed row becomes its exact request again (`replayable`). It is sent N times alone,
greedy, and N times alone with its own sampling settings (its seed, where it had one), one
request at a time, each pair followed by the control prompt (a clean row of the same run); then
N times again inside a background soak of the same server at the original concurrency (the
background keeps concurrency - 1 requests in flight, the replayed one makes the rest).
`reproduce.classify` turns the counts into a verdict. The replayed generations are stored as a
probe run (label `replay`, `load.probe = "replay"`), the background soak as a run of its own
(`replay-background`), and each verdict as a `replay_verdict` event, so the report shows them;
neither run counts as a unit of the soak's analysis. The target is asked for its models before
anything is stored; a replay that stops early (`replay_send.Bounds`) is stored `failed`.
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from soakgate import __version__
from soakgate.detectors import DetectorConfig
from soakgate.errors import UsageError
from soakgate.load.driver import soak
from soakgate.load.spec import LoadSpec, TargetTally
from soakgate.probes.differential import greedy
from soakgate.probes.replay_send import REPLAY_LABEL, Bounds, ReplayStopped, Sender
from soakgate.probes.replayable import (
    StoredRequest,
    control_request,
    known_prompts,
    request_spec,
    stored_request,
)
from soakgate.probes.reproduce import (
    PROBE_RUNS,
    Evidence,
    Judgement,
    Tally,
    classify,
    input_triggered_rows,
    runs_test_p,
)
from soakgate.prompts import Prompt, PromptPicker
from soakgate.records import Event, Run
from soakgate.store import BatchWriter, SqliteStore, open_store
from soakgate.targets import TargetSpec
from soakgate.targets.client import Session, discover_model, make_session

BACKGROUND_LABEL = "replay-background"
VERDICT_EVENT = "replay_verdict"
WARM_UP_S = 10.0
"""Longest wait for the background soak to reach its concurrency before replaying into it."""


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    """What `soakgate replay` was asked to do."""

    db: Path
    target: TargetSpec
    run_id: str | None = None
    """Replay the collapses of this run only (None: of every soak run in the database)."""
    repeats: int = 5
    """N: replays per collapsed row in each of the three phases."""
    max_rows: int = 10
    """Collapsed rows replayed at most (the first ones, in time order)."""
    prompts: Sequence[Prompt] | None = None
    """The run's prompts, for a database written before schema 3 stored them."""
    bounds: Bounds = field(default_factory=Bounds)
    """When to stop early."""


@dataclass(slots=True)
class Replayed:
    """One collapsed row and what its replays did."""

    request: StoredRequest
    control: StoredRequest
    greedy: Tally = field(default_factory=Tally)
    sampled: Tally = field(default_factory=Tally)
    under_load: Tally = field(default_factory=Tally)
    judgement: Judgement | None = None

    @property
    def alone(self) -> Tally:
        """The greedy and the sampled replays together."""
        return self.greedy.plus(self.sampled)

    @property
    def verdict(self) -> str:
        """The verdict (`reproduce.VERDICTS`), once judged."""
        return self.judgement.verdict if self.judgement else "inconclusive"


@dataclass(slots=True)
class ReplayResult:
    """A finished (or stopped) replay: the probe run, each row's replays, the control, the
    background soaks' tallies, and why it stopped early."""

    run: Run
    replayed: list[Replayed]
    control_alone: Tally = field(default_factory=Tally)
    """The control prompts alone, over the whole replay."""
    alone_sequence: list[tuple[str, bool]] = field(default_factory=list)
    """Every answered request alone, in sent order: (the replayed row's request id, or
    `control`; whether it collapsed)."""
    background: dict[str, TargetTally] = field(default_factory=dict)
    """Source run id -> the tally of the background soak its rows were replayed in."""
    stopped: str | None = None
    """Why the replay stopped before its end (None: it ran to its end)."""

    def load_pool(self, source: str) -> Tally:
        """Everything answered under load for one source run: replays and background."""
        tally = self.background.get(source)
        pool = Tally(tally.requests, tally.collapses, tally.errors) if tally else Tally()
        for item in self.replayed:
            if item.request.run_id == source:
                pool = pool.plus(item.under_load)
        return pool

    def alone_pool(self) -> Tally:
        """Everything sent alone: every replay and every control."""
        pool = self.control_alone
        for item in self.replayed:
            pool = pool.plus(item.alone)
        return pool

    def judge(self) -> None:
        """Give every row its verdict from the evidence gathered so far. The runs test leaves
        out the replays of input-triggered rows: their own collapses come in runs too."""
        triggered = input_triggered_rows(
            {i.request.request_id: i.alone for i in self.replayed}, self.control_alone
        )
        state_p = runs_test_p([c for owner, c in self.alone_sequence if owner not in triggered])
        sources = {item.request.run_id for item in self.replayed}
        for item in self.replayed:
            item.judgement = classify(Evidence(
                item.alone, self.control_alone, item.under_load,
                self.load_pool(item.request.run_id), self.alone_pool(), state_p,
                rows=len(self.replayed), runs=len(sources),
            ))  # fmt: skip


def collapsed_requests(
    store: SqliteStore, run_id: str | None, limit: int, given: Sequence[Prompt] | None
) -> list[Replayed]:
    """The first `limit` collapsed rows of the soak runs (or of one), each with its exact
    request and its run's control prompt."""
    runs = [r for r in store.runs() if r.load.get("probe") not in PROBE_RUNS]
    if run_id is not None:
        runs = [r for r in runs if r.run_id == run_id]
        if not runs:
            raise UsageError(f"no soak run {run_id!r} in {store.path}")
    found: list[Replayed] = []
    for run in runs:
        if len(found) >= limit:
            break
        prompts = known_prompts(run, store.prompts(run.run_id), given)
        rows = [g for g in store.generations(run.run_id) if g.collapsed][: limit - len(found)]
        if not rows:
            continue
        requests = [stored_request(run, g, prompts) for g in rows]
        avoid = {g.prompt_id for g in rows}
        control = control_request(run, store.generations(run.run_id), prompts, avoid)
        found += [Replayed(request, control) for request in requests]
    return found  # runs oldest first, rows in seq order: the first collapses in time


def replay(config: ReplayConfig, progress: Callable[[str], None] | None = None) -> ReplayResult:
    """Replay the collapsed rows of `config.db` on `config.target` and store what happened.
    SIGINT/SIGTERM stop it at once (KeyboardInterrupt), what was replayed stored."""
    from soakgate.load.runner import run_async

    store = open_store(config.db)
    try:
        replayed = collapsed_requests(store, config.run_id, config.max_rows, config.prompts)
        if not replayed:
            where = f"run {config.run_id}" if config.run_id else str(config.db)
            raise UsageError(f"{where} holds no collapsed generation to replay")
        run = _probe_run(config, [item.request for item in replayed])
        try:
            return run_async(_replay_all(config, store, run, replayed, progress))
        except asyncio.CancelledError:  # SIGTERM cancels the replay as SIGINT does
            raise KeyboardInterrupt from None
    finally:
        store.close()


def _probe_run(config: ReplayConfig, requests: Sequence[StoredRequest]) -> Run:
    load = {
        "probe": REPLAY_LABEL, "repeats": config.repeats, "max_rows": config.max_rows,
        "source_runs": sorted({r.run_id for r in requests}),
        "requests": [r.request_id for r in requests],
        "max_failures": config.bounds.max_failures, "max_time_s": config.bounds.max_time_s,
    }  # fmt: skip
    return Run(
        run_id=uuid.uuid4().hex[:12], label=REPLAY_LABEL, targets=[config.target.name],
        started_at=time.time(), load=load, software={"soakgate": __version__},
    )  # fmt: skip


async def _replay_all(
    config: ReplayConfig, store: SqliteStore, run: Run, replayed: list[Replayed],
    progress: Callable[[str], None] | None,
) -> ReplayResult:  # fmt: skip
    result = ReplayResult(run, replayed)
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    if task is not None:
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        async with make_session() as session:
            await discover_model(session, config.target)  # unreachable: TargetError, nothing stored
            store.save_run(run)
            writer = BatchWriter(store)
            detectors = {r.run_id: DetectorConfig.of_run(r.detectors) for r in store.runs()}
            planned = 4 * config.repeats * len(replayed)
            sender = Sender(config.target, run, writer, detectors, config.bounds, planned, progress)
            try:
                await _phases(config, store, sender, session, result)
            except ReplayStopped as stopped:
                result.stopped, run.status = str(stopped), "failed"
            except asyncio.CancelledError:
                run.status = "interrupted"
                raise
            finally:
                _finish(result, run, writer, config.target.name, store)
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
    return result


async def _phases(
    config: ReplayConfig, store: SqliteStore, sender: Sender, session: Session,
    result: ReplayResult,
) -> None:  # fmt: skip
    """Alone (each pair of replays followed by the control), then under load per source run."""
    for item in result.replayed:
        for _ in range(config.repeats):
            for phase, spec, tally in (
                ("alone-greedy", greedy(item.request.spec), item.greedy),
                ("alone-sampled", item.request.spec, item.sampled),
            ):
                row = await sender.send(session, item.request, phase, spec, tally)
                _in_sequence(result, item.request.request_id, row.collapsed, row.error_class)
            row = await sender.send(session, item.control, "control-alone", item.control.spec,
                                    result.control_alone, of=item.request.request_id)  # fmt: skip
            _in_sequence(result, "control", row.collapsed, row.error_class)
    for source in dict.fromkeys(item.request.run_id for item in result.replayed):
        group = [item for item in result.replayed if item.request.run_id == source]
        await _under_load(config, store, sender, session, group, result.background)


def _in_sequence(result: ReplayResult, owner: str, collapsed: bool, error: str | None) -> None:
    if error is None:
        result.alone_sequence.append((owner, collapsed))


def _finish(
    result: ReplayResult, run: Run, writer: BatchWriter, target: str, store: SqliteStore
) -> None:
    """Judge every row, store the verdicts (and why it stopped), close the run."""
    result.judge()
    for item in result.replayed:
        writer.add_event(_verdict_event(run, target, item, result))
    if result.stopped:
        writer.add_event(Event(run.run_id, time.time(), "replay_stopped", target,
                               {"reason": result.stopped}))  # fmt: skip
    writer.flush()
    run.ended_at = time.time()
    run.status = "completed" if run.status == "running" else run.status
    store.save_run(run)


async def _under_load(
    config: ReplayConfig, store: SqliteStore, sender: Sender, session: Session,
    group: Sequence[Replayed], background: dict[str, TargetTally],
) -> None:  # fmt: skip
    """Replay a source run's rows inside a background soak at that run's concurrency."""
    source_id = group[0].request.run_id
    source = next(r for r in store.runs() if r.run_id == source_id)
    concurrency = group[0].request.concurrency
    background_run = _background_run(config, source, sender.run)
    tallies: dict[str, TargetTally] = {}
    stop = asyncio.Event()
    task: asyncio.Task[object] | None = None
    if concurrency > 1:
        bound = max(sender.deadline - time.monotonic(), 1.0)
        task = asyncio.create_task(
            _background(config, store, source, background_run, (concurrency, bound), stop, tallies)
        )
        await _warm_up(tallies, concurrency - 1, task)
    try:
        for item in group:
            for _ in range(config.repeats):
                await sender.send(session, item.request, "under-load", item.request.spec,
                                  item.under_load)  # fmt: skip
    finally:
        stop.set()
        if task is not None:
            await task
        background[source_id] = tallies.get(config.target.name, TargetTally(config.target.name))


def _background_run(config: ReplayConfig, source: Run, replay_run: Run) -> Run:
    load = {**source.load, "probe": BACKGROUND_LABEL, "replay_run": replay_run.run_id,
            "source_run": source.run_id}  # fmt: skip
    return Run(
        run_id=uuid.uuid4().hex[:12], label=BACKGROUND_LABEL, targets=[config.target.name],
        started_at=time.time(), load=load, detectors=source.detectors,
        software={"soakgate": __version__},
    )  # fmt: skip


async def _background(
    config: ReplayConfig, store: SqliteStore, source: Run, run: Run, size: tuple[int, float],
    stop: asyncio.Event, tallies: dict[str, TargetTally],
) -> None:  # fmt: skip
    """The background soak: the source run's prompts and settings, concurrency - 1 in flight,
    until `stop`, and never past the replay's own time bound."""
    spec = request_spec(source.load)
    prompts = list(known_prompts(source, store.prompts(source.run_id), config.prompts).values())
    picker = PromptPicker(prompts, str(source.load.get("prompt_order", "round-robin")),
                          int(source.load.get("seed", 0)))  # fmt: skip
    concurrency, bound_s = size
    load = LoadSpec(concurrency - 1, duration_s=bound_s, grace_s=min(spec.timeout_s, 5.0))

    def seen(now: dict[str, TargetTally], _elapsed: float) -> None:
        tallies.update(now)

    writer = BatchWriter(store)
    try:
        result = await soak(run, [config.target], spec, load, picker,
                            DetectorConfig.of_run(source.detectors), writer, stop=stop,
                            on_tick=seen)  # fmt: skip
    finally:
        writer.flush()
    tallies.update(result.tallies)
    run.ended_at, run.status = time.time(), "completed"
    store.save_run(run)


async def _warm_up(
    tallies: dict[str, TargetTally], in_flight: int, task: asyncio.Task[object]
) -> None:
    """Wait until the background soak keeps `in_flight` requests in flight (or WARM_UP_S)."""
    deadline = time.monotonic() + WARM_UP_S
    while time.monotonic() < deadline and not task.done():
        if any(t.in_flight >= in_flight and t.requests > 0 for t in tallies.values()):
            return
        await asyncio.sleep(0.05)
    if task.done():
        task.result()  # a background that could not start says why


def _verdict_event(run: Run, target: str, item: Replayed, result: ReplayResult) -> Event:
    request, judgement = item.request, item.judgement
    assert judgement is not None
    data = {
        "of": request.request_id, "source_run": request.run_id,
        "unit": f"{request.label}@{request.target}",
        "verdict": judgement.verdict, "alone_greedy": item.greedy.as_list(),
        "alone_sampled": item.sampled.as_list(), "under_load": item.under_load.as_list(),
        "control": item.control.request_id, "control_alone": result.control_alone.as_list(),
        "load_pool": result.load_pool(request.run_id).as_list(),
        "alone_pool": result.alone_pool().as_list(), "input_p": judgement.input_p,
        "load_p": judgement.load_p, "state_p": judgement.state_p,
        "levels": judgement.thresholds, "concurrency": request.concurrency,
        "request": request.describe(),
    }  # fmt: skip
    return Event(run.run_id, time.time(), VERDICT_EVENT, target, data)
