"""Campaigns on Ray (`[cluster] engine = "ray"`): the README's fleet command on a local 3-node
cluster of logical GPUs, a node removed mid-block, and the one-line refusals of a bad cluster.

Ray start-up is the cost here (a node is a few processes), so each test that needs a cluster
starts one and runs the whole campaign on it; the mocks answer small requests fast."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from soakgate.campaign.cluster import LOOPBACK, LOOPBACK_SWITCH
from soakgate.servers.instance import process_matches
from tests.campaign.helpers import query
from tests.cli.helpers import one_error_line, soakgate

REPO = Path(__file__).resolve().parents[2]
FLEET = REPO / "examples" / "ray-mock-fleet.toml"

pytestmark = pytest.mark.slow


def _truth(folder: Path) -> dict[str, dict[str, Any]]:
    """Request id -> the mock's ground-truth line, over every mock log under `folder`."""
    lines = (json.loads(line) for path in folder.rglob("gt-*.jsonl")
             for line in path.read_text().splitlines())  # fmt: skip
    return {line["request_id"]: line for line in lines}


def _check_rows_against_truth(db: Path, logs: Path) -> None:
    """Every stored row was answered by a mock, and it is collapsed exactly when the mock
    injected a collapse (a clean row is never left unflagged, nor a flagged one invented)."""
    truth = _truth(logs)
    rows = query(db, "SELECT request_id, collapsed, error_class FROM generations")
    assert rows and all(request_id in truth for request_id, _, _ in rows)
    for request_id, collapsed, error_class in rows:
        assert error_class is None, request_id
        assert bool(collapsed) == bool(truth[request_id]["injected"]), request_id


