"""Request timeouts by one sweeping timer: a late answer is a `timeout` record, a stop is still a
stop, and a worker whose request timed out carries on unharmed (a real server on loopback)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from soakgate.prompts import builtin_prompts
from soakgate.targets import RequestSpec, TargetSpec
from soakgate.targets.client import OpenAIClient, make_session
from soakgate.targets.deadlines import Deadlines
from soakgate.targets.spec import Outcome

ANSWER = {"choices": [{"text": "fine", "finish_reason": "stop"}], "usage": {"completion_tokens": 1}}


async def _completions(request: web.Request) -> web.Response:
    """Answers at once, or after the delay the request id asks for (`slow-<seconds>-...`)."""
    request_id = request.headers.get("X-Request-Id", "")
    if request_id.startswith("slow-"):
        await asyncio.sleep(float(request_id.split("-")[1]))
    return web.json_response(ANSWER)


async def _serve() -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_post("/v1/completions", _completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


@contextlib.asynccontextmanager
async def _client() -> AsyncIterator[OpenAIClient]:
    runner, url = await _serve()
    session = make_session()
    try:
        yield OpenAIClient(session, TargetSpec.parse(url), "m")
    finally:
        await session.close()
        await runner.cleanup()


SPEC = RequestSpec(max_tokens=4, stream=False, timeout_s=0.3)
PROMPT = builtin_prompts()[0]


def test_a_late_answer_is_a_timeout_and_the_worker_carries_on() -> None:
    async def scenario() -> list[tuple[str | None, float]]:
        results = []
        async with _client() as client:
            for request_id in ("slow-1-a", "fast-b", "slow-0.05-c", "slow-1-d", "fast-e"):
                began = time.monotonic()
                outcome = await client.generate(PROMPT, SPEC, request_id)
                results.append((outcome.error_class, time.monotonic() - began))
            await asyncio.sleep(0.05)  # after the last timeout: no stray cancellation pending
            results.append(("slept", 0.0))
        return results

    results = asyncio.run(scenario())
    assert [error for error, _ in results] == [
        "timeout", None, None, "timeout", None, "slept"
    ]  # fmt: skip
    for error, elapsed in results:
        if error == "timeout":  # fired after its deadline, never before it (how soon after
            # is the sweep's period on a quiet machine; a loaded one delays the loop)
            assert 0.3 <= elapsed < 60


def test_a_stop_during_a_request_is_a_cancellation_not_a_timeout() -> None:
    async def scenario() -> tuple[str | None, bool]:
        async with _client() as client:
            outcome_holder = []

            async def request() -> None:
                outcome = Outcome(started_at=time.time())
                outcome_holder.append(outcome)
                await client.generate(PROMPT, SPEC, "slow-1-x", outcome)

            task = asyncio.create_task(request())
            await asyncio.sleep(0.1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return outcome_holder[0].error_class, task.cancelled()

    assert asyncio.run(scenario()) == ("cancelled", True)


def test_a_stop_arriving_with_the_deadline_still_stops() -> None:
    async def scenario() -> bool:
        deadlines = Deadlines(resolution_s=0.02)
        started = asyncio.Event()

        async def body() -> None:
            task = asyncio.current_task()
            assert task is not None
            deadlines.arm(task, 0.0)
            started.set()
            try:
                await asyncio.sleep(5)
            except asyncio.CancelledError:
                if deadlines.disarm(task) and task.uncancel() == 0:
                    return  # a timeout only: would carry on
                raise

        task = asyncio.create_task(body())
        await started.wait()
        while not deadlines.expired(task):  # each turn runs before the sweeper's, so the stop
            await asyncio.sleep(0)  # lands after the sweeper's cancel, before the task runs
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return task.cancelled()

    assert asyncio.run(scenario())


def test_the_sweeper_runs_only_while_something_is_armed() -> None:
    async def scenario() -> tuple[bool, bool, bool]:
        deadlines = Deadlines(resolution_s=0.01)
        task = asyncio.current_task()
        assert task is not None
        deadlines.arm(task, 60)
        running = deadlines._sweeper is not None
        assert not deadlines.disarm(task)
        await asyncio.sleep(0.05)
        gone = deadlines._sweeper is None
        deadlines.arm(task, 60)
        again = deadlines._sweeper is not None
        deadlines.disarm(task)
        return running, gone, again

    assert asyncio.run(scenario()) == (True, True, True)


def test_many_concurrent_requests_time_out_independently() -> None:
    async def scenario() -> list[str | None]:
        async with _client() as client:
            ids = [f"slow-{1 if n % 3 == 0 else 0}-{n}" for n in range(12)]
            outcomes = await asyncio.gather(*(client.generate(PROMPT, SPEC, i) for i in ids))
            return [o.error_class for o in outcomes]

    assert asyncio.run(scenario()) == ["timeout" if n % 3 == 0 else None for n in range(12)]
