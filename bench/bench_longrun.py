"""Bench (issue 7 item 2): RSS of a long `soakgate run` and database bytes per generation.

Soaks the unpaced mock (64-token answers, not streamed, concurrency 64; server and client on
separate cores) for `--generations` requests, every generation scored and stored with its text,
and prints the client's RSS when 1%, 10% and 100% of them have completed (10k, 100k and 1M for
the default 1,000,000), then the database size per generation.

Run: python bench/bench_longrun.py [--generations 1000000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import benchlib


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=1_000_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--stream", action="store_true", help="stream (64 SSE events each)")
    args = parser.parse_args(argv)
    server_core, client_core = benchlib.cores()
    print(
        f"date {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; {args.generations:,} generations; "
        f"load avg {os.getloadavg()}"
    )
    checkpoints = sorted({max(1, args.generations // 100), max(1, args.generations // 10)})
    mock = benchlib.start_mock(server_core)
    folder = Path(tempfile.mkdtemp(prefix="soakgate-longrun-"))
    db = folder / "long.sqlite"
    limit = ("--requests", str(args.generations))
    command = [
        "taskset", "-c", str(client_core),
        *benchlib.soak_command(mock.url, db, args.concurrency, *limit, stream=args.stream),
    ]  # fmt: skip
    started = time.monotonic()
    soak = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = last = 0
    try:
        while soak.poll() is None:
            time.sleep(0.2)
            try:
                done = benchlib.scrape(mock.url)[0]
            except OSError:  # a busy shared core can delay /metrics; the next sample will do
                continue
            rss = benchlib.rss_bytes(soak.pid)
            peak, last = max(peak, rss), rss or last
            while checkpoints and done >= checkpoints[0] and rss:
                print(
                    f"RSS at {checkpoints.pop(0):>10,} generations: {rss / 2**20:7.1f} MB "
                    f"(after {time.monotonic() - started:6.0f} s)",
                    flush=True,
                )
        elapsed = time.monotonic() - started
        if soak.returncode != 0:
            print(f"soak failed ({soak.returncode}): {soak.communicate()[1].decode()[-500:]}")
            return 1
    finally:
        if soak.poll() is None:
            soak.kill()
        mock.stop()
    size = db.stat().st_size
    print(
        f"RSS at {args.generations:>10,} generations: {last / 2**20:7.1f} MB "
        f"(last sample; peak {peak / 2**20:.1f} MB; {elapsed:.0f} s, "
        f"{args.generations / elapsed:,.0f} req/s)"
    )
    print(f"database: {size / 2**20:,.1f} MB, {size / args.generations:,.0f} bytes per generation")
    db.unlink()
    folder.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
