"""The `[cluster]` table: where a campaign's instances run (this machine, or a Ray cluster), and
connecting to (or starting) that Ray cluster. Ray is imported only here and only when asked for,
so soakgate without the `ray` extra works as before."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import sys
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soakgate.campaign.fields import Table
from soakgate.errors import ConfigError, UsageError

ENGINES = ("local", "ray")
LOOPBACK = "127.0.0.1"
LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Ray's switch (ray_constants.ENABLE_RAY_CLUSTER): off, Ray takes 127.0.0.1 as this node's
address, as it does on a laptop."""
CONNECT_TIMEOUT_S = 10.0
"""Bound on reaching a named Ray address before Ray itself is asked (it retries for minutes)."""
JOIN_TIMEOUT_S = 120.0
"""`local:N`: bound on its started nodes all showing in the cluster's table (each node's start
is bounded by Ray itself: 30 s for its raylet to register)."""
CLUSTER_MARK = "SOAKGATE_RAY_CLUSTER"
"""Environment variable set (to a fresh id) in every process of a `local:N` cluster: how
`--resume` finds the cluster a killed campaign left running. Ray's agents rename themselves
(`ray::DashboardAgent`), which can hide their environment, so they are also recorded by pid
and start time (`local_processes`)."""
_LOCAL = re.compile(r"local:(\d+)")
_CLIENT = re.compile(r"ray://[^\s/:]+(:\d+)?")
_GCS = re.compile(r"[^\s/:]+:\d+")


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    """Where instances run (the `[cluster]` table)."""

    engine: str = "local"
    """`local`: subprocesses of this process; `ray`: one Ray actor per instance, on a node with
    a free GPU."""
    address: str = "auto"
    """Ray: `auto` (the cluster this machine is part of), `ray://HOST:PORT` (Ray Client) or
    `local:N` (start an N-node cluster on this machine with logical GPUs, for trying it out)."""
    gpus_per_node: int = 1
    """`local:N` only: logical GPUs each started node declares."""
    devices_per_instance: int = 1
    """GPUs Ray reserves for each instance (a tensor-parallel server takes several)."""
    placement_timeout_s: float = 600.0
    """Bound on waiting for a node with a free GPU (at a block's start or after a node is lost)."""

    @property
    def local_nodes(self) -> int | None:
        """N of a `local:N` address (None for any other)."""
        match = _LOCAL.fullmatch(self.address)
        return int(match.group(1)) if match else None


def cluster_settings(table: Table) -> ClusterSettings:
    """Validate the `[cluster]` table (absent: the local engine)."""
    engine = table.choice("engine", ENGINES, "local")
    settings = ClusterSettings(
        engine=engine, address=table.text("address", "auto"),
        gpus_per_node=table.integer("gpus_per_node", 1, minimum=0),
        devices_per_instance=table.integer("devices_per_instance", 1, minimum=1),
        placement_timeout_s=table.duration("placement_timeout", 600.0),
    )  # fmt: skip
    table.done()
    if engine == "local":
        if table.data.keys() - {"engine"}:
            raise ConfigError('cluster: address and the other keys need engine = "ray"')
        return settings
    address = settings.address
    if not (address == "auto" or any(p.fullmatch(address) for p in (_LOCAL, _CLIENT, _GCS))):
        raise ConfigError(
            'cluster: address must be "auto", "ray://HOST:PORT" (Ray Client), "HOST:PORT" (the '
            f'head\'s GCS) or "local:N", not {address!r}'
        )
    if settings.local_nodes is not None and settings.local_nodes < 1:
        raise ConfigError(f"cluster: {address!r} needs at least one node")
    if "gpus_per_node" in table.data and settings.local_nodes is None:
        raise ConfigError('cluster: gpus_per_node is for address = "local:N" only')
    if settings.local_nodes is not None:
        loopback_only()
    ray_module()
    if address.startswith("ray://"):
        client_module()
    return settings


