"""Soaks against the mock server as a real process: detection and classification are exact."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from soakgate.detectors import DetectorConfig
from soakgate.load import LoadSpec
from soakgate.load.driver import soak
from soakgate.load.runner import SoakConfig, new_run, run_soak
from soakgate.mockserver.process import MockProcess
from soakgate.probes.soak import StandardProbes
from soakgate.prompts import PromptPicker, builtin_prompts
from soakgate.records import Generation
from soakgate.store import BatchWriter, open_store
from soakgate.targets import RequestSpec, TargetSpec

FAULT_TO_ERROR = {
    "http_500": "http_5xx", "reset": "connection_reset", "stall": "timeout",
    "malformed_json": "malformed_json", "truncated_stream": "truncated_stream",
    "server_error": "server_error",
}  # fmt: skip
FAULTS = "http_500=0.03,reset=0.03,malformed_json=0.03,truncated_stream=0.03,server_error=0.03,stall=0.01"


def soak_mock(mock: MockProcess, db: Path, request: RequestSpec, requests: int = 240) -> str:
    config = SoakConfig(
        probes=StandardProbes(),
        targets=[TargetSpec.parse(mock.url)], label="mock", request=request,
        load=LoadSpec(concurrency=16, requests=requests, grace_s=5), db=db,
    )  # fmt: skip
    result = run_soak(config)
    # rows are scored and counted as their batch is stored: the tally equals the stored rows
    rows = list(open_store(db).generations(result.run.run_id))
    (tally,) = result.tallies.values()
    assert (tally.requests, tally.errors, tally.collapses) == (
        len(rows), sum(not g.ok for g in rows), sum(g.collapsed for g in rows)
    )  # fmt: skip
    return result.run.run_id


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
@pytest.mark.parametrize("stream", [True, False])
def test_every_injection_and_fault_is_found_exactly(
    start_mock: Callable[..., MockProcess], tmp_path: Path, endpoint: str, stream: bool
) -> None:
    mock = start_mock(
        "--seed", "7", "--collapse-rate", "0.06", "--fault-rate", FAULTS, "--stall-s", "4"
    )
    request = RequestSpec(endpoint=endpoint, stream=stream, max_tokens=128, timeout_s=1.5,
                          return_token_ids=True)  # fmt: skip
    db = tmp_path / "runs.sqlite"
    run_id = soak_mock(mock, db, request)
    truth = {row["request_id"]: row for row in mock.ground_truth()}
    rows = list(open_store(db).generations(run_id))
    assert len(rows) == 240 and {g.request_id for g in rows} <= set(truth)
    injected = faulted = 0
    for g in rows:
        fact = truth[g.request_id]
        if fact["fault"]:
            faulted += 1
            assert g.error_class == FAULT_TO_ERROR[fact["fault"]], (fact, g.error_detail)
            assert not g.collapsed
        elif fact["injected"]:
            injected += 1
            assert g.ok and g.collapsed, (fact, g.text, g.scores)
        else:
            assert g.ok and not g.collapsed, (g.error_detail, g.flags, g.details)
            assert g.completion_tokens == len(g.token_ids or []) > 0
    assert injected > 3 and faulted > 10  # the test exercised both paths


def test_dead_target_is_backed_off_and_does_not_stop_the_other(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    up = start_mock("--seed", "1")
    config = SoakConfig(
        probes=StandardProbes(),
        targets=[TargetSpec.parse(f"up={up.url}"), TargetSpec("http://127.0.0.1:9", "down", None, "m")],
        label="x", request=RequestSpec(max_tokens=16), load=LoadSpec(4, duration_s=3.0),
        db=tmp_path / "r.sqlite",
    )  # fmt: skip
    result = run_soak(config)
    assert result.tallies["up"].requests > 100 and result.tallies["up"].errors == 0
    down = result.tallies["down"]
    assert down.errors == down.requests > 0
    assert set(down.errors_by_class) == {"connection_refused"}
    # Exponential back-off from 50 ms: each of 4 slots makes at most ~7 attempts in 3 s.
    assert down.requests <= 4 * 8


def test_a_generation_hook_sees_each_row_as_it_arrives_and_can_stop_the_soak_at_once(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    # Sequential looks stop a soak through this hook. Seen only as batches are stored, a fast
    # target would finish hundreds of requests past the verdict; seen row by row, it stops
    # within the requests already in flight.
    mock = start_mock("--seed", "3")
    config = SoakConfig(
        probes=StandardProbes(),
        targets=[TargetSpec.parse(mock.url)], label="x", request=RequestSpec(max_tokens=8),
        load=LoadSpec(concurrency=8, requests=4000), db=tmp_path / "r.sqlite",
    )  # fmt: skip
    store = open_store(config.db)
    writer = BatchWriter(store)
    stop, seen = asyncio.Event(), []

    def hook(generation: Generation) -> None:
        assert generation.text_sha256  # scored before the hook sees it
        seen.append(generation)
        if len(seen) == 50:
            stop.set()

    result = asyncio.run(
        soak(
            new_run(config), config.targets, config.request, config.load,
            PromptPicker(builtin_prompts()), DetectorConfig(), writer, stop=stop,
            on_generation=hook,
        )
    )  # fmt: skip
    rows = list(store.generations(result.run.run_id))
    store.close()
    assert result.stopped_by == "stop" and len(seen) == len(rows)
    assert 50 <= len(rows) <= 50 + 8  # the stop came with the 50th row, not a batch later
