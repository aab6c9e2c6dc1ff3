"""A campaign's `reference = "eager"`: every other config's block also runs an eager instance per
device, and a sampled share of requests is compared with it token by token (matched by device)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from soakgate.campaign import run_campaign
from soakgate.campaign.model import load_campaign
from soakgate.campaign.reference import reference_specs
from soakgate.errors import ConfigError
from soakgate.records import Event, Generation
from soakgate.servers.instance import process_matches
from soakgate.store import open_store
from tests.campaign.helpers import write_campaign

REQUESTS = 30
FRACTION = 0.5
TRUTH = "--ground-truth {log_dir}/gt-{instance}.jsonl"
DEVICES = ("cpu:0", "cpu:1")
REFERENCES = ("eager@cpu:0", "eager@cpu:1")


def _reference_campaign(folder: Path, **extra: Any) -> Path:
    configs = {"eager": TRUTH, "graph": f"--perturb-rate 0.3 {TRUTH}"}
    return write_campaign(
        folder, configs, requests=REQUESTS, order="sequential", token_ids=True,
        top='reference = "eager"', tables=f"[differential]\nfraction = {FRACTION}\n", **extra,
    )  # fmt: skip


def test_graph_block_diverges_from_its_eager_reference_exactly_where_it_was_perturbed(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.sqlite"
    result = run_campaign(_reference_campaign(tmp_path), db)
    assert [(r.block.label, r.outcome) for r in result.ran] == [
        ("eager", "completed"), ("graph", "completed"),
    ]  # fmt: skip
    store = open_store(db)
    try:
        eager, graph = store.runs()
        eager_events, graph_events = store.events(eager.run_id), store.events(graph.run_id)
        eager_rows, graph_rows = (list(store.generations(r.run_id)) for r in (eager, graph))
    finally:
        store.close()
    assert graph.load["campaign"]["reference_fraction"] == FRACTION
    _check_reference_block(eager_events, eager_rows)
    _check_compared_block(graph_events, graph_rows)
    for event in eager_events + graph_events:  # every instance, reference or not, is gone
        if event.kind == "server_started":
            assert not process_matches(event.data["pid"], event.data["argv"]), event.target


def _check_reference_block(events: list[Event], rows: list[Generation]) -> None:
    """The reference config's own block: its two instances, no differential at all."""
    assert {e.target for e in events if e.kind == "server_started"} == set(DEVICES)
    assert not [e for e in events if e.kind == "reference_baseline"]
    assert len(rows) == REQUESTS * len(DEVICES)
    assert all(g.reference_divergence is None and "differential" not in g.details for g in rows)


def _check_compared_block(events: list[Event], rows: list[Generation]) -> None:
    started = {e.target: e for e in events if e.kind == "server_started"}
    assert set(started) == {*DEVICES, *REFERENCES}
    stopped = {e.target for e in events if e.kind == "server_stopped"}
    assert stopped == set(started)
    for device, reference in zip(DEVICES, REFERENCES, strict=True):  # same card: same {device}
        seed = started[device].data["argv"].index("--seed") + 1
        assert started[device].data["argv"][seed] == started[reference].data["argv"][seed]
        assert "--perturb-rate" not in started[reference].data["argv"]
    (baseline,) = [e for e in events if e.kind == "reference_baseline"]
    assert baseline.data["informative"] is True and baseline.data["reference"] == "eager"
    assert (baseline.data["pairs"], baseline.data["divergent"], baseline.data["errors"]) == (
        16,
        0,
        0,
    )
    log_dir = Path(started[DEVICES[0]].data["log_path"]).parent
    truth = {name: _truth(log_dir / f"gt-{name}.jsonl") for name in (*DEVICES, *REFERENCES)}
    sampled = [g for g in rows if "differential" in g.details]
    assert all(g.ok and g.details["differential"]["compared"] for g in sampled)
    assert all(g.reference_divergence is None for g in rows if g not in sampled)
    divergent = 0
    for g in sampled:
        assert g.reference_divergence is not None
        perturbed = truth[g.target][g.request_id]["perturbed"] > 0
        assert (g.reference_divergence >= 0) == perturbed, g.request_id
        divergent += perturbed
    assert 10 < len(sampled) < 50 and 0 < divergent < len(sampled)
    for device, reference in zip(DEVICES, REFERENCES, strict=True):  # matched by device
        asked = {r for r in truth[reference] if r.endswith("-ref")}
        assert asked == {f"{g.request_id}-ref" for g in sampled if g.target == device}


def _truth(path: Path) -> dict[str, dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text("utf-8").splitlines()]
    return {row["request_id"]: row for row in rows}


def test_reference_instances_get_their_own_names_ports_and_logs(tmp_path: Path) -> None:
    campaign = load_campaign(_reference_campaign(tmp_path))
    server = dataclasses.replace(campaign.server, base_port=9100)
    campaign = dataclasses.replace(campaign, server=server)
    eager, graph = campaign.configs
    assert reference_specs(campaign, eager, tmp_path) == {}
    specs = reference_specs(campaign, graph, tmp_path / "logs")
    assert [s.name for s in specs.values()] == list(REFERENCES) and list(specs) == list(DEVICES)
    assert [s.url for s in specs.values()] == ["http://127.0.0.1:9102", "http://127.0.0.1:9103"]
    argv = specs["cpu:1"].argv
    assert "--perturb-rate" not in argv and f"{tmp_path}/logs/gt-eager@cpu:1.jsonl" in argv


@pytest.mark.parametrize(
    ("top", "tables", "message"),
    [
        ("", "[differential]\nfraction = 0.1\n", "needs a reference"),
        ('reference = "eager"', "[differential]\nfraction = 0\n", r"fraction must be in \(0, 1\]"),
        ('reference = "eager"', "[differential]\nfraction = 1.5\n", "fraction must be in"),
        ('reference = "eager"', '[differential]\nfraction = "x"\n', "a number"),
        ('reference = "eager"', "[differential]\nfractoin = 0.1\n", "unknown key"),
    ],
)
def test_bad_differential_tables_are_one_line_config_errors(
    tmp_path: Path, top: str, tables: str, message: str
) -> None:
    path = write_campaign(tmp_path, {"eager": "", "graph": ""}, requests=1, top=top, tables=tables)
    with pytest.raises(ConfigError, match=message) as info:
        load_campaign(path)
    assert "\n" not in str(info.value)


def test_the_fraction_defaults_to_a_few_percent(tmp_path: Path) -> None:
    path = write_campaign(
        tmp_path, {"eager": "", "graph": ""}, requests=1, top='reference = "eager"'
    )
    assert load_campaign(path).reference_fraction == 0.03
