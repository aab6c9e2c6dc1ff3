"""The mock as a real process: readiness, determinism across instances, dying, CLI flags."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from itertools import groupby
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from scipy.stats import binomtest

from soakgate.errors import ServerError
from soakgate.mockserver import MockProcess
from tests.mockserver.helpers import chat, completion, post


async def _texts(
    url: str, requests: list[tuple[str, dict[str, Any]]], concurrency: int = 8
) -> list[Any]:
    """Send requests with bounded concurrency; return parsed JSON bodies (or exception names)."""
    semaphore = asyncio.Semaphore(concurrency)

    async with aiohttp.ClientSession(url, timeout=aiohttp.ClientTimeout(total=20)) as session:

        async def one(index: int, path: str, body: dict[str, Any]) -> Any:
            async with semaphore:
                try:
                    _, raw = await post(session, path, body, f"req-{index}")
                    return json.loads(raw)
                except aiohttp.ClientError as exc:
                    return type(exc).__name__

        return await asyncio.gather(*(one(i, p, b) for i, (p, b) in enumerate(requests)))


def test_readiness_line_with_port_zero() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "soakgate.mockserver", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        assert line.startswith("soakgate-mock listening on http://127.0.0.1:")
        assert int(line.rsplit(":", 1)[1]) > 0
    finally:
        proc.terminate()
        assert proc.wait(10) == 0
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]


def test_greedy_output_agrees_token_for_token_across_two_processes() -> None:
    requests = [
        ("/v1/completions", completion(f"prompt {i}", temperature=0, return_token_ids=True))
        for i in range(10)
    ] + [("/v1/chat/completions", chat(f"prompt {i}", temperature=0)) for i in range(5)]
    with MockProcess(["--seed", "1"]) as first, MockProcess(["--seed", "2"]) as second:
        a = asyncio.run(_texts(first.url, requests))
        b = asyncio.run(_texts(second.url, requests))
    strip = [{k: v for k, v in r["choices"][0].items()} for r in a]
    assert strip == [{k: v for k, v in r["choices"][0].items()} for r in b]
    assert len({r["choices"][0]["text"] for r in a[:10]}) == 10


def test_collapse_rate_and_bursts_in_ground_truth_of_a_process() -> None:
    args = ["--seed", "9", "--collapse-rate", "0.05", "--burst-enter", "0.02"]
    args += ["--burst-exit", "0.2", "--burst-collapse-rate", "0.9"]
    requests = [("/v1/completions", completion(max_tokens=4)) for _ in range(600)]
    with MockProcess(args) as mock:
        bodies = asyncio.run(_texts(mock.url, requests, concurrency=16))
        truth = mock.ground_truth()
    assert len(truth) == 600 and {r["pid"] for r in truth} == {mock.pid}
    truth.sort(key=lambda r: r["seq"])
    clean = [r for r in truth if not r["burst"]]
    assert binomtest(sum(bool(r["injected"]) for r in clean), len(clean), 0.05).pvalue > 0.001
    runs = [len(list(g)) for flag, g in groupby(r["burst"] for r in truth) if flag]
    assert runs and max(runs) >= 3  # mean run length 1 / 0.2 = 5
    in_burst = [r for r in truth if r["burst"]]
    assert sum(bool(r["injected"]) for r in in_burst) / len(in_burst) > 0.6
    by_id = {r["request_id"]: r for r in truth}
    for index, body in enumerate(bodies):
        if by_id[f"req-{index}"]["injected"] == "empty":
            assert body["choices"][0]["text"] == ""


def test_perturbed_requests_differ_from_a_clean_twin() -> None:
    requests = [
        ("/v1/completions", completion(f"p{i}", temperature=0, max_tokens=64)) for i in range(80)
    ]
    with MockProcess(["--perturb-rate", "0.25"]) as target, MockProcess([]) as reference:
        a = asyncio.run(_texts(target.url, requests))
        b = asyncio.run(_texts(reference.url, requests))
        truth = {r["request_id"]: r["perturbed"] for r in target.ground_truth()}
    for index, (x, y) in enumerate(zip(a, b, strict=True)):
        differs = x["choices"][0]["text"] != y["choices"][0]["text"]
        assert differs == (truth[f"req-{index}"] > 0)
    assert 5 < sum(v > 0 for v in truth.values()) < 40


def test_die_after_and_die_once(tmp_path: Path) -> None:
    marker = tmp_path / "died"
    args = ["--die-after", "3", "--die-once-file", str(marker)]
    requests = [("/v1/completions", completion()) for _ in range(4)]
    with MockProcess(args) as mock:
        results = asyncio.run(_texts(mock.url, requests, concurrency=1))
        assert mock.wait(10) == 1
        assert "UR_RESULT_ERROR_DEVICE_LOST" in mock.stderr_tail()
    assert all(isinstance(r, dict) for r in results[:3]) and isinstance(results[3], str)
    assert marker.exists()
    with MockProcess(args) as restarted:
        results = asyncio.run(_texts(restarted.url, requests * 2, concurrency=1))
        assert restarted.poll() is None and all(isinstance(r, dict) for r in results)


def test_bad_flags_exit_2_with_one_line() -> None:
    for args in (["--collapse-rate", "2"], ["--fault-rate", "bogus=0.1"], ["--quirk", "nope"]):
        done = subprocess.run(
            [sys.executable, "-m", "soakgate.mockserver", *args], capture_output=True, timeout=30
        )
        assert done.returncode == 2, args
        assert b"Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) <= 2


def test_mock_process_raises_server_error_when_it_cannot_start() -> None:
    with pytest.raises(ServerError, match="collapse-rate"):
        MockProcess(["--collapse-rate", "2"]).start()


def test_soakgate_mock_server_command_serves() -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "soakgate",
            "mock-server",
            "--port",
            "0",
            "--model-name",
            "cli-model",
        ],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().decode().rsplit(" ", 1)[1].strip()

        async def models() -> Any:
            async with aiohttp.ClientSession() as session, session.get(url + "/v1/models") as r:
                return await r.json()

        assert asyncio.run(models())["data"][0]["id"] == "cli-model"
    finally:
        proc.terminate()
        assert proc.wait(10) == 0
        proc.stdout.close()  # type: ignore[union-attr]


def test_port_in_use_is_a_one_line_usage_error() -> None:
    with MockProcess() as mock:
        done = subprocess.run(
            [sys.executable, "-m", "soakgate", "mock-server", "--port", str(mock.port)],
            capture_output=True,
            timeout=30,
        )
    assert (
        done.returncode == 2 and b"cannot listen" in done.stderr and b"Traceback" not in done.stderr
    )
