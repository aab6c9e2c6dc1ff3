"""Closed-loop soak: `concurrency` requests in flight per target until a count or time limit.

A new request starts the moment one finishes (sustained back-to-back load, no idle gaps).
Every response is scored and handed to a BatchWriter; nothing is summarised away.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from soakgate.detectors import DetectorConfig
from soakgate.errors import StoreError
from soakgate.load.arrivals import Arrivals
from soakgate.load.backoff import TargetBackoff
from soakgate.load.lease import SendLease, open_lease
from soakgate.load.record import batch_char_runs, score_generation, unscored_generation
from soakgate.load.spec import (
    AnswerCheck,
    GenerationScorer,
    LoadSpec,
    OpenCheck,
    RequestCheck,
    SoakResult,
    TargetTally,
    TwinCheck,
)
from soakgate.prompts import Prompt, PromptPicker
from soakgate.records import Event, Generation, Run, sha256_text
from soakgate.store import BatchWriter
from soakgate.targets import OpenAIClient, Outcome, RequestSpec, TargetSpec
from soakgate.targets.client import connect, make_session

# A target refusing connections is retried with back-off so it is not hammered in a tight loop.
_BACKOFF_START_S, _BACKOFF_MAX_S = 0.05, 5.0
_CONNECTION_ERRORS = frozenset({"connection_refused", "connection_reset", "dropped"})
Marks = bool | dict[str, object]
"""A row's request-check marks: False (not chosen), True (chosen, not checked), or what the
check kept (`RequestCheck`; the greedy differential's comparison with its reference)."""
STORE_FAILURE_GRACE_S = 5.0
"""Once the store has failed, how long in-flight requests may finish (their rows are spilled)."""


@dataclass(slots=True)
class _Shared:
    """State shared by the workers of one soak."""

    run: Run
    spec: RequestSpec
    load: LoadSpec
    picker: PromptPicker
    detectors: DetectorConfig
    store_text: str
    writer: BatchWriter
    deadline: float
    stop: asyncio.Event
    next_seq: int
    issued: dict[str, int]
    tallies: dict[str, TargetTally]
    incarnation: Callable[[str], int] = lambda target: 0
    gate: Callable[[str], Awaitable[bool]] | None = None
    credit: Callable[[str], int] = lambda target: 0
    check: OpenCheck | None = None
    """The request check of this soak (the greedy differential), opened."""
    labels: dict[str, str] = field(default_factory=dict)
    on_generation: Callable[[Generation], None] | None = None
    abort: asyncio.Event = field(default_factory=asyncio.Event)
    """Set to cancel the requests in flight at once instead of letting them finish."""
    store_failure: StoreError | None = None
    """Why the store stopped taking rows, once it has."""
    backoffs: dict[str, TargetBackoff] = field(default_factory=dict)
    """Target name -> the back-off all its workers honour while it answers 429/503."""
    scorer: GenerationScorer | None = None
    """Reference scoring of chosen rows, if any."""
    scoring: set[asyncio.Task[None]] = field(default_factory=set)
    """Rows waiting for their reference score (at most `scorer.backlog`)."""
    backlog: asyncio.Semaphore | None = None
    """Places for rows waiting for their score (made in the soak's event loop)."""
    on_dispatch: Callable[[str, int], None] | None = None
    """Told (target, seq) of each request just before it is sent."""
    lease: SendLease | None = None
    """The stored lease on request numbers (a local soak; a Ray unit keeps its own)."""
    arrivals: dict[str, Arrivals] = field(default_factory=dict)
    """Target name -> its open-loop arrival schedule (`--rate`; empty: closed loop)."""
    exhausted: dict[str, asyncio.Event] = field(default_factory=dict)
    """Per target, set when a worker found its soak over (wakes workers still ramping up)."""
    answer_check: AnswerCheck | None = None
    """Told of every request sent (it may change the prompt), judges every answer's row."""
    twins: TwinCheck | None = None
    """Chooses the pairs' firsts, says when their twins are due, marks both rows."""


async def soak(
    run: Run,
    targets: list[TargetSpec],
    spec: RequestSpec,
    load: LoadSpec,
    picker: PromptPicker,
    detectors: DetectorConfig,
    writer: BatchWriter,
    *,
    store_text: str = "all",
    stop: asyncio.Event | None = None,
    on_tick: Callable[[dict[str, TargetTally], float], None] | None = None,
    incarnation: Callable[[str], int] | None = None,
    gate: Callable[[str], Awaitable[bool]] | None = None,
    credit: Callable[[str], int] | None = None,
    check: RequestCheck | None = None,
    labels: dict[str, str] | None = None,
    on_generation: Callable[[Generation], None] | None = None,
    abort: asyncio.Event | None = None,
    scorer: GenerationScorer | None = None,
    on_dispatch: Callable[[str, int], None] | None = None,
    answer_check: AnswerCheck | None = None,
    twins: TwinCheck | None = None,
) -> SoakResult:
    """Drive the soak to its end (count, time, `stop` being set, or the store failing) and
    flush every result; `abort` cancels what is in flight instead of waiting for it.

    Campaign hooks: `gate(target)` is awaited before each request (False retires the worker,
    e.g. while or after a server restart); `credit(target)` adds requests to the count limit
    (errors in a fault window do not use up the budget). `labels` overrides the run's label per
    target (two arms soaked side by side); `check` is made on the requests it chooses (the greedy
    differential against a reference);
    `on_generation` sees every generation as it is queued for the store (sequential looks);
    `scorer` scores chosen rows under a reference before they are stored; `on_dispatch(target,
    seq)` is told of each request just before it is sent (a Ray unit's record of what it sent);
    `answer_check` sees every request sent (it may add a canary) and judges every answer's row
    (the crosstalk check); `twins` makes some requests a pair's first and sends each one's twin
    (the same body and seed) in a later slot of the same target, after measuring pairs at rest.
    """
    started = time.monotonic()
    counts = writer.store.counts(run.run_id)
    shared = _Shared(
        run=run, spec=spec, load=load, picker=picker, detectors=detectors, store_text=store_text,
        writer=writer, deadline=started + load.duration_s if load.duration_s else float("inf"),
        stop=stop or asyncio.Event(),
        next_seq=max((c.next_seq for c in counts.values()), default=0),
        issued={t.name: counts[t.name].requests if t.name in counts else 0 for t in targets},
        tallies={t.name: TargetTally(t.name, label=(labels or {}).get(t.name, run.label))
                 for t in targets},
        incarnation=incarnation or (lambda target: 0), gate=gate,
        credit=credit or (lambda target: 0), labels=labels or {}, on_generation=on_generation,
        abort=abort or asyncio.Event(), scorer=scorer, on_dispatch=on_dispatch,
        answer_check=answer_check, twins=twins,
    )  # fmt: skip
    sessions = {t.name: make_session() for t in targets}
    writer.flush()  # rows queued before this soak are not its to score
    if on_dispatch is None:  # what an earlier, killed soak of the run may have sent
        shared.lease = open_lease(writer, run, shared.next_seq, load.concurrency * len(targets))
    if on_generation is None:  # else each row is scored as it arrives (`_store`)
        writer.prepare = functools.partial(_score_batch, shared)
    writer.on_failure = functools.partial(_store_failed, shared)
    if writer.failure is not None:  # an earlier pass of this writer (a campaign segment) failed
        _store_failed(shared, writer.failure)
    try:
        clients = [await connect(sessions[t.name], t) for t in targets]
        if check is not None:
            shared.check = await check.open(targets, load.concurrency)
        if twins is not None:
            await twins.at_rest(clients, picker)
        run.software["models"] = {c.target.name: c.model for c in clients}
        writer.store.save_run(run)
        writer.store.save_prompts(run.run_id, picker.prompts)  # what a replay sends again
        ticker = asyncio.create_task(_tick(shared, on_tick, started))
        stopped_by = await _drive(shared, clients)
        if shared.lease is not None:  # every request sent has its row (or a cancelled one)
            shared.lease.close(shared.next_seq - 1)
        ticker.cancel()
        await asyncio.gather(ticker, return_exceptions=True)
        if not ticker.cancelled() and (error := ticker.exception()) is not None:
            raise error  # scoring or storing failed in the ticker (the rows are stored)
    finally:
        writer.flush()
        writer.prepare = writer.on_failure = None
        for session in sessions.values():
            await session.close()
        if shared.check is not None:
            await shared.check.close()
    elapsed = time.monotonic() - started
    if shared.store_failure is not None:
        stopped_by = "store_failed"
    return SoakResult(run, shared.tallies, elapsed, stopped_by, _arrival_warnings(shared))


def _arrival_warnings(shared: _Shared) -> list[str]:
    """Each open-loop schedule's counts as an `arrivals` event (stored), and a warning line for
    a target whose arrivals overflowed its cap on requests in flight."""
    warnings = []
    for target, schedule in shared.arrivals.items():
        counts = schedule.counts
        shared.writer.add_event(dataclasses.replace(
            note(shared.run, "arrivals", rate=schedule.rate, process=schedule.kind,
                 arrived=counts.arrived, overflowed=counts.overflowed,
                 cap=shared.load.concurrency,
                 **({"ramp_s": schedule.ramp_s} if schedule.ramp_s else {})), target=target,
        ))  # fmt: skip
        if counts.overflowed:
            warnings.append(
                f"{target}: {counts.overflowed:,} of {counts.arrived:,} arrivals at "
                f"{schedule.rate:g}/s found all {shared.load.concurrency} requests in flight and "
                "were not sent (stored as an `arrivals` event; raise --concurrency or lower "
                "--rate)"
            )
    shared.writer.flush()
    return warnings


def _store_failed(shared: _Shared, error: StoreError) -> None:
    """The writer gave up on the store: no new request is sent; rows now go to its spill."""
    shared.store_failure = error
    shared.stop.set()
    shared.writer.add_event(note(shared.run, "store_failed", error=str(error),
                                 first_failed_at=shared.writer.first_failed_at))  # fmt: skip


async def _drive(shared: _Shared, clients: list[OpenAIClient]) -> str:
    """Run every worker (and, with --rate, each target's arrival schedule); at the deadline or
    stop, give in-flight requests a grace period."""
    schedules = []
    if shared.load.rate:
        for client in clients:
            name = client.target.name
            schedule = Arrivals(shared.load.rate, shared.load.arrivals,
                                f"{shared.run.run_id}:{name}:{shared.next_seq}",
                                shared.load.ramp_s)  # fmt: skip
            shared.arrivals[name] = schedule
            finished = functools.partial(_finished, shared, name)
            schedules.append(asyncio.create_task(schedule.run(finished, shared.stop)))
    workers = [
        asyncio.create_task(_worker(shared, client, index))
        for client in clients
        for index in range(shared.load.concurrency)
    ]
    waiter = asyncio.create_task(shared.stop.wait())
    pending: set[asyncio.Future[Any]] = set(workers)
    while pending and not waiter.done():
        done, pending = await asyncio.wait(pending | {waiter}, return_when=asyncio.FIRST_COMPLETED)
        pending.discard(waiter)
        if any(not t.cancelled() and t.exception() is not None for t in done if t is not waiter):
            break  # a bug in a worker stops them all, rather than soaking on with fewer
    stopped_by = "stop" if shared.stop.is_set() else "limit"
    if time.monotonic() >= shared.deadline:
        stopped_by = "duration"
    shared.stop.set()  # no worker issues a new request from here on
    grace = shared.load.grace_s
    if shared.store_failure is not None:
        grace = min(grace, STORE_FAILURE_GRACE_S)
    await _drain(pending, grace, shared.abort)
    await _drain(set(shared.scoring), grace, shared.abort)  # rows still waiting for a score
    waiter.cancel()
    for task in schedules:
        task.cancel()
    await asyncio.gather(*schedules, return_exceptions=True)
    for task in workers:
        if task.done() and not task.cancelled() and (error := task.exception()) is not None:
            raise error  # a bug in the driver, not a failed request: those are records
    return stopped_by


async def _drain(pending: set[asyncio.Future[Any]], grace_s: float, abort: asyncio.Event) -> None:
    """Let in-flight requests finish for up to `grace_s`, unless `abort` is set; then cancel
    the rest (each is stored as `cancelled`)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace_s
    aborted = asyncio.ensure_future(abort.wait())
    while pending and not aborted.done() and (remaining := deadline - loop.time()) > 0:
        _, pending = await asyncio.wait(
            pending | {aborted}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
        )
        pending.discard(aborted)
    aborted.cancel()
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


def _finished(shared: _Shared, target: str) -> bool:
    """The target's soak is over: stopped, past the deadline, or its count reached."""
    limit = shared.load.requests
    if shared.stop.is_set() or time.monotonic() >= shared.deadline:
        return True
    return limit is not None and shared.issued[target] >= limit + shared.credit(target)


def _take_seq(shared: _Shared, target: str) -> int | None:
    """Claim the next request slot for a target, or None when the soak should stop."""
    if _finished(shared, target):
        _exhausted(shared, target).set()
        return None
    shared.issued[target] += 1
    seq, shared.next_seq = shared.next_seq, shared.next_seq + 1
    if shared.lease is not None:
        shared.lease.claim(seq)
    return seq


def _exhausted(shared: _Shared, target: str) -> asyncio.Event:
    event = shared.exhausted.get(target)
    if event is None:
        event = shared.exhausted[target] = asyncio.Event()
    return event


async def _ramped_up(shared: _Shared, target: str, index: int) -> bool:
    """Closed loop with --ramp: worker `index` of C starts index/C of the ramp after the soak
    (False: the soak ended first)."""
    ramp = shared.load.ramp_s
    if not ramp or shared.load.rate or index == 0:
        return True
    delay = ramp * index / shared.load.concurrency
    ended = [asyncio.ensure_future(e.wait()) for e in (shared.stop, _exhausted(shared, target))]
    try:
        done, _ = await asyncio.wait(ended, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in ended:
            waiter.cancel()
    return not done


async def _worker(shared: _Shared, client: OpenAIClient, index: int = 0) -> None:
    """One in-flight slot: issue, score, store, repeat; a bug here stops every worker."""
    try:
        if await _ramped_up(shared, client.target.name, index):
            await _work(shared, client)
    except Exception:
        shared.stop.set()  # before any other worker takes another request
        raise


async def _work(shared: _Shared, client: OpenAIClient) -> None:
    name = client.target.name
    tally = shared.tallies[name]
    limiter = shared.backoffs.setdefault(name, TargetBackoff())
    backoff = 0.0
    schedule = shared.arrivals.get(name)
    while (
        (shared.gate is None or await shared.gate(name))
        and (schedule is None or await schedule.wait(shared.stop))
        and (seq := _take_seq(shared, name)) is not None
    ):
        if shared.on_dispatch is not None:
            shared.on_dispatch(name, seq)
        twins = shared.twins
        twin = twins.due(name, seq) if twins is not None else None
        picked = shared.picker.pick(seq) if twin is None else twin.prompt
        prompt = picked
        if shared.answer_check is not None:  # e.g. the prompt with its canary
            prompt = shared.answer_check.sent(seq, prompt, None if twin is None else twin.first)
        request_id = f"{shared.run.run_id}-{seq}"
        outcome = Outcome(started_at=time.time())
        check = shared.check
        chosen = None
        if check is not None and twin is None:
            chosen = check.choose(name, seq, shared.spec, prompt, request_id)
        sampled = chosen is not None
        spec = chosen or shared.spec
        if twin is not None:
            spec = twin.spec
        elif twins is not None and not sampled:  # a greedy differential row is no pair's
            spec = twins.first(name, seq, picked, spec) or spec
        divergence: int | None = None
        marks: dict[str, object] = {}
        tally.in_flight += 1
        try:
            await client.generate(prompt, spec, request_id, outcome)
            if check is not None and sampled and outcome.error_class is None:
                divergence, marks = await check.check(name, prompt, spec, request_id, outcome)
            if twin is not None and twins is not None:
                await twins.settled(twin)
        except asyncio.CancelledError:
            _store(shared, outcome, name, seq, prompt, request_id)
            raise
        finally:
            tally.in_flight -= 1
        error_class = outcome.error_class
        scorer = shared.scorer
        if scorer is not None and error_class is None and scorer.selects(name, seq):
            await _score_then_store(
                shared, outcome, name, seq, prompt, request_id, divergence, sampled and marks
            )
        else:
            row = _store(
                shared, outcome, name, seq, prompt, request_id, divergence, sampled and marks
            )  # fmt: skip
            error_class = row.error_class
        backoff = _next_backoff(backoff, error_class)
        if backoff:
            await _held_back(tally, _pause(shared, backoff))
        if limiter.storm or outcome.error_class == "rate_limited":
            _rate_limit(shared, limiter, name, outcome)
        if limiter.until:  # a window is (or was, until looked at) open
            await _held_back(tally, limiter.wait(shared.stop, shared.deadline))


async def _score_then_store(
    shared: _Shared, outcome: Outcome, target: str, seq: int, prompt: Prompt, request_id: str,
    divergence: int | None, sampled: Marks,
) -> None:  # fmt: skip
    """Score a clean row under the reference in its own task, then store it. The worker waits
    only for a place in the backlog (at most `budget_s`: a reference that falls behind slows
    the loop to its pace, never more), not for the score; a backlog still full after the
    budget, a blown budget or the soak's end store the row unscored, never clean-scored."""
    scorer = shared.scorer
    assert scorer is not None
    generation = _row(shared, outcome, target, seq, prompt, request_id, divergence, sampled)
    if shared.backlog is None:
        shared.backlog = asyncio.Semaphore(scorer.backlog)
    backlog = shared.backlog
    try:
        await asyncio.wait_for(backlog.acquire(), scorer.budget_s)
    except TimeoutError:
        scorer.unscored(generation, "backlog_full")
        _queue(shared, generation)
        return
    except asyncio.CancelledError:  # the soak ended while the row waited: it is kept
        scorer.unscored(generation, "soak_ended")
        _queue(shared, generation)
        raise

    async def score() -> None:
        try:
            await asyncio.wait_for(scorer.score(generation, outcome, prompt), scorer.budget_s)
        except TimeoutError:
            scorer.unscored(generation, "budget_exceeded")
        except asyncio.CancelledError:
            scorer.unscored(generation, "soak_ended")
        finally:
            backlog.release()
            _queue(shared, generation)

    task = asyncio.create_task(score())
    shared.scoring.add(task)
    task.add_done_callback(shared.scoring.discard)


def _store(
    shared: _Shared, outcome: Outcome, target: str, seq: int, prompt: Prompt, request_id: str,
    divergence: int | None = None, sampled: Marks = False,
) -> Generation:  # fmt: skip
    """Queue the outcome's row for the store; it is scored with its batch (`_score_batch`)."""
    generation = _row(shared, outcome, target, seq, prompt, request_id, divergence, sampled)
    _queue(shared, generation)
    return generation


def _row(
    shared: _Shared, outcome: Outcome, target: str, seq: int, prompt: Prompt, request_id: str,
    divergence: int | None = None, sampled: Marks = False,
) -> Generation:  # fmt: skip
    """The outcome's row (not yet scored by the detectors)."""
    if outcome.error_class == "cancelled" and not outcome.ended_at:
        outcome.ended_at = time.time()
    generation = unscored_generation(
        outcome, run_id=shared.run.run_id, request_id=request_id, target=target,
        label=shared.labels.get(target, shared.run.label), seq=seq, prompt=prompt,
        spec=shared.spec, incarnation=shared.incarnation(target),
    )  # fmt: skip
    generation.reference_divergence = divergence
    if shared.lease is not None and shared.lease.resends:
        shared.lease.mark(generation)
    if outcome.attempts > 1:  # sent again: it provably never reached the server before
        event = note(shared.run, "retried", request_id=request_id, attempts=outcome.attempts)
        event.target = target
        shared.writer.add_event(event)
    if sampled is not False:  # greedy rows are marked: analysis tells them from the population
        marks = sampled if isinstance(sampled, dict) else {}
        generation.details["differential"] = {
            "greedy": True, "compared": divergence is not None, **marks,
        }  # fmt: skip
    if shared.twins is not None:
        shared.twins.mark(generation)
    if shared.answer_check is not None:  # after the differential's marks: it reads them
        shared.answer_check.answered(generation, outcome)
    return generation


def _queue(shared: _Shared, generation: Generation) -> None:
    """Hand the row to the writer (scored with its batch, or at once for `on_generation`)."""
    if shared.on_generation is None:
        shared.writer.add_generation(generation)
        return
    # sequential looks are judged row by row, so that a verdict stops the soak at once rather
    # than at the next batch (a fast target finishes hundreds of requests per batch)
    try:
        _score_batch(shared, [generation])
    finally:  # kept even when the observer fails on it
        shared.writer.add_generation(generation)


def _score_batch(shared: _Shared, generations: list[Generation]) -> None:
    """Score a batch of rows just before it is stored, then count them and show them to the
    `on_generation` hook. Scoring rows back to back, away from the network code, cut the
    client's CPU per request by 9 % against scoring each as it arrives (BENCHMARKS.md).

    A row that cannot be scored (a detector failing on what the server sent) becomes an error
    row of its own, never a clean one, and costs no other row."""
    detectors, store_text, on_generation = shared.detectors, shared.store_text, shared.on_generation
    if shared.answer_check is not None:  # before the text is dropped for the store
        shared.answer_check.judge(generations)
    measured = batch_char_runs(generations, detectors)
    for generation, char_runs in zip(generations, measured, strict=True):
        try:
            score_generation(generation, detectors, store_text, shared.spec.max_tokens, char_runs)
        except Exception as exc:
            _unscorable(generation, exc)
        shared.tallies[generation.target].count(generation)
        if on_generation is not None:
            on_generation(generation)


def _unscorable(generation: Generation, exc: Exception) -> None:
    """Mark a row whose scoring raised: a client error with the exception, its flags dropped."""
    generation.error_class = "client_error"
    generation.error_detail = f"scoring failed: {type(exc).__name__}: {exc}"[:300]
    generation.flags.clear()
    if not generation.text_sha256:
        generation.text_sha256 = sha256_text(generation.text or "")


def _rate_limit(shared: _Shared, limiter: TargetBackoff, target: str, outcome: Outcome) -> None:
    """Open the target's back-off window on a rate-limited answer (an event says so); a clean
    answer resets its doubling."""
    if outcome.error_class == "rate_limited":
        seconds = limiter.rate_limited(outcome.retry_after_s)
        if seconds is not None:
            asked = outcome.retry_after_s
            event = note(shared.run, "backoff", seconds=seconds, retry_after_s=asked)
            event.target = target
            shared.writer.add_event(event)
    elif outcome.error_class is None:
        limiter.answered()


def _next_backoff(backoff: float, error_class: str | None) -> float:
    """Exponential back-off while a target refuses or resets connections; reset on success."""
    if error_class not in _CONNECTION_ERRORS:
        return 0.0
    return min(_BACKOFF_MAX_S, backoff * 2 if backoff else _BACKOFF_START_S)


async def _held_back(tally: TargetTally, waiting: Awaitable[None]) -> None:
    """Wait out a back-off, counting it and its seconds in the target's tally."""
    began = time.monotonic()
    await waiting
    held = time.monotonic() - began
    if held > 0:
        tally.backoffs += 1
        tally.backoff_s += held


async def _pause(shared: _Shared, seconds: float) -> None:
    """Sleep, but wake at once when the soak is stopped."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(shared.stop.wait(), timeout=seconds)


async def _tick(
    shared: _Shared,
    on_tick: Callable[[dict[str, TargetTally], float], None] | None,
    started: float,
) -> None:
    """Flush the writer and refresh progress a few times a second (and once at the start, before
    any row is counted, so an observer holds the tallies of the whole soak: live metrics)."""
    if on_tick is not None:
        on_tick(shared.tallies, time.monotonic() - started)
    while True:
        await asyncio.sleep(0.25)
        shared.writer.maybe_flush()
        if on_tick is not None:
            on_tick(shared.tallies, time.monotonic() - started)


def note(run: Run, kind: str, **data: object) -> Event:
    """An event of this run, stamped now."""
    return Event(run_id=run.run_id, at=time.time(), kind=kind, data=dict(data))
