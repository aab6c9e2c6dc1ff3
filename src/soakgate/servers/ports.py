"""Ports for the servers soakgate launches: free now, and reserved on this host until the
process that took one lets it go.

The OS picks a free port (bind to port 0), but the socket that learned it closes before the
server binds it moments later; in between, any other process may be handed the same number.
Among soakgate's own launchers (a campaign's Ray actors on one node, two campaigns on one
host) a reservation closes that window: a port is handed out only together with an exclusive
`flock` on `<tmp>/soakgate-ports/<port>.lock`, held by the process that asked for it, and a port
another process holds is skipped. The kernel drops the lock when its holder exits, however it
exits. A process holds at most `HELD` reservations and lets the oldest go first; by then its
server has long bound the port (a guard's restart of that server binds it again at once).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import tempfile
from collections import OrderedDict
from pathlib import Path

from soakgate.errors import ServerError

HELD = 256  # reservations a process keeps (one file descriptor each); the oldest goes first
TRIES = 64
_held: OrderedDict[int, int] = OrderedDict()  # port -> the locked file's descriptor


def folder() -> Path:
    """Where the reservations' lock files live (shared by every process of this host)."""
    return Path(tempfile.gettempdir()) / "soakgate-ports"


def reserve(port: int) -> bool:
    """Take port's reservation for this process; False when another holder has it (this
    process's own earlier reservation included)."""
    place = folder()
    place.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(place / f"{port}.lock", os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(descriptor)
        return False
    _held[port] = descriptor
    while len(_held) > HELD:
        _, oldest = _held.popitem(last=False)
        os.close(oldest)
    return True


def _candidate(host: str) -> int:
    """A port the OS says is free right now."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def free_port(host: str = "127.0.0.1") -> int:
    """A port that is free right now and that no other soakgate process on this host holds;
    reserved for this process (the server binds it moments later)."""
    for _ in range(TRIES):
        port = _candidate(host)
        if port not in _held and reserve(port):
            return port
    raise ServerError(f"no free port on {host} that another soakgate process does not hold")
