"""Bench (issue 28): how fast the in-process reference (`--reference-model`) draws and scores its
calibration on a CPU, by torch's intra-op threads, the batch and the nucleus, on an idle machine
and beside busy processes (what a soak's own client, a CI run or other work puts beside it).

Each configuration times a calibration path on the same prompts. `shipped`: soakgate's own
(`HFReference._sample_all` while calibrating: a token at a time on the KV cache, each sample's
scores taken from the logits that drew it; then `score` for every sample, which finds them).
`generate`: the path before 2026-12-05, rebuilt here for comparison in one run (transformers'
`generate` in batches of `--batch`, then a second forward pass over every sample). Both at
`soakgate run`'s defaults (temperature 0.8, `--max-tokens` tokens). It prints samples per second
and what 5,000 samples (the default calibration) would take. A busy process is `while True:
pass` in its own process (one core's worth of other work each), started before and stopped
after its configurations. The header prints OpenMP's wait policy (OMP_WAIT_POLICY, read once
when torch loads): unset, torch's threads spin a while at each barrier, fastest on an idle
machine and slowest beside busy processes; OMP_WAIT_POLICY=PASSIVE makes them sleep
(BENCHMARKS.md section 17 has both).

Run: python bench/bench_calibration_speed.py [--samples 48] [--threads 1 2] [--batch 16 48]
     [--busy 0 1] [--top-p 1.0 0.95] [--paths shipped generate]
Needs torch and transformers (pip install -e '.[torch]').
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from soakgate.prompts import builtin_prompts  # noqa: E402
from soakgate.reference.hf import HFReference  # noqa: E402
from soakgate.reference.scorer import request_for  # noqa: E402
from soakgate.reference.soak import Sampling  # noqa: E402
from soakgate.targets import RequestSpec  # noqa: E402

MODEL = REPO.parent / "shared" / "models" / "tiny-llama-8k"


def timed(reference: HFReference, samples: int, spec: RequestSpec) -> tuple[float, float, int]:
    """Seconds to draw and to score `samples` calibration samples as the shipped calibration
    does (`_sample_all` while calibrating, then `score` for each: the scores were taken while
    drawing), and the tokens drawn."""
    prompts = [builtin_prompts()[i % len(builtin_prompts())] for i in range(samples)]
    reference.sampling = Sampling.of(spec.temperature, spec.top_p)
    reference._calibrating = True
    began = time.perf_counter()
    answers = reference._sample_all(prompts, spec)
    drawn = time.perf_counter() - began
    began = time.perf_counter()

    async def score_all() -> None:
        for prompt, outcome in answers:
            if outcome.token_ids:
                await reference.score(request_for(prompt, outcome, spec.endpoint))

    asyncio.run(score_all())
    scored = time.perf_counter() - began
    reference.calibrated()
    return drawn, scored, sum(len(o.token_ids or []) for _, o in answers)


def timed_generate(
    reference: HFReference, samples: int, spec: RequestSpec
) -> tuple[float, float, int]:
    """The same with the calibration path before 2026-12-05, for comparison in one run:
    transformers' `generate` in batches of `reference.batch_size` (the last one short), then a
    second forward pass over every sample (`_forward`)."""
    import torch

    prompts = [builtin_prompts()[i % len(builtin_prompts())] for i in range(samples)]
    tokenizer, model = reference._tokenizer, reference._model
    reference._set_threads()
    pad = tokenizer.pad_token_id or 0
    options = {"do_sample": True, "max_new_tokens": spec.max_tokens, "pad_token_id": pad,
               "temperature": spec.temperature, "top_p": spec.top_p or 1.0, "top_k": 0}  # fmt: skip
    began = time.perf_counter()
    sequences = []
    for start in range(0, samples, reference.batch_size):
        chunk = prompts[start : start + reference.batch_size]
        encoded = [tokenizer(p.text).input_ids for p in chunk]
        longest = max(map(len, encoded))
        inputs = torch.tensor([[pad] * (longest - len(e)) + e for e in encoded])
        mask = torch.tensor([[0] * (longest - len(e)) + [1] * len(e) for e in encoded])
        with torch.no_grad():
            output = model.generate(input_ids=inputs, attention_mask=mask, **options)
        for row, ids in enumerate(encoded):
            new = output[row, longest:].tolist()
            if tokenizer.eos_token_id in new:
                new = new[: new.index(tokenizer.eos_token_id)]
            sequences.append((ids, new))
    drawn = time.perf_counter() - began
    began = time.perf_counter()
    for start in range(0, len(sequences), reference.batch_size):
        chunk = sequences[start : start + reference.batch_size]
        reference._forward([([*ids, *new], len(ids)) for ids, new in chunk if new])
    scored = time.perf_counter() - began
    return drawn, scored, sum(len(new) for _, new in sequences)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--model", type=Path, default=MODEL)
    parser.add_argument("--samples", type=int, default=48, help="per configuration")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batch", type=int, nargs="+", default=[16, 48])
    parser.add_argument("--busy", type=int, nargs="+", default=[0, 1],
                        help="busy processes beside it, per round")  # fmt: skip
    parser.add_argument("--max-tokens", type=int, default=RequestSpec().max_tokens)
    parser.add_argument("--top-p", type=float, nargs="+", default=[1.0],
                        help="the soak's nucleus, per configuration")  # fmt: skip
    parser.add_argument(
        "--paths",
        nargs="+",
        default=["shipped", "generate"],
        choices=["shipped", "generate"],
        help="shipped: the calibration as soakgate draws it; generate: "
        "transformers' generate and a second scoring pass (before 2026-12-05)",
    )
    args = parser.parse_args()
    spec = RequestSpec(max_tokens=args.max_tokens)
    reference = HFReference(args.model)
    reference._load()
    print(f"{args.samples} samples per configuration, {args.max_tokens} tokens at most, "
          f"temperature {spec.temperature}; machine: {len(os.sched_getaffinity(0))} "
          f"cores; OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}")  # fmt: skip
    for busy in args.busy:
        loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                 for _ in range(busy)]  # fmt: skip
        try:
            for threads in args.threads:
                reference.threads = reference.calibration_threads = threads  # per phase
                for batch, top_p, path in itertools.product(args.batch, args.top_p, args.paths):
                    reference.batch_size = reference.sample_batch = batch
                    run = dataclasses.replace(spec, top_p=top_p)
                    measure = timed if path == "shipped" else timed_generate
                    drawn, scored, tokens = measure(reference, args.samples, run)
                    rate = args.samples / (drawn + scored)
                    print(f"busy {busy}, threads {threads}, batch {batch:>3}, top_p {top_p:.2f}, "
                          f"{path:>8}: drawn in {drawn:6.1f} s ({tokens / drawn:5.0f} tokens/s), "
                          f"scored in {scored:5.1f} s: {rate:5.2f} samples/s; 5,000 samples "
                          f"{5000 / rate / 60:5.1f} min", flush=True)  # fmt: skip
        finally:
            for loop in loops:
                loop.kill()
                loop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
