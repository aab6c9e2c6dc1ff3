"""Bench: A/B two (or more) soakgate source trees by client CPU per request, side by side.

Each tree's `soakgate run` (every detector on, every generation stored) soaks the same pinned
mock server AT THE SAME TIME, all pinned to the same client core, with a fixed request count;
its CPU is read from the kernel when it exits. Running the variants together exposes them to
the same machine load at every moment, so a few per cent are measurable on a shared machine
where sequential runs swing by 20%. Figures include start-up (the same for every tree).

Run: git worktree add /tmp/soakgate-prev HEAD~1
     python bench/bench_ab.py --tree new=. --tree prev=/tmp/soakgate-prev [--rounds 3] [--stream]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import benchlib

_START = "import sys; from soakgate.cli.main import main; sys.exit(main(sys.argv[1:]))"


def launch(
    tree: Path, url: str, db: Path, concurrency: int, requests: int, core: int, stream: bool
) -> int:
    """Start one tree's soak (its `src/` first on the path); returns the pid."""
    limit = ("--requests", str(requests))
    command = benchlib.soak_command(url, db, concurrency, *limit, stream=stream)
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    proc = subprocess.Popen(
        ["taskset", "-c", str(core), sys.executable, "-c", _START, *command[3:]],
        stdout=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    return proc.pid


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", required=True, metavar="NAME=PATH")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=30000, help="per tree and round")
    parser.add_argument("--concurrency", type=int, default=32, help="per tree")
    parser.add_argument("--stream", action="store_true", help="streamed answers (64 SSE events)")
    args = parser.parse_args()
    trees = {}
    for item in args.tree:
        name, _, path = item.partition("=")
        if not path or not (Path(path) / "src" / "soakgate").is_dir():
            parser.error(f"--tree {item!r}: give NAME=PATH of a soakgate checkout")
        trees[name] = Path(path).resolve()
    server_core, client_core = benchlib.cores()
    mock = benchlib.start_mock(server_core)
    costs: dict[str, list[float]] = {name: [] for name in trees}
    try:
        for index in range(args.rounds):
            workdir = Path(tempfile.mkdtemp(prefix="soakgate-ab-"))
            names = list(trees)[index % len(trees) :] + list(trees)[: index % len(trees)]
            pids = {
                name: launch(trees[name], mock.url, workdir / f"{name}.sqlite",
                             args.concurrency, args.requests, client_core, args.stream)
                for name in names
            }  # fmt: skip
            for name, pid in pids.items():
                _, status, usage = os.wait4(pid, 0)
                if status != 0:
                    print(f"{name} exited with status {status}")
                costs[name].append(1e6 * (usage.ru_utime + usage.ru_stime) / args.requests)
            print(f"round {index + 1}: " + "  ".join(f"{n} {costs[n][-1]:.1f}" for n in trees))
    finally:
        mock.stop()
    first = statistics.median(costs[next(iter(trees))])
    print(f"\nCPU µs per request (median of {args.rounds} rounds; ratio to the first tree)")
    for name, values in costs.items():
        median = statistics.median(values)
        print(f"{name:<12}{median:>9.1f}{median / first:>8.2f}x   rounds: "
              + ", ".join(f"{v:.1f}" for v in values))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
