"""Bench: the client cost of reference scoring every generation, and the reference's load.

Four `soakgate run`s soak the same pinned mock at the same time, all pinned to one client core
(so they share the machine's load at every moment, as in bench_ab.py): `plain` and `scored`
send N requests, `plain-0` and `scored-0` only `--concurrency` of them (start-up, and for
`scored-0` the calibration). The scoring's client CPU per generation is
((scored - scored-0) - (plain - plain-0)) / (N - concurrency); the calibration's is
(scored-0 - plain-0) / its samples. The reference (a second pinned mock) is read from the scored
run's database: tokens sent per scored generation (its prefill load) and the scoring latency.

Run: python bench/bench_reference.py [--requests 20000] [--rounds 3] [--stream]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import benchlib

_START = "import sys; from soakgate.cli.main import main; sys.exit(main(sys.argv[1:]))"
CALIBRATION = 1000


def launch(url: str, db: Path, args: argparse.Namespace, requests: int, core: int,
           reference: str | None) -> int:  # fmt: skip
    """Start one soak pinned to `core`; returns the pid."""
    command = benchlib.soak_command(url, db, args.concurrency, "--requests", str(requests),
                                    stream=args.stream)  # fmt: skip
    command += ["--no-watch-metrics"]
    if reference is not None:
        command += ["--score-reference", reference, "--calibration", str(CALIBRATION)]
    proc = subprocess.Popen(["taskset", "-c", str(core), sys.executable, "-c", _START,
                             *command[3:]], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    return proc.pid


def reference_load(db: Path) -> tuple[float, float, float, int]:
    """Tokens sent per scored generation, median and p99 scoring latency (s), rows scored."""
    with sqlite3.connect(db) as connection:
        rows = connection.execute(
            "SELECT prompt_tokens + completion_tokens, details FROM generations "
            "WHERE suspect IS NOT NULL"
        ).fetchall()
    tokens = [t for t, _ in rows]
    seconds = sorted(json.loads(d)["reference"]["seconds"] for _, d in rows)
    p99 = seconds[min(int(0.99 * len(seconds)), len(seconds) - 1)]
    return statistics.mean(tokens), statistics.median(seconds), p99, len(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=20000, help="N per soak and round")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--stream", action="store_true", help="streamed answers (64 SSE events)")
    args = parser.parse_args()
    server_core, client_core = benchlib.cores()
    mock = benchlib.start_mock(server_core)
    reference = benchlib.start_mock(server_core)
    per_generation: list[float] = []
    calibration: list[float] = []
    try:
        for index in range(args.rounds):
            workdir = Path(tempfile.mkdtemp(prefix="soakgate-ref-"))
            plan = {"plain": (args.requests, None), "scored": (args.requests, reference.url),
                    "plain-0": (args.concurrency, None),
                    "scored-0": (args.concurrency, reference.url)}  # fmt: skip
            pids = {name: launch(mock.url, workdir / f"{name}.sqlite", args, n, client_core, ref)
                    for name, (n, ref) in plan.items()}  # fmt: skip
            cpu = {}
            for name, pid in pids.items():
                _, status, usage = os.wait4(pid, 0)
                if status != 0:
                    print(f"{name} exited with status {status}")
                cpu[name] = usage.ru_utime + usage.ru_stime
            scoring = (cpu["scored"] - cpu["scored-0"]) - (cpu["plain"] - cpu["plain-0"])
            per_generation.append(1e6 * scoring / (args.requests - args.concurrency))
            calibration.append(1e6 * (cpu["scored-0"] - cpu["plain-0"]) / CALIBRATION)
            tokens, p50, p99, scored = reference_load(workdir / "scored.sqlite")
            print(f"round {index + 1}: plain {1e6 * cpu['plain'] / args.requests:.0f} µs/req, "
                  f"scored {1e6 * cpu['scored'] / args.requests:.0f} µs/req; scoring "
                  f"{per_generation[-1]:.0f} µs per generation, calibration "
                  f"{calibration[-1]:.0f} µs per sample; reference: {tokens:.1f} tokens sent per "
                  f"scored generation, latency p50 {1e3 * p50:.2f} ms, p99 {1e3 * p99:.2f} ms, "
                  f"{scored} rows scored")  # fmt: skip
    finally:
        mock.stop()
        reference.stop()
    print(f"\nclient CPU of scoring: {statistics.median(per_generation):.0f} µs per generation "
          f"(median of {args.rounds} rounds: {', '.join(f'{v:.0f}' for v in per_generation)}); "
          f"calibration {statistics.median(calibration):.0f} µs per sample")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
