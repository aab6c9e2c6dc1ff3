"""A soak runs with CPython's cyclic collector set for it (fewer young collections, what was
alive at the start frozen) and leaves the process's collector as it found it."""

from __future__ import annotations

import gc
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from soakgate.load import LoadSpec
from soakgate.load.runner import SOAK_GC_THRESHOLD, SoakConfig, run_soak, soak_collections
from soakgate.mockserver.process import MockProcess
from soakgate.probes.soak import StandardProbes
from soakgate.targets import RequestSpec, TargetSpec


def test_a_soak_runs_with_the_collector_set_for_it_and_restores_it(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    mock = start_mock("--seed", "3", "--fault-rate", "http_500=0.2")
    before = gc.get_threshold()
    seen: list[tuple[tuple[int, int, int], int]] = []
    config = SoakConfig(
        probes=StandardProbes(),
        targets=[TargetSpec.parse(mock.url)], label="gc", request=RequestSpec(max_tokens=8),
        load=LoadSpec(concurrency=8, requests=400), db=tmp_path / "r.sqlite",
    )  # fmt: skip
    result = run_soak(
        config, on_tick=lambda *_: seen.append((gc.get_threshold(), gc.get_freeze_count()))
    )
    assert seen, "the soak ticked at least once"
    assert all(threshold[0] == SOAK_GC_THRESHOLD and frozen > 0 for threshold, frozen in seen)
    assert (gc.get_threshold(), gc.get_freeze_count()) == (before, 0)
    # the rows are as a soak stores them: every NULL a SQL NULL (None's sqlite3 adapter)
    db = sqlite3.connect(tmp_path / "r.sqlite")
    nulls = db.execute(
        "SELECT count(*), sum(typeof(error_class) = 'null'), sum(typeof(ttft_s) = 'null'), "
        "sum(error_class IS NULL) FROM generations WHERE run_id = ?",
        (result.run.run_id,),
    ).fetchone()
    failed = db.execute("SELECT count(*) FROM generations WHERE error_class IS NOT NULL").fetchone()
    db.close()
    assert nulls[0] == 400 and nulls[1] == nulls[3] == 400 - failed[0] > 0 and failed[0] > 0
    assert nulls[2] == failed[0]  # a refused request has no time to first token


def test_the_collector_is_restored_when_the_soak_raises() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), soak_collections():
        assert gc.get_threshold()[0] == SOAK_GC_THRESHOLD and gc.get_freeze_count() > 0
        raise RuntimeError("a bug in the soak")
    assert (gc.get_threshold(), gc.get_freeze_count()) == (before, 0)


def test_soaks_at_once_share_the_setting_and_the_last_to_end_restores_it() -> None:
    before = gc.get_threshold()
    with soak_collections():
        with soak_collections():  # a second soak, e.g. in another thread
            assert gc.get_threshold()[0] == SOAK_GC_THRESHOLD
        assert gc.get_threshold()[0] == SOAK_GC_THRESHOLD and gc.get_freeze_count() > 0
    assert (gc.get_threshold(), gc.get_freeze_count()) == (before, 0)
