"""Shared by the bench scripts: the pinned mock server, /proc sampling, server scraping, and a
share printed with its Clopper-Pearson interval.

CPU is read from /proc/<pid>/stat (utime+stime+cutime+cstime) summed over the client's whole
process tree, so tools that fork workers (guidellm, aiperf, locust) are charged for them too.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soakgate.mockserver.process import MockProcess

TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
_SUCCESS = re.compile(r'^vllm:request_success_total\{[^}]*finished_reason="(\w+)"\} (\S+)$', re.M)
_RUNNING = re.compile(r"^vllm:num_requests_running\{[^}]*\} (\S+)$", re.M)


def children_map() -> dict[int, list[int]]:
    """Parent pid -> child pids, from one pass over /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat_fields(int(entry))
            if stat:
                children.setdefault(int(stat[1]), []).append(int(entry))
    return children


def process_tree(root: int) -> list[int]:
    """The root pid and every live descendant."""
    children, tree, todo = children_map(), [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, ()))
    return tree


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (index 0 is the state)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read().decode()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()


def cpu_seconds(pid: int) -> float:
    """User+system CPU of a process and its reaped children, in seconds (0 if gone)."""
    fields = _stat_fields(pid)
    if not fields:
        return 0.0
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / TICKS


def rss_bytes(pid: int) -> int:
    """Resident set size of one process (0 if gone)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as handle:
            return int(handle.read().split()[1]) * PAGE
    except OSError:
        return 0


@dataclass(slots=True)
class TreeSample:
    """CPU seconds and RSS bytes of a process tree at one moment."""

    at: float
    cpu_s: float
    rss: int


def sample_tree(root: int) -> TreeSample:
    """CPU and RSS summed over the process tree of `root`."""
    pids = process_tree(root)
    return TreeSample(time.monotonic(), sum(map(cpu_seconds, pids)), sum(map(rss_bytes, pids)))


def scrape(url: str) -> tuple[int, int]:
    """(completed requests, requests in flight) from the mock server's /metrics."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
        text = response.read().decode()
    done = sum(float(v) for reason, v in _SUCCESS.findall(text) if reason != "abort")
    running = _RUNNING.search(text)
    return int(done), int(float(running.group(1))) if running else 0


def pin(pid: int, core: int) -> None:
    """Pin every thread of a running process to one core (taskset -a -p)."""
    subprocess.run(
        ["taskset", "-a", "-p", "-c", str(core), str(pid)], check=True, stdout=subprocess.DEVNULL
    )


def start_mock(core: int, extra: Sequence[str] = ()) -> MockProcess:
    """The mock server at full speed (no pacing, 64-token answers), pinned to `core`."""
    args = ["--tokens-per-s", "0", "--output-tokens", "64", "--seed", "7", *extra]
    mock = MockProcess(args).start()
    pin(mock.pid, core)
    return mock


def cores() -> tuple[int, int]:
    """(server core, client core): the first two CPUs this process may use."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        return allowed[0], allowed[0]
    return allowed[0], allowed[1]


def soak_command(
    url: str, db: Path, concurrency: int, *limit: str, max_tokens: int = 64, stream: bool = False
) -> list[str]:
    """`soakgate run` against `url` with every default detector on and every generation stored;
    `limit` is `--requests N` or `--duration Ts`."""
    return [
        sys.executable, "-m", "soakgate", "run", "--target", url, "--quiet",
        "--concurrency", str(concurrency), "--max-tokens", str(max_tokens), *limit,
        "--db", str(db), *([] if stream else ["--no-stream"]),
    ]  # fmt: skip


def soak_run(url: str, db: Path, requests: int, *args: str) -> float:
    """`soakgate run --target url --requests N --concurrency 8 --db db --quiet
    --no-watch-metrics *args`, as the check benches soak; exits the bench with the soak's
    stderr when it fails. Seconds it took."""
    command = [sys.executable, "-m", "soakgate", "run", "--target", url, "--requests",
               str(requests), "--concurrency", "8", "--db", str(db), "--quiet",
               "--no-watch-metrics", *args]  # fmt: skip
    began = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"soak failed ({done.returncode}): {done.stderr[-2000:]}")
    return time.monotonic() - began


def stop_group(
    proc: subprocess.Popen[bytes], waits: tuple[float, float, float] = (10, 5, 5)
) -> None:
    """SIGINT (the client stores what is in flight and exits), then SIGTERM, then SIGKILL to the
    process group of `proc`, each followed by a bounded wait (`waits`, seconds)."""
    for sig, wait in zip((signal.SIGINT, signal.SIGTERM, signal.SIGKILL), waits, strict=True):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue


def nucleus(torch: Any, logits: Any, top_p: float, temperature: float) -> Any:
    """The sampling distribution at `temperature` and `top_p` (vLLM's rule: keep the smallest
    set of most likely tokens whose mass reaches top_p), for the benches that sample a model
    themselves."""
    probs = torch.softmax(logits / temperature, -1)
    if top_p >= 1.0:
        return probs
    ordered, index = probs.sort(-1, descending=True)
    ordered = ordered.masked_fill(ordered.cumsum(-1) - ordered >= top_p, 0.0)
    kept = torch.zeros_like(probs).scatter(-1, index, ordered)
    return kept / kept.sum(-1, keepdim=True)


def share(events: int, n: int) -> str:
    """`events/n = p% [low, high]`, the Clopper-Pearson 95% interval in percent ("0/0" for none)."""
    from soakgate.stats.rates import clopper_pearson

    if not n:
        return "0/0"
    low, high = clopper_pearson(events, n)
    return f"{events}/{n} = {100 * events / n:.2f}% [{100 * low:.2f}, {100 * high:.2f}]"
