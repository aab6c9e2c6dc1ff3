"""End to end: two configs x two devices of real mock servers launched from the template;
one config's servers die mid-soak with a device-lost message and are restarted by the guard."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from soakgate.campaign import run_campaign
from soakgate.store import open_store
from tests.campaign.helpers import DEVICE_LOST, write_campaign

REQUESTS = 24


def test_guard_records_the_fault_restarts_and_the_soak_completes(tmp_path: Path) -> None:
    flags = (
        "--die-after 8 --die-once-file {campaign_dir}/die-{instance} "
        f"--die-message '{DEVICE_LOST}'"
    )
    path = write_campaign(tmp_path, {"eager": "", "graph": flags}, requests=REQUESTS)
    result = run_campaign(path, tmp_path / "runs.sqlite")
    assert [(r.block.label, r.outcome) for r in result.ran] == [
        ("eager", "completed"), ("graph", "completed"),
    ]  # fmt: skip
    store = open_store(tmp_path / "runs.sqlite")
    try:
        eager, graph = (store.runs()[i] for i in (0, 1))
        assert (eager.campaign, graph.campaign) == ("t/000-eager-r0", "t/001-graph-r0")
        assert (eager.status, graph.status) == ("completed", "completed")
        _check_clean_block(list(store.generations(eager.run_id)))
        _check_fault_block(store.events(graph.run_id), list(store.generations(graph.run_id)))
    finally:
        store.close()


def _check_clean_block(rows: list) -> None:  # type: ignore[type-arg]
    assert Counter(g.target for g in rows) == {"cpu:0": REQUESTS, "cpu:1": REQUESTS}
    assert all(g.ok and g.incarnation == 0 for g in rows)


def _check_fault_block(events: list, rows: list) -> None:  # type: ignore[type-arg]
    for target in ("cpu:0", "cpu:1"):
        mine = [e for e in events if e.target == target]
        fault = next(e for e in mine if e.kind == "engine_fault")
        assert fault.data["cause"] in ("process_exit", "log_pattern")
        assert DEVICE_LOST in fault.data["fatal_lines"] and DEVICE_LOST in fault.data["log_tail"]
        window = next(e for e in mine if e.kind == "fault_window")
        assert window.data["recovered"] is True
        assert window.data["start"] <= window.data["detected_at"] <= window.data["end"]
        assert (window.data["incarnation_before"], window.data["incarnation_after"]) == (0, 1)
        assert any(e.kind == "restart" and e.data["incarnation"] == 1 for e in mine)
        served = [g for g in rows if g.target == target]
        errors = [g for g in served if not g.ok]
        # Requests in flight at the fault are stored as errors of the dead incarnation ...
        assert errors and all(g.incarnation == 0 for g in errors)
        # (a request the dying server had read but not begun to answer is `dropped`)
        dead = {"connection_reset", "connection_refused", "dropped"}
        assert {g.error_class for g in errors} <= dead
        assert all(window.data["start"] <= g.ended_at <= window.data["end"] for g in errors)
        # ... they do not use up the budget: every clean request was still made.
        assert sum(g.ok for g in served) == REQUESTS
        assert {g.incarnation for g in served if g.ok} == {0, 1}
    seqs = sorted(g.seq for g in rows)
    assert seqs == list(range(len(rows)))  # nothing issued was dropped


def test_a_config_whose_server_fails_to_start_is_recorded_and_the_campaign_goes_on(
    tmp_path: Path,
) -> None:
    path = write_campaign(
        tmp_path, {"broken": "--no-such-flag", "good": ""}, requests=4, order="sequential"
    )
    result = run_campaign(path, tmp_path / "runs.sqlite")
    assert [(r.block.label, r.outcome) for r in result.ran] == [
        ("broken", "failed"), ("good", "completed"),
    ]  # fmt: skip
    store = open_store(tmp_path / "runs.sqlite")
    try:
        broken, good = store.runs()
        assert broken.status == "failed" and list(store.generations(broken.run_id)) == []
        failures = [e for e in store.events(broken.run_id) if e.kind == "server_start_failed"]
        assert sorted(e.target for e in failures) == ["cpu:0", "cpu:1"]
        for event in failures:
            assert "unrecognized arguments: --no-such-flag" in event.data["log_tail"]
            assert event.data["exit_code"] == 2
        done = [e for e in store.events(broken.run_id) if e.kind == "block_completed"]
        assert [e.data["outcome"] for e in done] == ["failed"]
        assert len(list(store.generations(good.run_id))) == 2 * 4
    finally:
        store.close()
