"""`soakgate replay`: send the stored requests of collapsed rows again and say what triggers them.

Each collapsed row becomes its exact request again (`replayable`). It is sent N times alone,
greedy, and N times alone with its own sampling settings (its seed, where it had one), one
request at a time; then N times again inside a background soak of the same server at the
original concurrency (the background keeps concurrency - 1 requests in flight, the replayed one
makes the rest). `reproduce.classify` turns the counts into a verdict. The replayed generations
are stored as a probe run (label `replay`, `load.probe = "replay"`), the background soak as a
run of its own (`replay-background`), and each verdict as a `replay_verdict` event, so the
report shows them; neither run counts as a unit of the soak's analysis.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from soakgate import __version__
from soakgate.detectors import DetectorConfig
from soakgate.errors import UsageError
from soakgate.load.driver import soak
from soakgate.load.record import score_generation, unscored_generation
from soakgate.load.spec import LoadSpec, TargetTally
from soakgate.probes.differential import greedy
from soakgate.probes.replayable import StoredRequest, known_prompts, stored_request
from soakgate.probes.reproduce import MEANING, PROBE_RUNS, Tally, classify
from soakgate.prompts import Prompt, PromptPicker
from soakgate.records import Event, Run
from soakgate.store import BatchWriter, SqliteStore, open_store
from soakgate.targets import OpenAIClient, Outcome, RequestSpec, TargetSpec
from soakgate.targets.client import Session, connect, discover_model, make_session

REPLAY_LABEL, BACKGROUND_LABEL = "replay", "replay-background"
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


@dataclass(slots=True)
class Replayed:
    """One collapsed row and what its replays did."""

    request: StoredRequest
    greedy: Tally = field(default_factory=Tally)
    sampled: Tally = field(default_factory=Tally)
    under_load: Tally = field(default_factory=Tally)

    @property
    def alone(self) -> Tally:
        """The greedy and the sampled replays together."""
        g, s = self.greedy, self.sampled
        return Tally(g.sent + s.sent, g.collapsed + s.collapsed, g.errors + s.errors)

    @property
    def verdict(self) -> str:
        """`input-triggered`, `only under load`, `never` or `inconclusive`."""
        return classify(self.alone, self.under_load)


@dataclass(slots=True)
class ReplayResult:
    """A finished replay: the probe run, each row's replays, the background soaks' tallies."""

    run: Run
    replayed: list[Replayed]
    background: dict[str, TargetTally] = field(default_factory=dict)
    """Source run id -> the tally of the background soak its rows were replayed in."""


def collapsed_requests(
    store: SqliteStore, run_id: str | None, limit: int, given: Sequence[Prompt] | None
) -> list[StoredRequest]:
    """The exact requests of the first `limit` collapsed rows of the soak runs (or of one)."""
    runs = [r for r in store.runs() if r.load.get("probe") not in PROBE_RUNS]
    if run_id is not None:
        runs = [r for r in runs if r.run_id == run_id]
        if not runs:
            raise UsageError(f"no soak run {run_id!r} in {store.path}")
    found: list[StoredRequest] = []
    for run in runs:
        prompts = known_prompts(run, store.prompts(run.run_id), given)
        rows = (g for g in store.generations(run.run_id) if g.collapsed)
        found += [stored_request(run, g, prompts) for g in rows]
    return found[:limit]  # runs oldest first, rows in seq order: the first collapses in time


def replay(config: ReplayConfig, progress: Callable[[str], None] | None = None) -> ReplayResult:
    """Replay the collapsed rows of `config.db` on `config.target` and store what happened."""
    from soakgate.load.runner import run_async

    store = open_store(config.db)
    try:
        requests = collapsed_requests(store, config.run_id, config.max_rows, config.prompts)
        if not requests:
            where = f"run {config.run_id}" if config.run_id else str(config.db)
            raise UsageError(f"{where} holds no collapsed generation to replay")
        run = _probe_run(config, requests)
        store.save_run(run)
        writer = BatchWriter(store)
        try:
            result = run_async(_replay_all(config, store, run, writer, requests, progress))
        finally:
            run.ended_at = time.time()
            run.status = "completed" if run.status == "running" else run.status
            writer.flush()
            store.save_run(run)
        return result
    finally:
        store.close()


def _probe_run(config: ReplayConfig, requests: Sequence[StoredRequest]) -> Run:
    load = {
        "probe": REPLAY_LABEL, "repeats": config.repeats, "max_rows": config.max_rows,
        "source_runs": sorted({r.run_id for r in requests}),
        "requests": [r.request_id for r in requests],
    }  # fmt: skip
    return Run(
        run_id=uuid.uuid4().hex[:12], label=REPLAY_LABEL, targets=[config.target.name],
        started_at=time.time(), load=load, software={"soakgate": __version__},
    )  # fmt: skip


async def _replay_all(
    config: ReplayConfig, store: SqliteStore, run: Run, writer: BatchWriter,
    requests: Sequence[StoredRequest], progress: Callable[[str], None] | None,
) -> ReplayResult:  # fmt: skip
    result = ReplayResult(run, [Replayed(r) for r in requests])
    sender = _Sender(config, run, writer, store)
    async with make_session(4) as session:
        await discover_model(session, config.target)  # an unreachable target: TargetError
        for item in result.replayed:  # alone: one request at a time, nothing else sent
            for _ in range(config.repeats):
                await sender.send(session, item, "alone-greedy", greedy(item.request.spec))
                await sender.send(session, item, "alone-sampled", item.request.spec)
            if progress:
                progress(f"{item.request.request_id}: alone {item.alone.describe()}")
        for source in dict.fromkeys(item.request.run_id for item in result.replayed):
            group = [item for item in result.replayed if item.request.run_id == source]
            result.background[source] = await _under_load(config, store, sender, session, group)
    for item in result.replayed:
        writer.add_event(_verdict_event(run, config.target.name, item))
    return result


async def _under_load(
    config: ReplayConfig, store: SqliteStore, sender: _Sender, session: Session,
    group: Sequence[Replayed],
) -> TargetTally:  # fmt: skip
    """Replay a source run's rows inside a background soak at that run's concurrency."""
    source = next(r for r in store.runs() if r.run_id == group[0].request.run_id)
    concurrency = group[0].request.concurrency
    background = _background_run(config, source, sender.run)
    tallies: dict[str, TargetTally] = {}
    stop = asyncio.Event()
    task: asyncio.Task[object] | None = None
    if concurrency > 1:
        replays = config.repeats * len(group)
        task = asyncio.create_task(
            _background(config, store, source, background, (concurrency, replays), stop, tallies)
        )
        await _warm_up(tallies, concurrency - 1, task)
    try:
        for item in group:
            for _ in range(config.repeats):
                await sender.send(session, item, "under-load", item.request.spec)
    finally:
        stop.set()
        if task is not None:
            await task
    return tallies.get(config.target.name, TargetTally(config.target.name))


def _background_run(config: ReplayConfig, source: Run, replay_run: Run) -> Run:
    load = {**source.load, "probe": BACKGROUND_LABEL, "replay_run": replay_run.run_id,
            "source_run": source.run_id}  # fmt: skip
    return Run(
        run_id=uuid.uuid4().hex[:12], label=BACKGROUND_LABEL, targets=[config.target.name],
        started_at=time.time(), load=load, detectors=source.detectors,
        software={"soakgate": __version__},
    )  # fmt: skip


async def _background(
    config: ReplayConfig, store: SqliteStore, source: Run, run: Run, size: tuple[int, int],
    stop: asyncio.Event, tallies: dict[str, TargetTally],
) -> None:  # fmt: skip
    """The background soak: the source run's prompts and settings, concurrency - 1 in flight,
    until `stop` (bounded by the replays' own timeouts)."""
    from soakgate.probes.replayable import request_spec

    spec = request_spec(source.load)
    prompts = list(known_prompts(source, store.prompts(source.run_id), config.prompts).values())
    picker = PromptPicker(prompts, str(source.load.get("prompt_order", "round-robin")),
                          int(source.load.get("seed", 0)))  # fmt: skip
    concurrency, replays = size
    bound = replays * spec.timeout_s + WARM_UP_S + 60  # the replays stop it long before
    load = LoadSpec(concurrency - 1, duration_s=bound, grace_s=spec.timeout_s)

    def seen(now: dict[str, TargetTally], _elapsed: float) -> None:
        tallies.update(now)

    writer = BatchWriter(store)
    try:
        result = await soak(run, [config.target], spec, load, picker,
                            DetectorConfig.from_dict(source.detectors), writer, stop=stop,
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


class _Sender:
    """Sends replays of stored requests, scores them like their run did, stores each row."""

    def __init__(
        self, config: ReplayConfig, run: Run, writer: BatchWriter, store: SqliteStore
    ) -> None:
        self.config, self.run, self.writer = config, run, writer
        self.seq = 0
        self._clients: dict[str | None, OpenAIClient] = {}
        self._detectors = {r.run_id: DetectorConfig.from_dict(r.detectors) for r in store.runs()}

    async def send(self, session: Session, item: Replayed, phase: str, spec: RequestSpec) -> None:
        """One replay of `item` in `phase`; its row is stored and counted."""
        request = item.request
        client = await self._client(session, request.model)
        request_id = f"{self.run.run_id}-{self.seq}"
        outcome = await client.generate(request.prompt, spec, request_id, Outcome(time.time()))
        row = unscored_generation(
            outcome, run_id=self.run.run_id, request_id=request_id, target=self.config.target.name,
            label=REPLAY_LABEL, seq=self.seq, prompt=request.prompt, spec=spec,
        )  # fmt: skip
        self.seq += 1
        detectors = self._detectors.get(request.run_id, DetectorConfig())
        score_generation(row, detectors, "all", spec.max_tokens)
        row.details["replay"] = {"of": request.request_id, "phase": phase}
        self.writer.add_generation(row)
        tally = {"alone-greedy": item.greedy, "alone-sampled": item.sampled}.get(
            phase, item.under_load
        )
        tally.add(row.collapsed, row.error_class is not None)

    async def _client(self, session: Session, model: str | None) -> OpenAIClient:
        """The client sending as `model` (the stored one; --model or discovery without)."""
        chosen = self.config.target.model or model
        if chosen not in self._clients:
            if chosen is None:
                self._clients[None] = await connect(session, self.config.target)
            else:
                self._clients[chosen] = OpenAIClient(session, self.config.target, chosen)
        return self._clients[chosen]


def _verdict_event(run: Run, target: str, item: Replayed) -> Event:
    request = item.request
    data = {
        "of": request.request_id, "source_run": request.run_id,
        "unit": f"{request.label}@{request.target}",
        "verdict": item.verdict, "alone_greedy": item.greedy.as_list(),
        "alone_sampled": item.sampled.as_list(), "under_load": item.under_load.as_list(),
        "concurrency": request.concurrency, "request": request.describe(),
    }  # fmt: skip
    return Event(run.run_id, time.time(), VERDICT_EVENT, target, data)


def summary_lines(result: ReplayResult, config: ReplayConfig) -> list[str]:
    """What `soakgate replay` prints: one line per replayed collapse, the background soaks,
    what each verdict means, where it is stored."""
    n = config.repeats
    lines = [
        f"replayed {len(result.replayed)} collapsed generation(s) on {config.target.name}: "
        f"{n}x alone greedy, {n}x alone with their own sampling, {n}x under load",
        f"{'request':<24} {'unit':<24} {'alone greedy':<16} {'alone sampled':<16} "
        f"{'under load':<16} verdict",
    ]
    for item in result.replayed:
        r = item.request
        lines.append(
            f"{r.request_id:<24} {r.label + '@' + r.target:<24} {item.greedy.describe():<16} "
            f"{item.sampled.describe():<16} {item.under_load.describe():<16} {item.verdict}"
        )
    for source, tally in result.background.items():
        answered = tally.requests - tally.errors
        lines.append(
            f"background soak for run {source}: {tally.collapses}/{answered} collapsed, "
            f"{tally.errors} failed"
        )
    lines += [f"{v}: {MEANING[v]}" for v in dict.fromkeys(i.verdict for i in result.replayed)]
    lines.append(
        f"stored as probe run {result.run.run_id} in {config.db} (soakgate report shows it)"
    )
    return lines
