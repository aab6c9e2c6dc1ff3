"""Ray campaigns keep the contract when Ray fails under them: lost nodes, a block short of GPUs, a killed driver and its `local:N` cluster, a cluster that does
not start in time. Each case runs the real `soakgate campaign` on a real local cluster and
checks what is stored against what the mock servers received.

A cluster is the cost here (a node is a few processes): each slow test starts one and runs
everything it checks on it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from soakgate.servers.instance import process_matches
from tests.campaign.helpers import query
from tests.campaign.ray_helpers import (
    local_cluster,
    marked_processes,
    session_processes,
    stored,
    times_received,
    wait_for,
)
from tests.cli.helpers import one_error_line, soakgate

REPO = Path(__file__).resolve().parents[2]
MOCK = (
    "{python} -m soakgate.mockserver --host {host} --port {port} --seed {port} {flags} "
    "--ground-truth {log_dir}/gt-{instance}.jsonl"
)
CAMPAIGN = """
name = "{name}"
order = "sequential"
devices = {devices}

[cluster]
engine = "ray"
address = "{address}"
placement_timeout = "5s"
{cluster}

[server]
command = "{mock}"
health = "/health"
startup_timeout = "60s"
warmup_requests = 1
stop_grace = "5s"

{configs}

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
SLOW_MOCK = "--tokens-per-s 20 --collapse-rate 0.05"  # 0.8 s per 16-token answer


def _campaign(folder: Path, name: str, address: str, devices: int, configs: dict[str, int],
              cluster: str = "") -> Path:  # fmt: skip
    entries = "\n".join(f'[[configs]]\nlabel = "{label}"\nflags = "{SLOW_MOCK}"\n'
                        f"requests = {n}\n" for label, n in configs.items())  # fmt: skip
    path = folder / f"{name}.toml"
    path.write_text(CAMPAIGN.format(
        name=name, address=address, cluster=cluster, mock=MOCK, configs=entries,
        devices=json.dumps([f"cuda:{i}" for i in range(devices)]),
    ))  # fmt: skip
    return path


def _clean(output: str) -> None:
    """No traceback, no asyncio complaint, no internal error: every failure is one line."""
    for sign in ("Traceback", "never retrieved", "internal error", "ActorDiedError"):
        assert sign not in output, output


@pytest.mark.slow
@pytest.mark.timeout(1500)  # a Ray cluster losing nodes on a loaded machine: each wait is bounded
def test_lost_nodes_are_fault_windows_with_their_resent_requests_and_a_block_short_of_gpus_fails(
    tmp_path: Path,
) -> None:
    # The head's 4 GPUs leave room for the units of the first worker removed, and none for six
    # units once both workers are gone.
    cluster = local_cluster(3, 2, head_gpus=4)
    try:
        path = _campaign(tmp_path, "lost", cluster.address, 6, {"eager": 40, "graph": 10})
        db = tmp_path / "runs.sqlite"
        command = [sys.executable, "-m", "soakgate", "campaign", str(path), "--db", str(db)]
        with subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) as process:  # fmt: skip
            try:
                # Ray 2.60 joins a driver on this machine through the head: workers can go
                wait_for(lambda: _driver_node(db), "the cluster event")
                assert _driver_node(db) == cluster.head_node.node_id
                first = _remove_a_worker_once_it_serves(cluster, db)
                # its units were placed again on the GPUs left; then the other worker goes too.
                # Twice (beside four busy loops and more, load 8-12) this was not seen within
                # 180 s; whether it came later is not known (the campaign's output went with the
                # kill: it is kept now). Ray notices the lost node, the driver places the units
                # again and each starts a server in a new worker process, on a starved machine.
                try:
                    wait_for(lambda: _replaced(db, first[1]), "the lost units placed again", 480)
                except AssertionError as exc:
                    process.kill()
                    said = process.communicate()[0]
                    raise AssertionError(f"{exc}; the campaign said:\n{said}") from None
                second = _remove_the_other_worker(cluster, db)
                output, _ = process.communicate(timeout=400)
            finally:
                process.kill()
    finally:
        cluster.shutdown()
    _clean(output)
    assert process.returncode == 1, output  # the graph block could not place its six units
    assert "block lost/001-graph-r0 failed: " in output
    assert "no Ray node had 1 free GPU(s) within 5 s" in output
    # a lost node is the cluster's fault, not one of the configuration's crashes
    assert "configuration eager: the node under its server was lost" in output
    assert "servers crashed" not in output
    runs = dict(query(db, "SELECT label, run_id FROM runs"))
    assert dict(query(db, "SELECT label, status FROM runs")) == {
        "eager": "completed", "graph": "failed"
    }  # fmt: skip
    _check_faults(db, runs["eager"], first[1], second[1])
    _check_resends(db, runs["eager"], tmp_path / "runs.logs")
    # The short block never soaked: its placed units were let go before any server started.
    graph = [k for (k,) in query(db, "SELECT kind FROM events WHERE run_id = ?", runs["graph"])]
    assert "server_start_failed" in graph and "server_started" not in graph
    assert not query(db, "SELECT 1 FROM generations WHERE run_id = ?", runs["graph"])
    for (data,) in query(db, "SELECT data FROM events WHERE kind = 'server_started'"):
        started = json.loads(data)  # no server outlived its actor, lost node or not
        assert not process_matches(started["pid"], started["argv"])


