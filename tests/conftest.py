"""Shared fixtures: the mock server as a real process on loopback."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from soakgate.mockserver.process import MockProcess


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
