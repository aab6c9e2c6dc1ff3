"""Shared fixtures: the mock server as a real process on loopback."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from soakgate.mockserver.process import MockProcess
from tests.hostile import HostileProcess


def pytest_configure(config: pytest.Config) -> None:
    """The suite runs on two pytest-xdist workers (pyproject's addopts), whose environment holds
    COLUMNS=80 from the controller; soakgate sizes its terminal report from $COLUMNS, so every
    `soakgate report` a test starts would print the narrow layout that a serial run does not."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ.pop("COLUMNS", None)
        os.environ.pop("LINES", None)
    # The suite shares 2 cores between its workers, their servers and whatever else the machine
    # runs: torch's OpenMP threads that spin at barriers (the default) lose the slices the thread
    # they wait for needs. Beside busy processes they ran a calibration 2.2-2.6x slower than
    # sleeping ones, and a reference benchmark past its 300 s timeout in a loaded CI (201 s
    # spinning, 62 s sleeping); idle, sleeping costs ~30% (BENCHMARKS.md section 17).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


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
