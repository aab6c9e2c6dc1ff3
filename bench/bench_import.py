"""Bench (issue 27): peak memory of `soakgate import` on a large sidecar.

Writes a sidecar of `--rows` generations (each with `--text-kb` of text, as `--store-text all`
keeps it) with the production writer (`store.unstored.Sidecar`), then imports it into a new
database with `python -m soakgate import` in a child process and prints the child's peak RSS
(`wait4`'s ru_maxrss), its time, and the rows stored. `--src DIR` imports with another checkout's
`src` (e.g. the code before issue 27) for a before/after on the same file.
Run: `python bench/bench_import.py [--rows 200000] [--text-kb 1] [--src /work/main/src]`.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from soakgate.records import Event, Generation, Run, sha256_text
from soakgate.store.unstored import Sidecar


def write_sidecar(folder: Path, rows: int, text_kb: float) -> Path:
    """A sidecar of `rows` generations of one run, written in chunks of 1000."""
    run = Run(run_id="bench0import", label="compiled", targets=["gpu0"], started_at=1.0e9)
    writer = Sidecar(folder / "lost.sqlite", run, fallbacks=[])
    words = ("the quick brown fox jumps over the lazy dog " * 64)[: int(text_kb * 1024)]
    for start in range(0, rows, 1000):
        batch = [_generation(run, seq, words) for seq in range(start, min(start + 1000, rows))]
        writer(batch, [Event(run.run_id, 1.0e9 + start, "note", "gpu0", {"batch": start})])
    run.status, run.ended_at = "failed", 1.0e9 + rows
    writer.write_run(run)
    writer.close()
    assert writer.path is not None
    return writer.path


def _generation(run: Run, seq: int, words: str) -> Generation:
    return Generation(
        run_id=run.run_id, request_id=f"{run.run_id}-{seq}", target="gpu0", label="compiled",
        seq=seq, prompt_id=f"p{seq % 300}", endpoint="completions", stream=True,
        started_at=1.0e9 + seq, ended_at=1.0e9 + seq + 0.5, ttft_s=0.01, prompt_tokens=20,
        completion_tokens=128, finish_reason="length", text=words, text_sha256=sha256_text(words),
        token_ids=list(range(128)), scores={"char_run": 2.0}, details={}, flags=[],
    )  # fmt: skip


def import_peak(sidecar: Path, db: Path, src: str | None) -> tuple[float, float, int]:
    """(peak RSS in MiB, seconds, exit status) of one `soakgate import` child."""
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src
    began = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "soakgate", "import", str(db), str(sidecar)], env=env,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_maxrss / 1024, time.perf_counter() - began, child.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--text-kb", type=float, default=1.0)
    parser.add_argument("--src", action="append", default=[], help="a checkout's src to compare")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as folder:
        began = time.perf_counter()
        sidecar = write_sidecar(Path(folder), args.rows, args.text_kb)
        size = sidecar.stat().st_size / 2**20
        print(f"sidecar: {args.rows:,} generations, {size:,.0f} MiB, written in "
              f"{time.perf_counter() - began:.0f} s")  # fmt: skip
        for index, src in enumerate([None, *args.src]):
            db = Path(folder) / f"imported-{index}.sqlite"
            peak, seconds, code = import_peak(sidecar, db, src)
            stored = 0
            if db.exists():
                with sqlite3.connect(db) as check:
                    stored = check.execute("SELECT COUNT(*) FROM generations").fetchone()[0]
            print(f"import ({src or 'this checkout'}): peak RSS {peak:,.0f} MiB, {seconds:.0f} s, "
                  f"exit {code}, {stored:,} rows stored")  # fmt: skip


if __name__ == "__main__":
    main()
