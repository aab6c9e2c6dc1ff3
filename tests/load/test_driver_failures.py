"""A bug in one observer or one detector never kills a worker silently or loses a row."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.hostile import HostileProcess

from soakgate.detectors import DetectorConfig
from soakgate.detectors.base import REGISTRY, Detection, Output
from soakgate.load import LoadSpec
from soakgate.load.driver import soak
from soakgate.load.runner import SoakConfig, new_run
from soakgate.mockserver.process import MockProcess
from soakgate.probes.soak import StandardProbes
from soakgate.prompts import PromptPicker, builtin_prompts
from soakgate.records import Generation
from soakgate.store import BatchWriter, MemoryStore
from soakgate.targets import RequestSpec, TargetSpec


def config_for(url: str, tmp_path: Path, requests: int) -> SoakConfig:
    return SoakConfig(
        probes=StandardProbes(),
        targets=[TargetSpec.parse(url)], label="x", request=RequestSpec(max_tokens=8, stream=False),
        load=LoadSpec(concurrency=4, requests=requests), db=tmp_path / "unused.sqlite",
    )  # fmt: skip


def drive(config: SoakConfig, store: MemoryStore, detectors: DetectorConfig, **hooks: object):  # type: ignore[no-untyped-def]
    return asyncio.run(
        soak(
            new_run(config), config.targets, config.request, config.load,
            PromptPicker(builtin_prompts()), detectors, BatchWriter(store), **hooks,  # type: ignore[arg-type]
        )
    )  # fmt: skip


def test_a_bug_in_an_observer_stops_every_worker_and_keeps_the_rows(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    mock = start_mock("--seed", "3")
    store, seen = MemoryStore(), []

    def buggy(generation: Generation) -> None:
        seen.append(generation)
        if len(seen) == 30:
            raise RuntimeError("observer bug")

    with pytest.raises(RuntimeError, match="observer bug"):
        drive(config_for(mock.url, tmp_path, 4000), store, DetectorConfig(), on_generation=buggy)
    rows = list(store.generations())
    # the soak stopped with the bug: only the requests already in flight finished
    assert 30 <= len(rows) <= 30 + 4
    assert {g.request_id for g in rows} == {r["request_id"] for r in mock.ground_truth()}


def _explodes(output: Output, config: DetectorConfig) -> Detection:
    if "broken" in output.text:
        raise ValueError("detector bug on this text")
    return Detection(0, False, {})


def test_a_row_a_detector_cannot_score_is_an_error_row_and_costs_no_other(
    hostile: Callable[[str], HostileProcess], tmp_path: Path
) -> None:
    server = hostile("lone-surrogate")  # answer 7 is "broken \\ud800 text"
    REGISTRY.setdefault("test_explodes", _explodes)
    store = MemoryStore()
    detectors = DetectorConfig(enabled=("char_run", "test_explodes"))
    result = drive(config_for(server.url, tmp_path, 60), store, detectors)
    rows = list(store.generations())
    assert result.stopped_by == "limit" and len(rows) == 60
    (bad,) = [g for g in rows if g.error_class is not None]
    assert bad.request_id == server.request_ids()[7]
    assert bad.error_class == "client_error" and "scoring failed" in (bad.error_detail or "")
    assert not bad.collapsed and len(bad.text_sha256) == 64
