"""The `[cluster]` table: where a campaign's instances run (this machine, or a Ray cluster), and
connecting to (or starting) that Ray cluster. Ray is imported only here and only when asked for,
so soakgate without the `ray` extra works as before."""

from __future__ import annotations

import contextlib
import os
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass
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


@contextlib.contextmanager
def connected(settings: ClusterSettings) -> Iterator[Any]:
    """Connect to the campaign's Ray cluster (starting it for `local:N`), and leave it after."""
    ray = ray_module()
    cluster = None
    try:
        options: dict[str, Any] = {}
        if settings.local_nodes is not None:
            cluster = _start_local(ray, settings.local_nodes, settings.gpus_per_node)
            address, options["_node_ip_address"] = cluster.address, LOOPBACK
        else:
            address = settings.address
            _check_reachable(address)
        try:
            ray.init(address=address, logging_level="ERROR", log_to_driver=False, **options)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UsageError(f"cannot connect to the Ray cluster at {address}: {first}") from None
        yield ray
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if cluster is not None:
            cluster.shutdown()


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


def _start_local(ray: Any, nodes: int, gpus_per_node: int) -> Any:
    """An N-node cluster on this machine: Ray's own test cluster (`ray.cluster_utils.Cluster`),
    each node declaring `gpus_per_node` logical GPUs (Ray needs no hardware for that)."""
    from ray.cluster_utils import Cluster

    # One logical CPU per node: instances reserve none, and Ray starts no idle workers for more.
    # On loopback only: a cluster for trying soakgate out talks to nothing but this machine.
    args: dict[str, Any] = {"num_cpus": 1, "num_gpus": gpus_per_node, "node_ip_address": LOOPBACK}
    # No dashboard: soakgate reads the cluster through Ray's API, and it is one process less.
    cluster = Cluster(initialize_head=True, head_node_args={**args, "include_dashboard": False})
    for _ in range(nodes - 1):
        cluster.add_node(**args)
    cluster.wait_for_nodes()
    return cluster
