"""Bench: the client cost of reference scoring every generation, and the reference's load.

Four `soakgate run`s soak the same pinned mock at the same time, all pinned to one client core
(so they share the machine's load at every moment, as in bench_ab.py): `plain` and `scored`
send N requests, `plain-0` and `scored-0` only `--concurrency` of them (start-up, and for
`scored-0` the calibration). The scoring's client CPU per generation is
((scored - scored-0) - (plain - plain-0)) / (N - concurrency); the calibration's is
(scored-0 - plain-0) / its samples. The reference (a second pinned mock) is read from the scored
run's database: tokens sent per scored generation (its prefill load) and the scoring latency.

With `--alternatives 0 20` the scored pair runs once per value of `--reference-alternatives`
(the top alternatives asked per position for the typicality's entropy; 0: the worst token
alone), all soaks of a round side by side on the one core, so the values compare within a round.

Run: python bench/bench_reference.py [--requests 20000] [--rounds 3] [--stream]
     [--alternatives 0 20]
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
           reference: str | None, alternatives: int | None = None) -> int:  # fmt: skip
    """Start one soak pinned to `core`; returns the pid."""
    command = benchlib.soak_command(url, db, args.concurrency, "--requests", str(requests),
                                    stream=args.stream)  # fmt: skip
    command += ["--no-watch-metrics"]
    if reference is not None:
        command += ["--score-reference", reference, "--calibration", str(CALIBRATION)]
    if alternatives is not None:
        command += ["--reference-alternatives", str(alternatives)]
    proc = subprocess.Popen(["taskset", "-c", str(core), sys.executable, "-c", _START,
                             *command[3:]], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    return proc.pid


def _name(alternatives: int | None) -> str:
    """A scored soak's name: `scored`, or `scored-a20` for --reference-alternatives 20."""
    return "scored" if alternatives is None else f"scored-a{alternatives}"


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
    parser.add_argument(
        "--alternatives",
        type=int,
        nargs="+",
        default=[None],
        help="--reference-alternatives values, each its own scored pair",
    )
    args = parser.parse_args()
    server_core, client_core = benchlib.cores()
    mock = benchlib.start_mock(server_core)
    reference = benchlib.start_mock(server_core)
    per_generation: dict[int | None, list[float]] = {a: [] for a in args.alternatives}
    calibration: dict[int | None, list[float]] = {a: [] for a in args.alternatives}
    try:
        for index in range(args.rounds):
            workdir = Path(tempfile.mkdtemp(prefix="soakgate-ref-"))
            plan: dict[str, tuple[int, str | None, int | None]] = {
                "plain": (args.requests, None, None),
                "plain-0": (args.concurrency, None, None),
            }
            for a in args.alternatives:
                plan[_name(a)] = (args.requests, reference.url, a)
                plan[_name(a) + "-0"] = (args.concurrency, reference.url, a)
            pids = {name: launch(mock.url, workdir / f"{name}.sqlite", args, n, client_core, ref,
                                 alts) for name, (n, ref, alts) in plan.items()}  # fmt: skip
            cpu = {}
            for name, pid in pids.items():
                _, status, usage = os.wait4(pid, 0)
                if status != 0:
                    print(f"{name} exited with status {status}")
                cpu[name] = usage.ru_utime + usage.ru_stime
            for a in args.alternatives:
                scored, alone = cpu[_name(a)], cpu[_name(a) + "-0"]
                scoring = (scored - alone) - (cpu["plain"] - cpu["plain-0"])
                per_generation[a].append(1e6 * scoring / (args.requests - args.concurrency))
                calibration[a].append(1e6 * (alone - cpu["plain-0"]) / CALIBRATION)
                tokens, p50, p99, rows = reference_load(workdir / f"{_name(a)}.sqlite")
                print(f"round {index + 1}, {_name(a)}: plain "
                      f"{1e6 * cpu['plain'] / args.requests:.0f} µs/req, scored "
                      f"{1e6 * scored / args.requests:.0f} µs/req; scoring "
                      f"{per_generation[a][-1]:.0f} µs per generation, calibration "
                      f"{calibration[a][-1]:.0f} µs per sample; reference: {tokens:.1f} tokens "
                      f"sent per scored generation, latency p50 {1e3 * p50:.2f} ms, p99 "
                      f"{1e3 * p99:.2f} ms, {rows} rows scored")  # fmt: skip
    finally:
        mock.stop()
        reference.stop()
    print()
    for a in args.alternatives:
        values = per_generation[a]
        print(f"client CPU of scoring, {_name(a)}: {statistics.median(values):.0f} µs per "
              f"generation (median of {args.rounds} rounds: "
              f"{', '.join(f'{v:.0f}' for v in values)}); calibration "
              f"{statistics.median(calibration[a]):.0f} µs per sample")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
