"""Bench (issue 29 item 3): what the `inconsistent` check flags on real log-probabilities, what
it finds in impossible ones, and what it costs per answer.

False flags: the real tiny model served by llama.cpp (`soakgate.servers.llamacpp`, the GGUF made
by `scripts/make_gguf.py`), soaked with `soakgate run --logprobs` on completions and chat, greedy
and sampled, with 5 alternatives per token and without, the built-in prompts in a seeded random
order; and the mock's own (consistent) log-probabilities.

Found faults: `soakgate mock-server --inconsistent-rate 0.05` (one impossible number per faulted
answer, ground truth names its kind and position), completions and chat, streamed and not,
greedy and sampled: recall per kind, the position right, false flags on its clean answers.

Cost: microseconds of the check per 128-token answer with 5 alternatives, in process.

Every share with its Clopper-Pearson 95% interval. Run:

    python bench/bench_numbers.py [--requests 400] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from benchlib import share, soak_run  # noqa: E402

from soakgate.mockserver.process import MockProcess  # noqa: E402
from soakgate.servers.llamacpp import LlamaCppProcess  # noqa: E402

MODEL = REPO.parent / "shared" / "models" / "tiny-llama-8k"
SHAPES = {
    "completions, sampled, top 5": ["--top-logprobs", "5"],
    "completions, greedy, top 5, not streamed": ["--top-logprobs", "5", "--temperature", "0",
                                                 "--no-stream"],
    "chat, sampled, top 5, not streamed": ["--endpoint", "chat", "--top-logprobs", "5",
                                           "--no-stream"],
    "chat, greedy, top 5": ["--endpoint", "chat", "--top-logprobs", "5", "--temperature", "0"],
    "chat, sampled, no alternatives": ["--endpoint", "chat"],
}  # fmt: skip
KINDS = {"nan": "not_finite", "infinite": "not_finite", "positive": "positive",
         "unsorted": "unsorted", "sum_above_one": "sum_above_one",
         "greedy_not_top": "greedy_not_top", "usage_mismatch": "usage_mismatch"}  # fmt: skip


def soak(url: str, db: Path, requests: int, extra: list[str]) -> None:
    soak_run(url, db, requests, "--max-tokens", "64", "--logprobs", "--prompt-order", "random",
             "--prompt-seed", "2912", *extra)  # fmt: skip


def rows(db: Path) -> dict[str, tuple[str, dict[str, Any]]]:
    with sqlite3.connect(db) as connection:
        found = connection.execute(
            "SELECT request_id, checks, details FROM generations WHERE error_class IS NULL"
        ).fetchall()
    return {r: (c, json.loads(d or "{}")) for r, c, d in found}


def false_flags(folder: Path, url: str, requests: int, name: str) -> None:
    print(f"false flags: {name}, {requests} requests per shape")
    total = flags = 0
    for shape, extra in SHAPES.items():
        db = folder / f"clean-{name}-{len(shape)}-{shape[:4]}.sqlite"
        soak(url, db, requests, extra)
        found = rows(db)
        flagged = {r: d["inconsistent"] for r, (c, d) in found.items() if "inconsistent" in c}
        total, flags = total + len(found), flags + len(flagged)
        kinds = Counter(e["kind"] for e in flagged.values())
        print(f"  {shape:42s} {share(len(flagged), len(found))} {dict(kinds) or ''}")
    print(f"  all                                        {share(flags, total)}")


def faults(folder: Path, requests: int) -> None:
    print(f"found faults: mock --inconsistent-rate 0.05, {requests} requests per shape")
    caught: Counter[str] = Counter()
    injected_by: Counter[str] = Counter()
    for shape, extra in SHAPES.items():
        truth = folder / f"truth-{len(shape)}-{shape[:4]}.jsonl"
        with MockProcess(["--inconsistent-rate", "0.05", "--seed", "29"],
                         ground_truth_path=truth) as mock:  # fmt: skip
            db = folder / f"faults-{len(shape)}-{shape[:4]}.sqlite"
            soak(mock.url, db, requests, extra)
            injected = {r["request_id"]: (r["inconsistent"], r["inconsistent_at"])
                        for r in mock.ground_truth() if r.get("inconsistent")}  # fmt: skip
        found = rows(db)
        flagged = {r: d["inconsistent"] for r, (c, d) in found.items() if "inconsistent" in c}
        right = {r for r, (kind, at) in injected.items() if r in flagged
                 and flagged[r]["kind"] == KINDS[kind] and flagged[r]["at"] == at}  # fmt: skip
        for rid, (kind, _) in injected.items():
            injected_by[kind] += 1
            caught[kind] += rid in right
        clean = share(len(set(flagged) - set(injected)), len(found) - len(injected))
        print(f"  {shape:42s} found, kind and place right {share(len(right), len(injected))}; "
              f"clean flagged {clean}")  # fmt: skip
    print(
        "  per kind: " + ", ".join(f"{k} {caught[k]}/{n}" for k, n in sorted(injected_by.items()))
    )


def cost() -> None:
    from soakgate.checks.numbers import first_impossible
    from soakgate.targets import Outcome

    content = [{"token": f"t{n}", "id": n, "logprob": -0.3, "top_logprobs": [
        {"token": f"t{n}", "id": n, "logprob": -0.3}, *({"token": f"a{k}", "id": 1000 + k,
        "logprob": -2.0 - k} for k in range(4))]} for n in range(128)]  # fmt: skip
    outcome = Outcome(started_at=0.0)
    outcome.logprob_parts, outcome.text, outcome.completion_tokens = (
        [{"content": content}],
        "x",
        128,
    )
    best = float("inf")
    for _ in range(5):
        began = time.perf_counter()
        for _ in range(200):
            first_impossible(outcome, greedy=False)
        best = min(best, (time.perf_counter() - began) / 200)
    print(
        f"cost of the check per 128-token answer with 5 alternatives: {best * 1e6:.0f} us "
        f"({best * 1e6 / 128:.2f} us per token)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    folder = args.out or Path(tempfile.mkdtemp(prefix="bench-numbers-"))
    folder.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    gguf = Path(tempfile.gettempdir()) / "soakgate-bench-tiny.gguf"
    if not gguf.is_file():
        subprocess.run([sys.executable, str(REPO / "scripts" / "make_gguf.py"), str(gguf),
                        "--model", str(MODEL)], check=True, capture_output=True)  # fmt: skip
    server = LlamaCppProcess(gguf, parallel=8, threads=2, log_dir=folder).start()
    try:
        false_flags(folder, server.url, args.requests, "llama.cpp (real tiny model)")
    finally:
        server.stop()
    with MockProcess(["--seed", "31"]) as mock:
        false_flags(folder, mock.url, args.requests, "the mock (consistent)")
    faults(folder, args.requests)
    cost()
    print(f"{time.monotonic() - began:.0f} s")


if __name__ == "__main__":
    main()
