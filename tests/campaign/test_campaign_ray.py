"""Campaigns on Ray (`[cluster] engine = "ray"`): the README's fleet command on a local 3-node
cluster of logical GPUs, and the one-line refusals of a bad cluster (lost nodes and a killed
driver: test_campaign_ray_faults.py).

Ray start-up is the cost here (a node is a few processes), so each test that needs a cluster
starts one and runs the whole campaign on it; the mocks answer small requests fast."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from soakgate.campaign.cluster import LOOPBACK
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


def test_a_ray_client_address_that_accepts_and_stays_silent_is_one_line_and_exit_2(
    tmp_path: Path,
) -> None:
    """A `ray://` port that accepts connections and never answers (a hung head, a port that is
    not Ray Client): Ray Client gives up after its own waits, and warns on stderr first; the
    campaign says so in one line, exit 2, no database (issue 27: every Ray error one line)."""
    import socket

    with socket.socket() as listener:
        listener.bind((LOOPBACK, 0))
        listener.listen(16)  # the kernel accepts; nobody ever reads or writes
        address = f"ray://{LOOPBACK}:{listener.getsockname()[1]}"
        path = _fleet_with(tmp_path, f'engine = "ray"\naddress = "{address}"')
        # Ray Client's own waits, shortened (1 s, then 2 s a try; 30 s in all by default)
        quick = {"RAY_CLIENT_INITIAL_CONNECTION_TIMEOUT_S": "1",
                 "RAY_CLIENT_MAX_CONNECTION_TIMEOUT_S": "2"}  # fmt: skip
        result = soakgate("campaign", str(path), "--db", "x.sqlite", cwd=tmp_path, timeout=300,
                          env=quick)  # fmt: skip
    assert result.returncode == 2
    assert f"cannot connect to the Ray cluster at {address}" in one_error_line(result)
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
    # (Which configuration collapsed more is not asserted: 8 % and 2 % drawn over 150 rows
    # each leave it to chance in ~1 % of runs, and once failed CI; every row's flag is checked
    # against what its mock injected just above.)
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
