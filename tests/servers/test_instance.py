"""ServerInstance against real processes: health, start failures, stop by process group."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from soakgate.errors import ServerError
from soakgate.mockserver import MockProcess
from soakgate.servers import LaunchSpec, ServerInstance, free_port, probe_health


def _spec(tmp_path: Path, argv: list[str], port: int = 0, grace: float = 5.0) -> LaunchSpec:
    return LaunchSpec(
        name="cpu:0", argv=argv, env={"SOAKGATE_TEST_PIN": "1"},
        url=f"http://127.0.0.1:{port}", log_dir=tmp_path / "logs", stop_grace_s=grace,
    )  # fmt: skip


def test_mock_instance_becomes_healthy_logs_and_stops(tmp_path: Path) -> None:
    port = free_port()
    argv = [sys.executable, "-m", "soakgate.mockserver", "--port", str(port)]
    instance = ServerInstance(_spec(tmp_path, argv, port), incarnation=2)

    async def scenario() -> int | None:
        instance.launch()
        await instance.wait_healthy(30)
        assert instance.health_path == "/health"
        return await instance.stop()

    assert asyncio.run(scenario()) == 0  # SIGTERM: the mock exits cleanly
    assert instance.log_path.name == "cpu_0.inc2.log"
    assert "soakgate-mock listening on" in instance.log_tail()


def test_exit_during_start_is_a_server_error_and_the_log_keeps_the_reason(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "soakgate.mockserver", "--no-such-flag"]
    instance = ServerInstance(_spec(tmp_path, argv, free_port()))

    async def scenario() -> None:
        instance.launch()
        await instance.wait_healthy(30)

    with pytest.raises(ServerError, match="exited with code 2"):
        asyncio.run(scenario())
    assert "unrecognized arguments: --no-such-flag" in instance.log_tail()


def test_startup_timeout_is_bounded(tmp_path: Path) -> None:
    instance = ServerInstance(_spec(tmp_path, ["sleep", "3600"], free_port(), grace=1))

    async def scenario() -> None:
        instance.launch()
        try:
            await instance.wait_healthy(0.5)
        finally:
            await instance.stop()

    began = time.monotonic()
    with pytest.raises(ServerError, match=r"not healthy after 0\.5 s"):
        asyncio.run(scenario())
    assert time.monotonic() - began < 600  # bounded by the 0.5 s, not by the server's hour


def test_stop_escalates_to_sigkill_and_takes_the_whole_group(tmp_path: Path) -> None:
    child_pid_file = tmp_path / "child.pid"
    script = (
        "import signal, subprocess, time, pathlib\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = subprocess.Popen(['sleep', '300'])\n"
        f"pathlib.Path({str(child_pid_file)!r}).write_text(str(child.pid))\n"
        "time.sleep(300)\n"
    )
    instance = ServerInstance(_spec(tmp_path, [sys.executable, "-c", script], grace=0.5))

    async def scenario() -> int | None:
        instance.launch()
        for _ in range(200):
            if child_pid_file.exists() and child_pid_file.read_text():
                break
            await asyncio.sleep(0.05)
        return await instance.stop()

    assert asyncio.run(scenario()) == -9
    child = int(child_pid_file.read_text())
    time.sleep(0.2)
    assert not _alive(child)


def test_probe_falls_back_to_models_when_health_is_absent(
    start_mock: Callable[..., MockProcess],
) -> None:
    mock = start_mock()

    async def probe() -> str | None:
        async with aiohttp.ClientSession() as session:
            return await probe_health(session, mock.url, ("/no-health-here", "/v1/models"), 5)

    assert asyncio.run(probe()) == "/v1/models"


def _alive(pid: int) -> bool:
    """True while the pid exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"
