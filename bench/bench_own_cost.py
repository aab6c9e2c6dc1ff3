"""Bench: soakgate's own CPU per request, with the HTTP exchange replaced by a canned answer.

`soakgate run`'s whole pipeline (driver, client bookkeeping, response parsing, detectors, store)
runs as usual, except that each request's exchange returns a 64-token completion body at once.
What is left is the cost soakgate adds to the HTTP client's. Under cachegrind the instruction
count is deterministic (to 0.1 %), so small changes can be judged on a noisy machine:

Run: python bench/bench_own_cost.py [--requests 30000] [--checks default|no-spans|none]
     valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \\
         "$(python -c 'import sys; print(sys.executable)')" bench/bench_own_cost.py --requests N
     (run it for two values of N: the difference over the difference in N is per request)
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import soakgate.targets.client as client
from soakgate.checks import CrosstalkSettings, open_answer_checks
from soakgate.load.runner import SoakConfig, run_soak
from soakgate.load.spec import LoadSpec
from soakgate.mockserver.text import clean_tokens
from soakgate.targets import RequestSpec, TargetSpec, parse

_, TEXT = clean_tokens(12345, 64)
BODY = json.dumps({
    "id": "cmpl-1", "object": "text_completion", "model": "m",
    "choices": [{"index": 0, "text": TEXT, "finish_reason": "length", "logprobs": None}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 64, "total_tokens": 74},
}).encode()  # fmt: skip


async def canned_exchange(self: Any, outcome: Any, spec: Any, *_: Any) -> None:
    """Yield to the loop once (as a real answer would), then fold the canned body."""
    await asyncio.sleep(0)
    outcome.http_status = 200
    answer = parse.Answer(outcome, chat=False)
    parse.fold_body(answer, parse.decode_event(BODY))
    answer.close()
    answer.check()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=30000)
    parser.add_argument(
        "--checks", choices=("default", "no-spans", "none"), default="default",
        help="the answer checks as `soakgate run` opens them; without the crosstalk check's "
        "prompt spans (`--no-crosstalk-spans`); or none at all",
    )  # fmt: skip
    args = parser.parse_args()
    checks = None
    if args.checks != "none":
        settings = CrosstalkSettings(spans=args.checks == "default")
        checks = functools.partial(open_answer_checks, settings, False, None)
    client.OpenAIClient._exchange = canned_exchange  # type: ignore[method-assign,assignment]
    config = SoakConfig(
        targets=[TargetSpec.parse("http://127.0.0.1:9", model="m")], label="own-cost",
        request=RequestSpec(endpoint="completions", stream=False, max_tokens=64),
        load=LoadSpec(concurrency=64, requests=args.requests),
        db=Path(tempfile.mkdtemp(prefix="soakgate-own-")) / "own.sqlite", watch_metrics=False,
        answer_check=checks,
    )  # fmt: skip
    started = time.process_time()
    run_soak(config)
    spent = time.process_time() - started
    print(f"{1e6 * spent / args.requests:.1f} µs CPU per request over {args.requests} requests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