def _driver_node(db: Path) -> str | None:
    found = stored(db, "SELECT data FROM events WHERE kind = 'cluster'")
    return str(json.loads(found[0][0])["driver_node_id"]) if found else None


def _replaced(db: Path, targets: set[str]) -> bool:
    """Each of `targets` was placed again and has stored a row since."""
    placed = _latest_placements(db)
    rows = dict(stored(db, "SELECT target, MAX(started_at) FROM generations GROUP BY 1"))
    return all(placed[t][0]["attempt"] == 1 and rows.get(t, 0) > placed[t][1] for t in targets)


def _latest_placements(db: Path) -> dict[str, tuple[dict[str, Any], float]]:
    """Eager target -> its latest `unit_placed` data and time."""
    placed = stored(
        db,
        "SELECT e.target, e.data, e.at FROM events e JOIN runs r USING "
        "(run_id) WHERE e.kind = 'unit_placed' AND r.label = 'eager' ORDER BY e.at",
    )
    return {t: (json.loads(d), at) for t, d, at in placed}


def _remove_a_worker_once_it_serves(cluster: Any, db: Path) -> tuple[str, set[str]]:
    """Remove a worker node once every eager unit on it has stored 3 rows; its node id and
    those units."""
    workers = {node.node_id: node for node in cluster.worker_nodes}

    def serving() -> tuple[str, set[str]] | None:
        counts = dict(stored(db, "SELECT target, COUNT(*) FROM generations GROUP BY 1"))
        placed = _latest_placements(db)
        for node_id in workers:
            mine = {t for t, (d, _) in placed.items() if d["node_id"] == node_id}
            if mine and all(counts.get(t, 0) >= 3 for t in mine):
                return node_id, mine
        return None

    node_id, units = wait_for(serving, "a worker node serving eager units")
    cluster.remove_node(workers[node_id])
    return node_id, units


def _remove_the_other_worker(cluster: Any, db: Path) -> tuple[str, set[str]]:
    """Remove the worker left (the head keeps 4 GPUs); its node id and the units it held."""
    (node,) = cluster.worker_nodes
    held = {t for t, (d, _) in _latest_placements(db).items() if d["node_id"] == node.node_id}
    cluster.remove_node(node)
    return node.node_id, held


def _check_faults(db: Path, run_id: str, first: set[str], second: set[str]) -> None:
    """Each unit on a removed node: an engine fault and its window, with the numbers it had
    sent (for certain, and at most). The first node's units were placed again at once."""
    events = query(db, "SELECT kind, target, data FROM events WHERE run_id = ?", run_id)
    faults = [(t, json.loads(d)) for k, t, d in events if k == "engine_fault"]
    windows = [(t, json.loads(d)) for k, t, d in events if k == "fault_window"]
    lost = {t for t, _ in faults}
    # a unit the second removal caught just as its node went may have finished all its
    # requests first: no fault then
    assert first <= lost <= first | second and {t for t, _ in windows} == lost
    assert all(w["recovered"] for t, w in windows if t in first and w["attempts"] == 1)
    for _, fault in faults:
        assert fault["cause"] == "node_lost"
        assert fault["sent_through"] <= fault["lease_through"]
    assert ("block_completed", None) in {(k, t) for k, t, _ in events}


