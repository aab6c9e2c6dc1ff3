"""Bench (issue 7 item 4): generations/s written durably with the batching policy, and the loss
window after `kill -9` of a soaking process.

Part 1 feeds scored, realistic generations (64-token texts) through BatchWriter into a SqliteStore
(WAL, synchronous=NORMAL: a commit survives a killed process) and reports generations/s (wall
and CPU), CPU per generation and bytes per generation; for contrast, one commit per generation.
Part 2 runs `soakgate run` against the mock, kills it with SIGKILL at a random moment and reads
the database back: the loss window is the kill time minus the end time of the last stored
generation (the batching policy promises at most its interval, 0.5 s).

Part 1 also writes the rows batched with the adapter for None that `store.sqlite` registers
taken away (the binding of Python's sqlite3 before it), the two interleaved three times: the
median CPU per generation of each.

Run: python bench/bench_store.py [--generations 200000] [--kills 5]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import benchlib

from soakgate.detectors import DetectorConfig, score_text
from soakgate.mockserver.text import clean_tokens
from soakgate.records import Generation, sha256_text
from soakgate.store import BatchWriter, open_store


def make_generations(count: int) -> list[Generation]:
    """Scored rows like a soak's: 64-token texts, detector scores and evidence."""
    config, rows, now = DetectorConfig(), [], time.time()
    texts = [clean_tokens(i * 7919, 64)[1] for i in range(min(count, 1000))]
    for seq in range(count):
        text = texts[seq % len(texts)]
        row = Generation(
            run_id="bench",
            request_id=f"bench-{seq}",
            target="127.0.0.1:8000",
            label="bench",
            seq=seq,
            prompt_id=f"builtin-{seq % 300}",
            endpoint="completions",
            stream=True,
            started_at=now + seq * 1e-3,
            ended_at=now + seq * 1e-3 + 0.05,
            ttft_s=0.01,
            prompt_tokens=20,
            completion_tokens=64,
            finish_reason="length",
            http_status=200,
            text=text,
            text_sha256=sha256_text(text),
        )
        for name, detection in score_text(text, None, 64, config).items():
            row.scores[name] = detection.score
            if detection.evidence:
                row.details[name] = detection.evidence
        rows.append(row)
    return rows


def write_rate(rows: list[Generation], batched: bool) -> tuple[float, float, float]:
    """(generations/s wall, CPU microseconds per generation, bytes per generation)."""
    folder = Path(tempfile.mkdtemp(prefix="soakgate-store-bench-"))
    store = open_store(folder / "bench.sqlite")
    writer = BatchWriter(store) if batched else None
    wall, cpu = time.perf_counter(), time.process_time()
    for row in rows:
        if writer is not None:
            writer.add_generation(row)
        else:
            store.add([row])
    if writer is not None:
        writer.flush()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    store.close()
    size = sum(f.stat().st_size for f in folder.iterdir())
    for f in folder.iterdir():
        f.unlink()
    folder.rmdir()
    return len(rows) / wall, cpu / len(rows) * 1e6, size / len(rows)


@contextlib.contextmanager
def none_unadapted() -> Iterator[None]:
    """None bound as Python's sqlite3 binds it by itself (its adapter taken away meanwhile)."""
    key = (type(None), sqlite3.PrepareProtocol)
    adapter = sqlite3.adapters.pop(key)
    try:
        yield
    finally:
        sqlite3.adapters[key] = adapter


def kill_window(rng: random.Random, folder: Path, concurrency: int) -> tuple[float, int]:
    """Soak the mock, SIGKILL the soak at a random moment: (seconds lost, rows stored)."""
    mock = benchlib.start_mock(0)
    db = folder / f"kill-{rng.random():.6f}.sqlite"
    command = benchlib.soak_command(mock.url, db, concurrency, "--duration", "120s", stream=True)
    soak = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        started = time.monotonic()
        while benchlib.scrape(mock.url)[0] < 100:  # load is flowing
            if soak.poll() is not None or time.monotonic() - started > 60:
                raise RuntimeError("the soak did not start")
            time.sleep(0.05)
        time.sleep(rng.uniform(0.5, 2.0))
        killed_at = time.time()
        os.kill(soak.pid, signal.SIGKILL)
        soak.wait(10)
    finally:
        if soak.poll() is None:
            soak.kill()
        mock.stop()
    store = open_store(db)
    ends = [g.ended_at for g in store.generations()]
    store.close()
    return killed_at - max(ends, default=killed_at - 999), len(ends)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=200_000, help="rows to write")
    parser.add_argument("--kills", type=int, default=5, help="soaks to kill -9 (0: skip part 2)")
    parser.add_argument("--concurrency", type=int, default=64, help="of the killed soaks")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    print(f"date {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; load avg {os.getloadavg()}")
    rows = make_generations(args.generations)
    for label, batched in (("batched (BatchWriter, 0.5 s)", True), ("one commit per row", False)):
        sample = rows if batched else rows[: max(1, min(len(rows), 20_000))]
        rate, cpu_us, size = write_rate(sample, batched)
        print(
            f"{label:<30} {rate:>10,.0f} generations/s  {cpu_us:7.1f} us CPU/generation  "
            f"{size:7.0f} bytes/generation  ({len(sample):,} rows)"
        )
    costs: dict[str, list[float]] = {"with": [], "without": []}
    for _ in range(3):
        costs["with"].append(write_rate(rows, True)[1])
        with none_unadapted():
            costs["without"].append(write_rate(rows, True)[1])
    print(
        f"batched, None through its adapter: {statistics.median(costs['with']):.2f} us CPU/"
        f"generation; bound by sqlite3 itself: {statistics.median(costs['without']):.2f} "
        f"(medians of 3 interleaved, {len(rows):,} rows each)"
    )
    if args.kills:
        rng, windows = random.Random(args.seed), []
        with tempfile.TemporaryDirectory(prefix="soakgate-kill-bench-") as folder:
            for _ in range(args.kills):
                window, stored = kill_window(rng, Path(folder), args.concurrency)
                windows.append(window)
                print(
                    f"kill -9 after {stored:,} stored generations: last stored ended "
                    f"{window:.3f} s before the kill"
                )
        print(
            f"loss window over {len(windows)} kills: max {max(windows):.3f} s, "
            f"mean {sum(windows) / len(windows):.3f} s (policy: at most 0.5 s + one tick)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