FAULT_CAMPAIGN = """
name = "lost-node"
order = "sequential"
devices = ["cuda:0", "cuda:1", "cuda:2", "cuda:3", "cuda:4", "cuda:5"]

[cluster]
engine = "ray"
address = "{address}"
placement_timeout = "5s"

[server]
command = "{{python}} -m soakgate.mockserver --host {{host}} --port {{port}} --seed {{port}} \
{{flags}} --ground-truth {{log_dir}}/gt-{{instance}}.jsonl"
health = "/health"
startup_timeout = "60s"
warmup_requests = 1
stop_grace = "5s"

[[configs]]
label = "eager"
flags = "--tokens-per-s 20 --collapse-rate 0.05"
requests = 30

[[configs]]
label = "graph"
flags = "--tokens-per-s 20 --collapse-rate 0.05"
requests = 10

[load]
concurrency = 2
max_tokens = 16

[guard]
interval = 0.5
health_interval = 1
restart_backoff = 0.5
max_restarts = 1
telemetry = false
"""


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A 3-node Ray cluster with 2 logical GPUs per node, on loopback, owned by the test."""
    monkeypatch.setenv(LOOPBACK_SWITCH, "0")  # before Ray is imported: it keeps to 127.0.0.1
    from ray.cluster_utils import Cluster

    args = {"num_cpus": 1, "num_gpus": 2, "node_ip_address": LOOPBACK}
    made = Cluster(initialize_head=True, head_node_args={**args, "include_dashboard": False})
    try:
        for _ in range(2):
            made.add_node(**args)
        made.wait_for_nodes()
        yield made
    finally:
        made.shutdown()


def test_a_node_removed_mid_block_is_a_fault_window_and_resume_completes_the_campaign(
    tmp_path: Path, cluster: Any
) -> None:
    path = tmp_path / "lost.toml"
    path.write_text(FAULT_CAMPAIGN.format(address=cluster.address))
    db = tmp_path / "runs.sqlite"
    command = [sys.executable, "-m", "soakgate", "campaign", str(path), "--db", str(db)]
    with subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True) as process:  # fmt: skip
        try:
            victim, lost = _remove_a_worker_node_once_it_serves(cluster, db)
            _wait_for_rows(db, "graph", 2)  # then stop it mid-block, as a user's Ctrl-C does
            process.send_signal(signal.SIGINT)
            output, _ = process.communicate(timeout=200)
        finally:
            process.kill()
    assert process.returncode == 130, output
    (eager, _), (graph, _) = query(db, "SELECT run_id, label FROM runs ORDER BY started_at")
    _check_the_lost_node(db, eager, lost, victim)
    resumed = soakgate("campaign", str(path), "--db", str(db), "--resume", cwd=tmp_path,
                       timeout=200)  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr  # a lost node is no crash
    assert "node under its server was lost" in resumed.stdout
    assert "servers crashed" not in resumed.stdout
    _check_the_resumed_block(db, graph, victim)
    assert query(db, "SELECT COUNT(*) FROM events WHERE kind = 'campaign_completed'") == [(1,)]
    _check_rows_against_truth(db, tmp_path / "runs.logs")
    for (data,) in query(db, "SELECT data FROM events WHERE kind = 'server_started'"):
        started = json.loads(data)  # no server outlived its actor, lost node or not
        assert not process_matches(started["pid"], started["argv"])


def _check_the_lost_node(db: Path, eager: str, lost: list[str], victim: str) -> None:
    """The removed node's two units: a fault window each; the unit is placed again on another
    node and finishes (a GPU freed up), or none had one free in time and it is retired."""
    events = query(db, "SELECT kind, target, data FROM events WHERE run_id = ?", eager)
    of = {(k, t): json.loads(d) for k, t, d in events}
    counts = dict(query(db, "SELECT target, COUNT(*) FROM generations WHERE run_id = ? "
                            "GROUP BY 1", eager))  # fmt: skip
    assert len(counts) == 6 and all(counts[t] == 30 for t in counts if t not in lost)
    for target in lost:
        assert of[("engine_fault", target)]["cause"] == "node_lost"
        window = of[("fault_window", target)]
        assert window["start"] <= window["detected_at"]
        if window["recovered"]:
            again = of[("unit_placed", target)]
            assert again["attempt"] == 1 and again["node_id"] != victim
            assert window["end"] >= window["detected_at"] and window["incarnation_after"] == 1
            assert counts[target] == 30
        else:
            assert window["end"] is None
            assert "no Ray node had 1 free GPU" in of[("restart_failed", target)]["error"]
            assert ("instance_retired", target) in of and counts[target] < 30
    assert ("block_completed", None) in of


def _check_the_resumed_block(db: Path, graph: str, victim: str) -> None:
    """4 GPUs for 6 units: a unit that finds none free within the placement timeout is a
    start-up failure; the units placed after the resume finish their 10 requests, each numbered
    on from its own range without a gap."""
    events = query(db, "SELECT kind, target, data FROM events WHERE run_id = ? ORDER BY at",
                   graph)  # fmt: skip
    kinds = [k for k, _, _ in events]
    assert "block_interrupted" in kinds and "resumed" in kinds
    after = events[kinds.index("resumed") :]
    placed = {t: json.loads(d)["node_id"] for k, t, d in after if k == "unit_placed"}
    failed = {t for k, t, _ in after if k == "server_start_failed"}
    assert len(placed) >= 4 and len(placed) + len(failed) == 6  # a GPU may free up in time
    assert victim not in placed.values()
    seqs: dict[str, list[int]] = {}
    for target, seq in query(db, "SELECT target, seq FROM generations WHERE run_id = ?", graph):
        seqs.setdefault(target, []).append(seq)
    for target, numbers in seqs.items():
        base = int(target.split(":")[1]) * 10**12
        assert sorted(numbers) == list(range(base, base + len(numbers))), target
        assert len(numbers) == 10 if target in placed else len(numbers) <= 10, target


def _wait_for_rows(db: Path, label: str, count: int) -> None:
    deadline = time.monotonic() + 120
    sql = "SELECT COUNT(*) FROM generations g JOIN runs r USING (run_id) WHERE r.label = ?"
    while query(db, sql, label)[0][0] < count:
        assert time.monotonic() < deadline, f"no {label} rows in time"
        time.sleep(0.3)


def _remove_a_worker_node_once_it_serves(cluster: Any, db: Path) -> tuple[str, list[str]]:
    """Wait (bounded) until both units of a worker node have stored rows, remove that node;
    its node id and the units it held."""
    workers = {node.node_id: node for node in cluster.list_all_nodes() if not node.head}
    deadline = time.monotonic() + 120
    by_node: dict[str, list[str]] = {}
    while time.monotonic() < deadline:
        time.sleep(0.5)
        if not db.exists() or not query(
            db, "SELECT 1 FROM sqlite_master WHERE name IN ('events', 'generations')"
        ):  # not there yet, or the file is made and its schema not yet committed
            continue
        for (data,) in query(db, "SELECT data FROM events WHERE kind = 'cluster'"):
            # Every node here is 127.0.0.1, so the driver may have joined through a worker's
            # raylet: removing that one would take the driver down, not just a node under it.
            workers.pop(json.loads(data)["driver_node_id"], None)
        placed = query(db, "SELECT target, data FROM events WHERE kind = 'unit_placed'")
        rows = dict(query(db, "SELECT target, COUNT(*) FROM generations GROUP BY 1"))
        by_node = {}
        for target, data in placed:
            by_node.setdefault(json.loads(data)["node_id"], []).append(target)
        for node_id, targets in by_node.items():
            if (
                node_id in workers
                and len(targets) == 2
                and all(rows.get(t, 0) >= 3 for t in targets)
            ):
                cluster.remove_node(workers[node_id])
                return node_id, targets
    raise AssertionError(f"no worker node served two units in time: {by_node}, {rows}")


BAD_CLUSTERS = {
    'engine = "ray"\naddress = "ray:/head"': "address must be",
    'engine = "ray"\naddress = "local:0"': "needs at least one node",
    'engine = "ray"\naddress = "auto"\ngpus_per_node = 2': 'gpus_per_node is for address = "local:N"',
    'address = "auto"': 'need engine = "ray"',
    'engine = "kubernetes"': "engine must be local or ray",
}


@pytest.mark.parametrize("table", list(BAD_CLUSTERS))
def test_a_bad_cluster_table_is_one_line_and_exit_2(tmp_path: Path, table: str) -> None:
    path = _fleet_with(tmp_path, table)
    result = soakgate("campaign", str(path), "--db", "x.sqlite", cwd=tmp_path)
    assert result.returncode == 2
    assert BAD_CLUSTERS[table] in one_error_line(result)
    assert not (tmp_path / "x.sqlite").exists()


def test_an_address_nobody_answers_is_one_line_and_exit_2(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:  # a loopback port that is free: nothing listens there
        sock.bind((LOOPBACK, 0))
        port = sock.getsockname()[1]
    path = _fleet_with(tmp_path, f'engine = "ray"\naddress = "{LOOPBACK}:{port}"')
    result = soakgate("campaign", str(path), "--db", "x.sqlite", cwd=tmp_path, timeout=60)
    assert result.returncode == 2
    assert f"cannot connect to the Ray cluster at {LOOPBACK}:{port}" in one_error_line(result)
    assert not (tmp_path / "x.sqlite").exists()


def test_engine_ray_without_ray_installed_says_how_to_install_it(tmp_path: Path) -> None:
    hide = tmp_path / "no-ray"
    hide.mkdir()  # `import ray` fails in the command, as it does without the extra
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['ray'] = None\n")
    path = _fleet_with(tmp_path, 'engine = "ray"\naddress = "local:3"\ngpus_per_node = 2')
    env = {"PYTHONPATH": os.pathsep.join([str(hide), os.environ.get("PYTHONPATH", "")])}
    result = soakgate("campaign", str(path), "--db", "x.sqlite", cwd=tmp_path, env=env)
    assert result.returncode == 2
    assert "pip install 'soakgate[ray]'" in one_error_line(result)


def test_a_local_campaign_never_imports_ray(tmp_path: Path) -> None:
    script = ("import sys; from soakgate.campaign.model import load_campaign; "
              f"load_campaign({str(REPO / 'examples' / 'mock-campaign.toml')!r}); "
              "import soakgate.campaign.runner; print('ray' in sys.modules)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True)  # fmt: skip
    assert out.stdout.strip() == "False"


def _fleet_with(folder: Path, cluster_table: str) -> Path:
    """The README's fleet campaign with another `[cluster]` table."""
    text = FLEET.read_text()
    head, _, rest = text.partition("[cluster]\n")
    rest = rest[rest.index("\n[server]") :]
    path = folder / "fleet.toml"
    path.write_text(f"{head}[cluster]\n{cluster_table}\n{rest}")
    return path