def _check_resends(db: Path, run_id: str, logs: Path) -> None:
    """What the mocks received, request by request, against the rows: a row's certain earlier
    sends happened, and no send is unaccounted for (a request received more often than its
    row says was possible, or received without a row beyond what a lost actor's lease let it
    send)."""
    received = times_received(logs, run_id)
    rows = {rid: (target, seq, attempts, json.loads(details).get("resent"))
            for rid, target, seq, attempts, details in query(
                db, "SELECT request_id, target, seq, attempts, details FROM generations "
                    "WHERE run_id = ?", run_id)}  # fmt: skip
    leases: dict[str, int] = {}
    for target, data in query(db, "SELECT target, data FROM events WHERE run_id = ? AND "
                                  "kind = 'engine_fault'", run_id):  # fmt: skip
        leases[target] = max(leases.get(target, -1), json.loads(data)["lease_through"])
    marked = 0
    for rid, n in received.items():
        if rid not in rows:  # sent by a lost actor, its row lost, not sent again
            target, seq = f"cuda:{int(rid.split('-')[-1]) // 10**12}", int(rid.split("-")[-1])
            assert target in leases and seq <= leases[target], rid
            continue
        _, _, attempts, resent = rows[rid]
        certain, possible = (resent["certain"], resent["possible"]) if resent else (0, 0)
        assert attempts == 1 + certain, rid
        assert certain <= n - 1 <= certain + possible, (rid, n, resent)
        marked += bool(resent)
    assert all(rid in received for rid in rows)  # every row was answered by a mock
    assert marked, "no request was sent again after the lost nodes"
    resent_events = query(db, "SELECT data FROM events WHERE run_id = ? AND kind = 'resent'",
                          run_id)  # fmt: skip
    assert resent_events and all(json.loads(d)["cause"] == "actor_lost" for (d,) in resent_events)


@pytest.mark.slow
@pytest.mark.timeout(900)  # a Ray cluster losing nodes on a loaded machine: each wait is bounded
def test_resume_after_a_killed_driver_stops_its_local_cluster_and_counts_from_the_database(
    tmp_path: Path,
) -> None:
    path = _campaign(tmp_path, "killed", "local:2", 2, {"only": 60}, cluster="gpus_per_node = 1")
    db = tmp_path / "runs.sqlite"
    command = [sys.executable, "-m", "soakgate", "campaign", str(path), "--db", str(db)]
    with subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, start_new_session=True) as driver:  # fmt: skip
        try:
            sql = "SELECT COUNT(*) FROM generations HAVING COUNT(*) >= 12"
            wait_for(lambda: stored(db, sql), "rows of the first driver")
        finally:
            driver.send_signal(signal.SIGKILL)
    (data,) = query(db, "SELECT data FROM events WHERE kind = 'cluster'")[0]
    first = json.loads(data)["local_cluster"]["id"]
    # The actors and their servers die with the driver; Ray's agents stay until stopped.
    left = _settled(lambda: session_processes(driver.pid), "the killed driver's cluster, left")
    resumed = soakgate("campaign", str(path), "--db", str(db), "--resume", cwd=tmp_path,
                       timeout=400, env={"COLUMNS": "200"})  # fmt: skip
    output = resumed.stdout + resumed.stderr
    _clean(output)
    assert resumed.returncode == 0, output
    assert not session_processes(driver.pid)  # the old cluster is gone
    stopped = [
        json.loads(d)
        for (d,) in query(
            db, "SELECT data FROM events WHERE kind = 'orphan_stopped' AND target IS NULL"
        )
    ]
    assert len(stopped) == 1 and stopped[0]["cluster"] == first
    # what resume stopped was the old cluster's; on a loaded machine some of what was left may
    # have finished exiting by itself first (the actors' servers die with the driver)
    assert stopped[0]["pids"] and set(stopped[0]["pids"]) <= left
    clusters = [json.loads(d)["local_cluster"]
                for (d,) in query(db, "SELECT data FROM events WHERE kind = 'cluster'")]  # fmt: skip
    assert len(clusters) == 2 and clusters[0]["id"] == first  # one new one, after the old went
    second = {pid for pid, _ in clusters[1]["processes"]} | marked_processes(clusters[1]["id"])
    assert not second & _alive()  # and the resumed campaign stopped its own
    (run_id, status), = query(db, "SELECT run_id, status FROM runs")  # fmt: skip
    assert status == "completed"
    counts = dict(query(db, "SELECT target, COUNT(*) FROM generations GROUP BY 1"))
    assert counts == {"cuda:0": 60, "cuda:1": 60}
    row = next(line for line in resumed.stdout.splitlines() if "killed/000-only-r0" in line
               and "│" in line)  # fmt: skip
    assert "│ 120 " in row, row  # the table counts the database, not this process's requests
    _check_driver_resends(db, run_id, tmp_path / "runs.logs")