def loopback_only() -> None:
    """Make Ray (imported after this) keep a cluster on this machine to 127.0.0.1: it otherwise
    rewrites 127.0.0.1 to the machine's network address when it connects (`ray.init`)."""
    os.environ[LOOPBACK_SWITCH] = "0"


def ray_module() -> Any:
    """The `ray` package, or a one-line ConfigError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "cluster: engine = \"ray\" needs Ray: pip install 'soakgate[ray]'"
        ) from None
    return ray


def client_module() -> None:
    """A one-line ConfigError when Ray Client (`ray://` addresses) lacks its dependencies
    (`ray[client]`: grpcio), which plain `ray` does not install."""
    try:
        import grpc  # noqa: F401
    except ImportError:
        raise ConfigError(
            "cluster: a ray:// address needs Ray Client (grpcio): pip install 'soakgate[ray]'"
        ) from None


@dataclass(slots=True)
class Connected:
    """A campaign's connection to its Ray cluster."""

    ray: Any
    """The `ray` module, initialised."""
    local_cluster: str | None = None
    """`local:N`: the id in `CLUSTER_MARK` of the cluster this process started."""
    local: Any = None
    """`local:N`: the cluster (`ray.cluster_utils.Cluster`)."""


@contextlib.contextmanager
def connected(settings: ClusterSettings) -> Iterator[Connected]:
    """Connect to the campaign's Ray cluster (starting it for `local:N`), and leave it after."""
    ray = ray_module()
    # A failed call whose result nobody asked for (an actor already gone) is expected here.
    os.environ.setdefault("RAY_IGNORE_UNHANDLED_ERRORS", "1")
    cluster, mark = None, None
    try:
        options: dict[str, Any] = {}
        if settings.local_nodes is not None:
            mark = os.environ[CLUSTER_MARK] = uuid.uuid4().hex
            cluster = _start_local(ray, settings)
            address, options["_node_ip_address"] = cluster.address, LOOPBACK
        else:
            address = settings.address
            _check_reachable(address)
        _init(ray, address, options)
        yield Connected(ray, mark, cluster)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if cluster is not None:
            cluster.shutdown()


CLIENT_ATTEMPTS = 3
"""Tries of a `ray://` connection whose per-client server did not start in time."""
CLIENT_SLOW = "Initialization failure from server"
"""What Ray Client says when the head's proxy could not start the client's own server in time
(30 s by default: a busy head node). Transient: the next try starts another."""


def _init(ray: Any, address: str, options: dict[str, Any]) -> None:
    """`ray.init`, a `ray://` address tried again (bounded) while its server is slow to start;
    any other failure is one line and exit 2."""
    for attempt in range(1, CLIENT_ATTEMPTS + 1):
        try:
            with warnings.catch_warnings():  # Ray Client warns on stderr before it raises
                warnings.simplefilter("ignore")
                ray.init(address=address, logging_level="ERROR", log_to_driver=False, **options)
            return
        except Exception as exc:  # Ray raises many kinds here (ConnectionError, TimeoutError, ...)
            slow = address.startswith("ray://") and CLIENT_SLOW in str(exc)
            if not slow or attempt == CLIENT_ATTEMPTS:
                raise UsageError(f"cannot connect to the Ray cluster at {address}: "
                                 f"{_first_line(exc)}") from None  # fmt: skip
        if ray.is_initialized():
            ray.shutdown()
        again = f"trying again ({attempt + 1} of {CLIENT_ATTEMPTS})"
        print(f"soakgate: the Ray Client server at {address} did not start in time; {again}",
              file=sys.stderr, flush=True)  # fmt: skip


def _check_reachable(address: str) -> None:
    """A one-line UsageError when nothing listens at a `HOST:PORT` or `ray://HOST:PORT`."""
    if address == "auto":
        return  # Ray looks for the cluster this machine runs and says at once when there is none
    host, _, port = address.removeprefix("ray://").rpartition(":")
    host, port = (host, port) if host else (port, "10001")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UsageError(f"cannot connect to the Ray cluster at {address}: {reason}") from None


