"""Bench (issue 29 item 4): what twin requests find, what they call a mismatch on a real server,
and what the comparison costs per twin.

Found faults: `soakgate mock-server --seed-drift-rate 0.05` (a seeded request answered from
another random stream from a drawn position on; the ground truth names it), soaked with
`soakgate run --twin-fraction 0.2` on completions and chat, streamed and not: a pair with a
drifted request must be flagged, a pair without must not.

Load-only drift: the mock drifting only with 6 or more requests in flight
(`--seed-drift-after-in-flight 6 --seed-drift-rate 0.2`, concurrency 8): the pairs at rest
repeat, the pairs under load do not, and the report says so.

A real server: the real tiny model served by llama.cpp (`soakgate.servers.llamacpp`, the GGUF
made by `scripts/make_gguf.py`), sampled at temperature 0.8 and greedy, at concurrency 8 and 1:
pairs at rest against pairs under load, with the report's reading.

Cost: microseconds of `Twins.mark` per twin row (two 256-token answers compared), in process.

Every share with its Clopper-Pearson 95% interval. Run:

    python bench/bench_twins.py [--requests 500] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from benchlib import share, soak_run  # noqa: E402

from soakgate.mockserver.process import MockProcess  # noqa: E402
from soakgate.servers.llamacpp import LlamaCppProcess  # noqa: E402

MODEL = REPO.parent / "shared" / "models" / "tiny-llama-8k"
SHAPES = {
    "completions, streamed": [],
    "completions": ["--no-stream"],
    "chat, streamed": ["--endpoint", "chat"],
    "chat": ["--endpoint", "chat", "--no-stream"],
}


def soak(url: str, db: Path, requests: int, extra: list[str]) -> None:
    soak_run(url, db, requests, "--max-tokens", "64", "--temperature", "0.8", "--twin-fraction",
             "0.2", "--prompt-order", "random", "--prompt-seed", "2914", *extra)  # fmt: skip


def twins(db: Path) -> dict[str, tuple[str, dict[str, Any]]]:
    """Twin rows: request id -> (checks, details.twin)."""
    with sqlite3.connect(db) as connection:
        found = connection.execute(
            "SELECT request_id, checks, details FROM generations WHERE error_class IS NULL "
            "AND json_extract(details, '$.twin.role') = 'twin'"
        ).fetchall()
    return {r: (c, json.loads(d)["twin"]) for r, c, d in found}


def reading(db: Path) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "soakgate", "report", str(db), "--format",
                           "json"], capture_output=True, text=True, check=True)  # fmt: skip
    (unit,) = [o for o in json.loads(done.stdout)["outcomes"] if not o["aggregate"]]
    return dict(unit["twin_mismatch"])


def faults(folder: Path, requests: int) -> None:
    print(f"found faults: mock --seed-drift-rate 0.05, {requests} requests per shape")
    all_found = all_drifted = all_false = all_clean = 0
    for shape, extra in SHAPES.items():
        truth = folder / f"truth-{shape[:4]}-{len(extra)}.jsonl"
        with MockProcess(["--seed-drift-rate", "0.05", "--seed", "30"],
                         ground_truth_path=truth) as mock:  # fmt: skip
            db = folder / f"faults-{shape[:4]}-{len(extra)}.sqlite"
            soak(mock.url, db, requests, extra)
            drift = {r["request_id"]: r.get("seed_drift") for r in mock.ground_truth()}
        found = twins(db)
        drifted = {
            rid
            for rid, (_, twin) in found.items()
            if drift.get(rid) is not None or drift.get(twin["first"]) is not None
        }
        flagged = {rid for rid, (checks, _) in found.items() if checks == "twin_mismatch"}
        clean = len(found) - len(drifted)
        print(f"  {shape:24s} drifted pairs flagged {share(len(flagged & drifted), len(drifted))}; "
              f"clean pairs flagged {share(len(flagged - drifted), clean)}")  # fmt: skip
        all_found += len(flagged & drifted)
        all_drifted += len(drifted)
        all_false += len(flagged - drifted)
        all_clean += clean
    print(f"  {'all':24s} drifted pairs flagged {share(all_found, all_drifted)}; "
          f"clean pairs flagged {share(all_false, all_clean)}")  # fmt: skip


def load_only(folder: Path, requests: int) -> None:
    print(f"load-only drift: mock drifting with 6+ in flight, {requests} requests")
    with MockProcess(["--seed-drift-rate", "0.2", "--seed-drift-after-in-flight", "6",
                      "--latency-ms", "20", "--seed", "31"]) as mock:  # fmt: skip
        db = folder / "load-only.sqlite"
        soak(mock.url, db, requests, [])
    found = reading(db)
    print(f"  under load {share(found['events'], found['n'])}; at rest {found['at_rest']}")
    print(f"  report: {found['reading']}")


def real(folder: Path, url: str, requests: int) -> None:
    print(f"a real server: llama.cpp, the real tiny model, {requests} requests per setting")
    for index, (name, extra) in enumerate(
        {
            "sampled 0.8, concurrency 8": ["--twin-at-rest", "64"],
            "greedy, concurrency 8": ["--twin-at-rest", "64", "--temperature", "0"],
            "sampled 0.8, concurrency 1": ["--twin-at-rest", "64", "--concurrency", "1"],
        }.items()
    ):
        db = folder / f"llama-{index}.sqlite"
        soak(url, db, requests, extra)
        found = reading(db)
        rest = found["at_rest"]
        print(f"  {name:28s} under load {share(found['events'], found['n'])}; at rest "
              f"{share(rest['mismatched'], rest['pairs'])}")  # fmt: skip
        print(f"    report: {found['reading']}")
        with sqlite3.connect(db) as connection:
            parted = [json.loads(d)["twin_mismatch"]["character"] for (d,) in connection.execute(
                "SELECT details FROM generations WHERE checks = 'twin_mismatch'")]  # fmt: skip
        if parted:
            print(f"    they part at character {sorted(parted)}")


def cost() -> None:
    from soakgate.checks.twins import Twins, TwinSettings
    from soakgate.records import Generation, Run
    from soakgate.targets import RequestSpec

    class Writer:
        def add_event(self, event: Any) -> None:
            pass

    run = Run("bench", "x", ["t"], 0.0)
    check = Twins(TwinSettings(fraction=1.0), run, Writer(), RequestSpec())  # type: ignore[arg-type]
    text = " ".join(f"word{n}" for n in range(256))
    ids = list(range(256))
    best = float("inf")
    for _ in range(5):
        rounds = 2000
        began = time.perf_counter()
        for seq in range(0, 2 * rounds, 2):
            spec = check.first("t", seq, None, RequestSpec())  # type: ignore[arg-type]
            assert spec is not None
            twin = check.due("t", seq + 1)
            first = Generation("bench", f"r{seq}", "t", "x", seq, "p", "completions", True, 0, 0,
                               text=text, token_ids=ids)  # fmt: skip
            second = Generation("bench", f"r{seq + 1}", "t", "x", seq + 1, "p", "completions",
                                True, 0, 0, text=text, token_ids=ids)  # fmt: skip
            check.mark(first)
            assert twin is not None
            check.mark(second)
        best = min(best, (time.perf_counter() - began) / rounds)
    print(f"cost per pair (choose, queue, keep the first, compare 256 tokens): {best * 1e6:.1f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    folder = args.out or Path(tempfile.mkdtemp(prefix="bench-twins-"))
    folder.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    faults(folder, args.requests)
    load_only(folder, args.requests)
    gguf = Path(tempfile.gettempdir()) / "soakgate-bench-tiny.gguf"
    if not gguf.is_file():
        subprocess.run([sys.executable, str(REPO / "scripts" / "make_gguf.py"), str(gguf),
                        "--model", str(MODEL)], check=True, capture_output=True)  # fmt: skip
    server = LlamaCppProcess(gguf, parallel=8, threads=2, log_dir=folder).start()
    try:
        real(folder, server.url, args.requests)
    finally:
        server.stop()
    cost()
    print(f"{time.monotonic() - began:.0f} s")


if __name__ == "__main__":
    main()
