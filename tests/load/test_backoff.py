"""load/backoff.py, and the driver's events for back-off windows and re-sent requests."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.hostile import HostileProcess

from soakgate.load import LoadSpec
from soakgate.load.backoff import MAX_S, RETRY_AFTER_MAX_S, TargetBackoff
from soakgate.load.runner import SoakConfig, run_soak
from soakgate.store import open_store
from soakgate.targets import OpenAIClient, RequestSpec, TargetSpec


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_windows_double_while_the_storm_lasts_and_in_flight_answers_do_not_lengthen_them() -> None:
    clock = Clock()
    backoff = TargetBackoff(clock)
    assert backoff.rate_limited(None) == 0.1
    assert backoff.rate_limited(None) is None  # answered inside the open window
    clock.now += 0.1
    assert backoff.rate_limited(None) == 0.2
    clock.now += 0.2
    assert backoff.rate_limited(None) == 0.4
    for _ in range(10):
        clock.now += 60
        backoff.rate_limited(None)
    assert backoff.rate_limited(None) is None and backoff._wait_s == MAX_S
    backoff.answered()  # a clean answer: the next storm starts short again
    clock.now += 60
    assert backoff.rate_limited(None) == 0.1


def test_retry_after_is_honoured_up_to_its_cap_and_never_shortens_a_window() -> None:
    clock = Clock()
    backoff = TargetBackoff(clock)
    assert backoff.rate_limited(2.0) == 2.0
    assert backoff.rate_limited(1.0) is None  # inside the 2 s already asked for
    assert backoff.rate_limited(5.0) == 5.0  # a longer ask extends it
    clock.now += 10
    assert backoff.rate_limited(3600.0) == RETRY_AFTER_MAX_S


def test_waiting_ends_at_the_window_the_deadline_or_a_stop() -> None:
    async def main() -> tuple[float, float, float]:
        loop = asyncio.get_running_loop()
        backoff, stop = TargetBackoff(), asyncio.Event()
        backoff.rate_limited(0.2)
        began = loop.time()
        await backoff.wait(stop, deadline=float("inf"))
        window = loop.time() - began
        backoff.rate_limited(30.0)
        began = loop.time()
        await backoff.wait(stop, deadline=began + 0.1)
        deadline = loop.time() - began
        loop.call_later(0.1, stop.set)
        began = loop.time()
        await backoff.wait(stop, deadline=float("inf"))
        return window, deadline, loop.time() - began

    window, deadline, stopped = asyncio.run(main())
    assert 0.19 <= window < 1.0 and 0.09 <= deadline < 1.0 and 0.09 <= stopped < 1.0


def test_a_request_sent_again_is_an_event_and_its_row_says_how_often(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a write that failed at once is re-sent (tests/targets/test_pool.py); here every other
    # request is made to look so, to see the driver record it
    real = OpenAIClient.generate

    async def twice(self: OpenAIClient, *args: object, **kwargs: object) -> object:
        outcome = await real(self, *args, **kwargs)  # type: ignore[arg-type]
        if outcome.error_class is None and outcome.text.endswith("words."):
            outcome.attempts = 2
        return outcome

    monkeypatch.setattr(OpenAIClient, "generate", twice)
    server = HostileProcess("ok", tmp_path / "seen.jsonl")
    try:
        config = SoakConfig(
            targets=[TargetSpec.parse(server.url, model="m")], label="retried",
            request=RequestSpec(max_tokens=16), load=LoadSpec(concurrency=2, requests=8),
            db=tmp_path / "runs.sqlite", watch_metrics=False,
        )  # fmt: skip
        run_id = run_soak(config).run.run_id
    finally:
        server.stop()
    store = open_store(tmp_path / "runs.sqlite")
    try:
        rows = {g.request_id: g for g in store.generations(run_id)}
        events = [e for e in store.events(run_id) if e.kind == "retried"]
    finally:
        store.close()
    again = {rid for rid, g in rows.items() if g.attempts == 2}
    assert len(again) == 4 and {e.data["request_id"] for e in events} == again
    assert all(e.data["attempts"] == 2 and e.target == server.url[7:] for e in events)
