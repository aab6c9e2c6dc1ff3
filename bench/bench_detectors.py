"""Bench (issue 7 item 3): throughput of the default detectors, in MB/s per core.

Inputs: realistic text (mock-server prose and Python standard-library source, as whole
documents and as soak-sized 64-token generations) and worst cases (1 MB of one character, of
alternating or doubled characters, of a non-ASCII character, a repeated phrase). CPU time is
measured with time.process_time (one thread, so MB/s is per core). Target: char_run >= 500 MB/s.
Every input is scored as an output cut by its token budget (`finish_reason` `length`, as most
soak outputs are), so the tail rules of issue 12 run too; `--finish-reason stop` leaves them out.

Run: python bench/bench_detectors.py [--size-mb 1] [--min-seconds 0.5] [--finish-reason stop]
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial

from soakgate.detectors import DetectorConfig, Output, builtin, score_text
from soakgate.detectors.base import REGISTRY
from soakgate.mockserver.text import clean_tokens

Case = tuple[str, str, Sequence[int] | None]


assert builtin.char_run is REGISTRY["char_run"]  # the registry is filled by importing builtin


def realistic(size: int) -> list[Case]:
    """Whole documents of about `size` characters of prose and of code."""
    prose = clean_tokens(0, size // 4)[1]
    while len(prose) < size:
        prose += prose
    code = inspect.getsource(json.decoder) + inspect.getsource(inspect)
    while len(code) < size:
        code += code
    return [("realistic prose", prose[:size], None), ("realistic code", code[:size], None)]


def worst_cases(size: int) -> list[Case]:
    """Inputs that stress run detection: one long run, no runs, many short runs, loops."""
    return [
        ("one char '!' x size", "!" * size, None),
        ("one space x size", " " * size, None),
        ("alternating 'ab'", "ab" * (size // 2), None),
        ("doubled 'aabb'", "aabb" * (size // 4), None),
        ("one CJK char x size", "語" * (size // 3), None),
        ("phrase loop", "the cat sat on it " * (size // 18), None),
        ("token id 0 x size/4", "", [0] * (size // 4)),
    ]


def cpu_rate(fn: Callable[[], object], nbytes: int, min_seconds: float) -> tuple[float, float]:
    """(MB/s, microseconds per call) of `fn`, repeated until `min_seconds` of CPU time."""
    calls, started = 0, time.process_time()
    while True:
        fn()
        calls += 1
        spent = time.process_time() - started
        if spent >= min_seconds:
            return nbytes * calls / spent / 1e6, spent / calls * 1e6


def generations(count: int) -> list[str]:
    """Soak-sized outputs (64 tokens of mock prose), as a soak scores them."""
    return [clean_tokens(i * 997, 64)[1] for i in range(count)]


def score_many(texts: list[str], config: DetectorConfig, finish_reason: str) -> None:
    """Score every text, as a soak does once per generation."""
    for text in texts:
        score_text(text, None, 64, config, finish_reason=finish_reason, max_tokens=64)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=1.0, help="size of each document")
    parser.add_argument("--min-seconds", type=float, default=0.5, help="CPU time per figure")
    parser.add_argument("--finish-reason", default="length", help="finish reason of each input")
    args = parser.parse_args(argv)
    config, size = DetectorConfig(), int(args.size_mb * 1_000_000)
    print(
        f"date {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; python {sys.version.split()[0]}; "
        f"documents of {size:,} characters; CPU time per figure {args.min_seconds:g} s; "
        f"finish_reason {args.finish_reason}"
    )
    names = [*config.enabled, "all (score_text)"]
    print(f"\n{'input':<24}" + "".join(f"{n:>18}" for n in names) + "   (MB/s per core)")
    char_run_rates = []
    for label, text, ids in realistic(size) + worst_cases(size):
        nbytes = len(text.encode("utf-8")) + 4 * len(ids or ())
        rates = []
        for name in names:
            call = (
                partial(REGISTRY[name], Output(text, ids, 64, args.finish_reason, 64), config)
                if name in REGISTRY
                else partial(score_text, text, ids, 64, config, finish_reason=args.finish_reason,
                             max_tokens=64)
            )  # fmt: skip
            rates.append(cpu_rate(call, nbytes, args.min_seconds)[0])
        if text:
            char_run_rates.append(rates[names.index("char_run")])
        print(f"{label:<24}" + "".join(f"{r:>18,.0f}" for r in rates))
    texts = generations(200)
    nbytes = sum(len(t.encode()) for t in texts)
    score_all = partial(score_many, texts, config, args.finish_reason)
    per_call = cpu_rate(score_all, nbytes, args.min_seconds)[1] / len(texts)
    print(
        f"\nscore_text on 64-token generations ({nbytes // len(texts)} bytes each, finish_reason "
        f"{args.finish_reason}): "
        f"{per_call:.1f} us CPU per generation"
    )
    slowest = min(char_run_rates)
    verdict = "meets" if slowest >= 500 else "MISSES"
    print(f"char_run slowest input: {slowest:,.0f} MB/s ({verdict} the 500 MB/s target)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