# Last in the file: pytest-xdist hands out tests in file order, so the two slow tests that each
# start a Ray cluster land on different workers and overlap.
def test_the_readme_fleet_command_runs_six_units_per_config_each_on_its_recorded_node(
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    result = soakgate("campaign", str(FLEET), "--db", "fleet.sqlite", cwd=tmp_path, timeout=280)
    assert result.returncode == 0, result.stdout + result.stderr
    db = tmp_path / "fleet.sqlite"
    runs = dict(query(db, "SELECT run_id, label FROM runs"))
    assert sorted(runs.values()) == ["eager", "graph"]
    per_unit = query(db, "SELECT run_id, target, COUNT(*) FROM generations GROUP BY 1, 2")
    assert sorted((runs[r], t, n) for r, t, n in per_unit) == [
        (label, f"cuda:{i}", 25) for label in ("eager", "graph") for i in range(6)
    ]
    placed = query(db, "SELECT run_id, target, data FROM events WHERE kind = 'unit_placed'")
    nodes: dict[str, Counter[str]] = {}
    for run_id, _target, data in placed:
        where = json.loads(data)
        assert where["hostname"] and len(where["gpu_ids"]) == 1
        nodes.setdefault(runs[run_id], Counter())[where["node_id"]] += 1
    assert len(placed) == 12  # each unit once: no node was lost
    for label, count in nodes.items():  # 3 nodes x 2 GPUs: two units on each node
        assert sorted(count.values()) == [2, 2, 2], (label, count)
    _check_rows_against_truth(db, tmp_path / "fleet.logs")
    collapses = dict(query(db, "SELECT r.label, SUM(g.collapsed) FROM generations g "
                               "JOIN runs r USING (run_id) GROUP BY 1"))  # fmt: skip
    assert collapses["graph"] > collapses["eager"]  # 8 % against 2 % injected
    report = soakgate("report", "fleet.sqlite", cwd=tmp_path, env={"COLUMNS": "200"})
    assert report.returncode == 0, report.stderr
    lines = report.stdout.split("placement (Ray node and GPU of each unit):")[1].splitlines()
    shown = [line.strip() for line in lines if line.strip()]
    assert len(shown) == 12 and all(" (node " in line and " GPU " in line for line in shown)
    document = json.loads(
        soakgate("report", "fleet.sqlite", "--format", "json", cwd=tmp_path).stdout
    )
    assert {(p["label"], p["target"]) for p in document["placement"]} == {
        (label, f"cuda:{i}") for label in ("eager", "graph") for i in range(6)
    }
    print(f"fleet campaign end to end: {time.monotonic() - started:.1f} s")