def _start_local(ray: Any, settings: ClusterSettings) -> Any:
    """An N-node cluster on this machine: Ray's own test cluster (`ray.cluster_utils.Cluster`),
    each node declaring `gpus_per_node` logical GPUs (Ray needs no hardware for that). A node
    that does not start (Ray gives its raylet 30 s to register) is a one-line UsageError, and
    what had started is stopped."""
    import logging

    from ray.cluster_utils import Cluster

    # Ray logs each retry of a slow node, and the previous cluster's address, at INFO.
    logging.getLogger("ray").setLevel(logging.ERROR)
    nodes = settings.local_nodes or 1
    # One logical CPU per node: instances reserve none, and Ray starts no idle workers for more.
    # On loopback only: a cluster for trying soakgate out talks to nothing but this machine.
    args: dict[str, Any] = {
        "num_cpus": 1, "num_gpus": settings.gpus_per_node, "node_ip_address": LOOPBACK,
    }  # fmt: skip
    cluster = Cluster(initialize_head=False)
    try:
        # No dashboard: soakgate reads the cluster through Ray's API, and it is one process less.
        cluster.add_node(wait=False, **args, include_dashboard=False)
        for _ in range(nodes - 1):
            cluster.add_node(wait=False, **args)
        cluster.wait_for_nodes(timeout=JOIN_TIMEOUT_S)
    except Exception as exc:  # Ray raises plain Exception for a node that timed out starting
        cluster.shutdown()  # type: ignore[no-untyped-call]
        where = settings.address
        raise UsageError(f"cannot start the local Ray cluster ({where}): "
                         f"{_first_line(exc)}") from None  # fmt: skip
    return cluster


def local_processes(cluster: Any) -> list[list[int]]:
    """[pid, start time] of the processes of a `local:N` cluster and of their children (the
    agents each raylet starts)."""
    roots = {info.process.pid for node in cluster.list_all_nodes()
             for infos in node.all_processes.values() for info in infos
             if info.process is not None}  # fmt: skip
    found = set(roots)
    for entry in Path("/proc").iterdir():
        stat = _stat(entry)
        if stat is not None and int(stat[1]) in roots:
            found.add(int(entry.name))
    return sorted([pid, start] for pid in found if (start := _start_time(pid)) is not None)


def stop_local_cluster(
    mark: str, driver: tuple[int, list[str]] | None, processes: list[list[int]]
) -> list[int]:
    """Kill the processes of a `local:N` cluster a killed campaign left running: found by the
    cluster's id in their environment, or recorded (pid, start time); Ray's agents ignore
    SIGTERM. The pids killed. A UsageError when the campaign that started the cluster (pid,
    command line) is still running."""
    from soakgate.servers.instance import process_matches

    if driver is not None and process_matches(*driver):
        raise UsageError(f"the campaign is still running (pid {driver[0]}); stop it first")
    found = set(_processes_marked(mark))
    found.update(pid for pid, start in processes if _start_time(pid) == start)
    for pid in sorted(found):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return sorted(found)


def _stat(entry: Path) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state, ppid, ...), or None."""
    try:
        return (entry / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _start_time(pid: int) -> int | None:
    """A live (not zombie) process's start time in clock ticks since boot, or None."""
    stat = _stat(Path(f"/proc/{pid}"))
    if stat is None or stat[0] == "Z":
        return None
    return int(stat[19])


def _processes_marked(mark: str) -> list[int]:
    """Pids of this user's processes whose environment has `CLUSTER_MARK=mark` (Linux /proc)."""
    wanted = f"{CLUSTER_MARK}={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environment = (entry / "environ").read_bytes()
        except OSError:  # gone meanwhile, or another user's
            continue
        if wanted in environment.split(b"\0"):
            found.append(int(entry.name))
    return found


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:300] if text else type(error).__name__