def _alive() -> set[int]:
    return {int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
            and (p / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"}  # fmt: skip


def _settled(read: Any, what: str) -> Any:
    """`read()`'s value once it is non-empty and the same two seconds apart."""
    last: list[Any] = [None]

    def same() -> Any:
        now = read()
        if now and now == last[0]:
            return now
        last[0] = now
        time.sleep(2)
        return None

    return wait_for(same, what)


def _check_driver_resends(db: Path, run_id: str, logs: Path) -> None:
    """After a killed driver nothing is certain: the rows sent again are marked possible, and
    every request the mocks received twice is such a row."""
    received = times_received(logs, run_id)
    events = [json.loads(d) for (d,) in query(db, "SELECT data FROM events WHERE run_id = ? "
                                                  "AND kind = 'resent'", run_id)]  # fmt: skip
    assert events and all(e["cause"] == "driver_stopped" and e["certain"] == 0 for e in events)
    rows = {rid: json.loads(details).get("resent") for rid, details in query(
        db, "SELECT request_id, details FROM generations WHERE run_id = ?", run_id)}  # fmt: skip
    twice = {rid for rid, n in received.items() if n > 1}
    assert twice and all(rows.get(rid) and rows[rid]["possible"] >= 1 for rid in twice)
    assert all(n <= 2 for n in received.values())


# The real command, with the raylet of the second node stopped as soon as it is started: a node
# that never finishes its start (Ray gives it 30 s), as a loaded machine's did.
SLOW_NODE = """
import os, signal, sys
import ray._private.services as services
original, started = services.start_raylet, []
def start_raylet(*args, **kwargs):
    info = original(*args, **kwargs)
    started.append(info)
    if len(started) > 1:
        os.kill(info.process.pid, signal.SIGSTOP)
    return info
services.start_raylet = start_raylet
from soakgate.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
@pytest.mark.timeout(900)  # a Ray cluster losing nodes on a loaded machine: each wait is bounded
def test_a_local_cluster_node_slow_to_start_is_one_line_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    path = _campaign(tmp_path, "slow", "local:2", 2, {"only": 5}, cluster="gpus_per_node = 1")
    command = [sys.executable, "-c", SLOW_NODE, "campaign", str(path), "--db", "x.sqlite"]
    with subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, start_new_session=True) as process:  # fmt: skip
        out, err = process.communicate(timeout=300)
    result = subprocess.CompletedProcess(command, process.returncode, out, err)
    assert result.returncode == 2, out + err
    line = one_error_line(result)
    assert "cannot start the local Ray cluster (local:2): The current node timed out" in line
    assert not (tmp_path / "x.sqlite").exists()
    assert not session_processes(process.pid)  # the nodes that did start were stopped


def test_a_ray_client_address_without_its_dependencies_says_how_to_install_them(
    tmp_path: Path,
) -> None:
    hide = tmp_path / "no-grpc"
    hide.mkdir()  # `import grpc` fails in the command, as it does with plain `ray`
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['grpc'] = None\n")
    path = _campaign(tmp_path, "client", "ray://127.0.0.1:1", 1, {"only": 5})
    env = {"PYTHONPATH": os.pathsep.join([str(hide), os.environ.get("PYTHONPATH", "")])}
    result = soakgate("campaign", str(path), "--db", "x.sqlite", cwd=tmp_path, env=env)
    assert result.returncode == 2
    assert "ray:// address needs Ray Client (grpcio): pip install 'soakgate[ray]'" in (
        one_error_line(result)
    )
    extras = (REPO / "pyproject.toml").read_text().split("\nray = [", 1)[1].split("]\n", 1)[0]
    assert '"ray[client]' in extras  # the extra installs what every documented address needs


class _SlowClientRay:
    """A `ray` module whose Ray Client server starts too slowly `slow` times, then connects."""

    def __init__(self, slow: int, message: str = "Initialization failure from server:\n") -> None:
        self.slow, self.message, self.calls, self.initialized = slow, message, 0, False

    def init(self, **kwargs: Any) -> None:
        self.calls += 1
        if self.calls <= self.slow:
            raise ConnectionError(self.message)
        self.initialized = True

    def is_initialized(self) -> bool:
        return self.initialized

    def shutdown(self) -> None:
        self.initialized = False


def test_a_ray_client_server_slow_to_start_is_tried_again_a_bounded_number_of_times(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from soakgate.campaign.cluster import CLIENT_ATTEMPTS, _init
    from soakgate.errors import UsageError

    ray = _SlowClientRay(slow=CLIENT_ATTEMPTS - 1)
    _init(ray, "ray://10.0.0.1:10001", {})
    assert ray.initialized and ray.calls == CLIENT_ATTEMPTS
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == CLIENT_ATTEMPTS - 1 and "did not start in time" in lines[0]
    ray = _SlowClientRay(slow=CLIENT_ATTEMPTS)  # never comes: one line, exit 2 (UsageError)
    with pytest.raises(UsageError, match="cannot connect to the Ray cluster at ray://"):
        _init(ray, "ray://10.0.0.1:10001", {})
    assert ray.calls == CLIENT_ATTEMPTS
    ray = _SlowClientRay(slow=1)  # a GCS address is not Ray Client: no second try
    with pytest.raises(UsageError):
        _init(ray, "10.0.0.1:6379", {})
    ray = _SlowClientRay(slow=1, message="Connection refused")  # not slowness: no second try
    with pytest.raises(UsageError):
        _init(ray, "ray://10.0.0.1:10001", {})
    assert ray.calls == 1
