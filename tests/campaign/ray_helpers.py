"""Shared by the Ray campaign tests: a local cluster on loopback, the mocks' ground truth, and
waiting on the database a campaign writes."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from soakgate.campaign.cluster import CLUSTER_MARK, LOOPBACK, LOOPBACK_SWITCH
from tests.campaign.helpers import query


def local_cluster(
    nodes: int, gpus: int, head_gpus: int | None = None, client_port: int | None = None
) -> Any:
    """A Ray cluster of `nodes` nodes with `gpus` logical GPUs each (the head `head_gpus`), on
    loopback (Ray Client served on `client_port` when given); the caller shuts it down."""
    os.environ[LOOPBACK_SWITCH] = "0"  # before Ray is imported: it keeps to 127.0.0.1
    from ray.cluster_utils import Cluster

    args = {"num_cpus": 1, "num_gpus": gpus, "node_ip_address": LOOPBACK}
    head = {
        **args,
        "include_dashboard": False,
        "num_gpus": gpus if head_gpus is None else head_gpus,
    }
    if client_port is not None:
        head["ray_client_server_port"] = client_port
    made = Cluster(initialize_head=True, head_node_args=head)
    try:
        for _ in range(nodes - 1):
            made.add_node(**args)
        made.wait_for_nodes(timeout=120)
    except BaseException:
        made.shutdown()
        raise
    return made


def truth_lines(folder: Path) -> list[dict[str, Any]]:
    """Every ground-truth line of every mock log under `folder` (one per request a mock read,
    logged as it arrived)."""
    return [json.loads(line) for path in sorted(folder.rglob("gt-*.jsonl"))
            for line in path.read_text().splitlines() if line.strip()]  # fmt: skip


def times_received(folder: Path, run_id: str) -> Counter[str]:
    """Request id -> how often the mocks received it, for the run's requests."""
    return Counter(
        line["request_id"] for line in truth_lines(folder)
        if str(line["request_id"]).startswith(f"{run_id}-")
    )  # fmt: skip


def wait_for(condition: Any, what: str, timeout: float = 180) -> Any:
    """Poll `condition()` until it returns something true (bounded); its value."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not in time"
        time.sleep(0.3)


def stored(db: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """`query`, or nothing while the database or its schema is not there yet."""
    if not db.exists():
        return []
    if not query(db, "SELECT 1 FROM sqlite_master WHERE name IN ('events', 'generations')"):
        return []
    return query(db, sql, *params)


def marked_processes(mark: str) -> set[int]:
    """Pids of the live processes of the soakgate `local:N` Ray cluster whose id is `mark`."""
    wanted = f"{CLUSTER_MARK}={mark}".encode()
    found = set()
    for entry in _proc():
        try:
            environment = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if wanted in environment:
            found.add(int(entry.name))
    return found


def session_processes(session: int) -> set[int]:
    """Pids of the live processes of a session (a command started with `start_new_session`
    and whatever it started, orphans included: Ray's processes keep their session)."""
    found = set()
    for entry in _proc():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == session and fields[0] != "Z":  # state, ppid, pgrp, session
            found.add(int(entry.name))
    return found


def _proc() -> Iterator[Path]:
    return (p for p in Path("/proc").iterdir() if p.name.isdigit())
