"""Shared fixtures: the mock server as a real process on loopback."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from soakgate.mockserver.process import MockProcess
from tests.hostile import HostileProcess


@pytest.fixture
def start_mock() -> Iterator[Callable[..., MockProcess]]:
    """Start mock servers (real processes on 127.0.0.1) that are stopped after the test."""
    started: list[MockProcess] = []

    def start(*args: str) -> MockProcess:
        mock = MockProcess(list(args)).start()
        started.append(mock)
        return mock

    yield start
    for mock in started:
        mock.stop()


@pytest.fixture
def hostile(tmp_path: Path) -> Iterator[Callable[[str], HostileProcess]]:
    """`hostile(behaviour)` starts a hostile server process (tests/hostile.py) on 127.0.0.1
    that is stopped after the test."""
    started: list[HostileProcess] = []

    def start(behaviour: str) -> HostileProcess:
        server = HostileProcess(behaviour, tmp_path / f"{behaviour}-{len(started)}.jsonl")
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
