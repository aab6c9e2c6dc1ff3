"""Bench (issue 27): the soak's throughput while 200 clients scrape `--metrics-port` at once.

For each round and each checkout (`--src DIR`, e.g. the code before issue 27, beside this one),
`soakgate run` soaks a mock for `--seconds` at concurrency 32 with `--metrics-port 0`, once
alone and once while a separate process keeps 200 scrapes of its metrics in flight; prints
the generations stored per second in each, their ratio, and the scrapes answered (200 and 503).
Rounds interleave the conditions. The scrapers and the mock share the machine's cores with the
soak, so the ratio includes that CPU contention, the same for every checkout.
Run: `python bench/bench_metrics_scrapes.py [--rounds 3] [--seconds 20] [--src /work/main/src]`.
"""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from soakgate.mockserver.process import MockProcess

SCRAPER = r"""
import asyncio, sys, aiohttp
async def main(url, clients, seconds):
    counts = {}
    end = asyncio.get_running_loop().time() + seconds
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients)) as s:
        async def one():
            while asyncio.get_running_loop().time() < end:
                try:
                    async with s.get(url) as r:
                        await r.read()
                        counts[r.status] = counts.get(r.status, 0) + 1
                except aiohttp.ClientError:
                    counts["error"] = counts.get("error", 0) + 1
                    await asyncio.sleep(0.01)
        await asyncio.gather(*(one() for _ in range(clients)))
    print(counts, flush=True)
asyncio.run(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3])))
"""


def soak(
    url: str, seconds: float, src: str | None, scrapers: int, folder: Path
) -> tuple[float, str]:
    """(generations stored per second, what the scrapers got) of one soak."""
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src
    db = Path(tempfile.mkstemp(suffix=".sqlite", dir=folder)[1])
    db.unlink()
    proc = subprocess.Popen(
        [sys.executable, "-m", "soakgate", "run", "--target", url, "--duration", f"{seconds}s",
         "--concurrency", "32", "--max-tokens", "16", "--db", str(db), "--quiet",
         "--no-watch-metrics", "--metrics-port", "0"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    line = proc.stderr.readline()
    metrics = re.search(r"serving metrics at (\S+)", line)
    assert metrics, line
    scraper = None
    if scrapers:
        scraper = subprocess.Popen(
            [sys.executable, "-c", SCRAPER, metrics.group(1), str(scrapers), str(seconds)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
    proc.communicate()
    got = "-"
    if scraper is not None:
        try:
            got = scraper.communicate(timeout=seconds + 60)[0].strip()
        finally:
            if scraper.poll() is None:
                scraper.kill()
                scraper.communicate()
    with sqlite3.connect(db) as check:
        rows, first, last = check.execute(
            "SELECT COUNT(*), MIN(started_at), MAX(ended_at) FROM generations"
        ).fetchone()
    return rows / (last - first), got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--scrapers", type=int, default=200)
    parser.add_argument("--src", action="append", default=[], help="another checkout's src")
    args = parser.parse_args()
    checkouts = [None, *args.src]
    rates: dict[tuple[str | None, int], list[float]] = {}
    with tempfile.TemporaryDirectory() as folder, MockProcess(["--seed", "1"]) as mock:
        for round_ in range(args.rounds):
            for src in checkouts:
                for scrapers in (0, args.scrapers):
                    rate, got = soak(mock.url, args.seconds, src, scrapers, Path(folder))
                    rates.setdefault((src, scrapers), []).append(rate)
                    print(f"round {round_ + 1} {src or 'this checkout'}: {scrapers} scrapers: "
                          f"{rate:,.0f} generations/s; scrapes {got}", flush=True)  # fmt: skip
    for src in checkouts:
        alone = statistics.median(rates[src, 0])
        scraped = statistics.median(rates[src, args.scrapers])
        print(f"{src or 'this checkout'}: median {alone:,.0f} generations/s alone, "
              f"{scraped:,.0f} with {args.scrapers} scrapers: "
              f"{scraped / alone:.0%} of alone")  # fmt: skip


if __name__ == "__main__":
    main()
