"""How fast the mock serves on one core (printed, not asserted: the machine is shared)."""

from __future__ import annotations

import asyncio
import os
import time

import aiohttp
import pytest

from soakgate.mockserver import MockProcess
from tests.mockserver.helpers import completion

pytestmark = pytest.mark.slow


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def drive(url: str, requests: int, stream: bool, concurrency: int = 64) -> float:
    """Send `requests` requests, `concurrency` in flight; returns wall seconds."""
    body = completion(max_tokens=64, stream=stream)
    remaining = requests
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(url, connector=connector) as session:

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                async with session.post("/v1/completions", json=body) as response:
                    await response.read()

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - start


@pytest.mark.parametrize(("stream", "requests"), [(False, 3000), (True, 1500)])
def test_print_throughput(stream: bool, requests: int) -> None:
    with MockProcess() as mock:
        asyncio.run(drive(mock.url, 200, stream))
        cpu_before = cpu_seconds(mock.pid)
        wall = asyncio.run(drive(mock.url, requests, stream))
        cpu = cpu_seconds(mock.pid) - cpu_before
    kind = "stream" if stream else "non-stream"
    print(
        f"\nmock {kind} 64 tokens, c=64: {requests / wall:.0f} req/s "
        f"wall (client on the other core), {requests / cpu:.0f} req/s per server CPU-second "
        f"({1000 * cpu / requests:.2f} CPU-ms/request)"
    )
