"""Bench (issue 31 item 2): the CPU `soakgate run` spends before its first request, and in all.

A small OpenAI-compatible server in this process (aiohttp, on loopback) answers every request
with a fixed 16-token completion, `/v1/models` with one model and `/metrics` with one gauge. It
launches `python -m soakgate run` against itself; when the first completion request arrives it
reads the client's CPU time so far from `/proc/PID/stat` (user + system), and after the client
exits its whole CPU time from the children's rusage. CPU time, not wall time: the figures hold
on a busy machine (the import work does not change with load, though caches do a little).

Python's compiled bytecode is used as an installed package has it: the child runs with
`PYTHONDONTWRITEBYTECODE` cleared (this machine sets it, and without the caches every run compiles
soakgate's sources anew, ~0.1 s) and an unmeasured first run of each configuration writes them.
`--no-bytecode` measures without the caches instead.

Run: python bench/bench_startup.py [--rounds 5] [--requests 16] [--src DIR] [--no-bytecode]
(`--src DIR` also runs every configuration with another checkout's `src` first on PYTHONPATH, e.g.
a `git worktree` of the commit before a change, interleaved with this one's: a before/after in
one run.)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import sys
import tempfile
from pathlib import Path

from aiohttp import web

TICK_S = 1 / os.sysconf("SC_CLK_TCK")
ANSWER = {
    "id": "cmpl-1", "object": "text_completion", "model": "m",
    "choices": [{"index": 0, "text": " the" * 16, "finish_reason": "length", "logprobs": None}],
    "usage": {"prompt_tokens": 8, "completion_tokens": 16, "total_tokens": 24},
}  # fmt: skip
CONFIGURATIONS = {
    "run --model m --no-watch-metrics": ["--model", "m", "--no-watch-metrics"],
    "run --model m (watches /metrics)": ["--model", "m"],
    "run (discovers the model)": [],
}


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process (`/proc/PID/stat` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S


class Server:
    def __init__(self) -> None:
        self.pid = 0
        self.first: float | None = None

    async def completions(self, request: web.Request) -> web.Response:
        if self.first is None and self.pid:
            self.first = cpu_s(self.pid)
        await request.read()
        return web.json_response(ANSWER)

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(text="# TYPE up gauge\nup 1\n", content_type="text/plain")


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def one(
    server: Server,
    url: str,
    extra: list[str],
    requests: int,
    src: str | None = None,
    bytecode: bool = True,
) -> tuple[float, float]:
    """(CPU seconds to the first request, CPU seconds in all) of one `soakgate run` (with
    `src` first on its PYTHONPATH when given; with bytecode caches read and written, or not)."""
    env = {**os.environ, **({"PYTHONPATH": src} if src else {})}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if not bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    with tempfile.TemporaryDirectory() as folder:
        server.pid, server.first = 0, None
        before = children_cpu_s()
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "soakgate", "run", "--target", url, "--requests",
            str(requests), "--concurrency", "1", "--db", str(Path(folder) / "s.sqlite"),
            "--quiet", *extra, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        server.pid = process.pid
        _, err = await process.communicate()
        if process.returncode != 0 or server.first is None:
            raise SystemExit(f"soakgate run failed ({process.returncode}): {err.decode()[-500:]}")
        return server.first, children_cpu_s() - before


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--src", help="another checkout's src, run beside this one")
    parser.add_argument("--no-bytecode", action="store_true", help="no .pyc caches (as CI runs)")
    args = parser.parse_args()
    server = Server()
    app = web.Application()
    app.router.add_post("/v1/completions", server.completions)
    app.router.add_get("/v1/models", server.models)
    app.router.add_get("/metrics", server.metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    url = f"http://127.0.0.1:{port}"
    bytecode = not args.no_bytecode
    print(f"{args.rounds} rounds of each, {args.requests} requests per run; CPU seconds "
          f"(user + system) of the client process; python {sys.version.split()[0]}; "
          f"{'with' if bytecode else 'without'} bytecode caches; load average "
          f"{os.getloadavg()[0]:.1f}")  # fmt: skip
    sources = {"": None, **({f" [{args.src}]": args.src} if args.src else {})}
    results: dict[str, list[tuple[float, float]]] = {
        name + tag: [] for name in CONFIGURATIONS for tag in sources
    }
    if bytecode:  # an unmeasured run of each writes the bytecode caches
        for extra in CONFIGURATIONS.values():
            for src in sources.values():
                await one(server, url, extra, args.requests, src)
    for _ in range(args.rounds):  # interleaved: a slow moment hits every configuration alike
        for name, extra in CONFIGURATIONS.items():
            for tag, src in sources.items():
                results[name + tag].append(
                    await one(server, url, extra, args.requests, src, bytecode)
                )
    for name, rows in results.items():
        first = [r[0] for r in rows]
        total = [r[1] for r in rows]
        print(f"{name:36}: to the first request {statistics.median(first):.2f} s "
              f"(range {min(first):.2f}-{max(first):.2f}), in all {statistics.median(total):.2f} s "
              f"(range {min(total):.2f}-{max(total):.2f})")  # fmt: skip
    await runner.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
