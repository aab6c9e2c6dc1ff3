"""Bench (issue 28): how fast the in-process reference (`--reference-model`) draws and scores its
calibration on a CPU, by torch's intra-op threads and the batch, on an idle machine and beside
busy processes (what a soak's own client, a CI run or other work puts beside it).

Each configuration times soakgate's own calibration path on the same prompts: the sampler
(`HFReference._sample_all`, `generate` at `soakgate run`'s defaults: temperature 0.8,
`--max-tokens` tokens) and the scoring pass (`HFReference._forward`, what every calibration
sample and every scored row goes through). It prints samples per second and what 5,000 samples
(the default calibration) would take. A busy process is `while True: pass` in its own process
(one core's worth of other work each), started before and stopped after its configurations.
The header prints OpenMP's wait policy (OMP_WAIT_POLICY, read once when torch loads): unset,
torch's threads spin a while at each barrier, fastest on an idle machine and slowest beside busy
processes; OMP_WAIT_POLICY=PASSIVE makes them sleep (BENCHMARKS.md section 17 has both).

Run: python bench/bench_calibration_speed.py [--samples 48] [--threads 1 2] [--batch 16 48]
     [--busy 0 1]
Needs torch and transformers (pip install -e '.[torch]').
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from soakgate.prompts import builtin_prompts  # noqa: E402
from soakgate.reference.hf import HFReference  # noqa: E402
from soakgate.targets import RequestSpec  # noqa: E402

MODEL = REPO.parent / "shared" / "models" / "tiny-llama-8k"


def timed(reference: HFReference, samples: int, spec: RequestSpec) -> tuple[float, float, int]:
    """Seconds to draw and to score `samples` calibration samples, and the tokens drawn."""
    prompts = [builtin_prompts()[i % len(builtin_prompts())] for i in range(samples)]
    began = time.perf_counter()
    answers = reference._sample_all(prompts, spec)
    drawn = time.perf_counter() - began
    began = time.perf_counter()
    for start in range(0, len(answers), reference.batch_size):
        chunk = answers[start : start + reference.batch_size]
        reference._forward([([*o.prompt_token_ids, *o.token_ids], len(o.prompt_token_ids))
                            for _, o in chunk if o.token_ids])  # fmt: skip
    scored = time.perf_counter() - began
    return drawn, scored, sum(len(o.token_ids or []) for _, o in answers)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--model", type=Path, default=MODEL)
    parser.add_argument("--samples", type=int, default=48, help="per configuration")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batch", type=int, nargs="+", default=[16, 48])
    parser.add_argument("--busy", type=int, nargs="+", default=[0, 1],
                        help="busy processes beside it, per round")  # fmt: skip
    parser.add_argument("--max-tokens", type=int, default=RequestSpec().max_tokens)
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
                for batch in args.batch:
                    reference.batch_size = batch
                    drawn, scored, tokens = timed(reference, args.samples, spec)
                    rate = args.samples / (drawn + scored)
                    print(f"busy {busy}, threads {threads}, batch {batch:>3}: drawn in "
                          f"{drawn:6.1f} s ({tokens / drawn:5.0f} tokens/s), scored in "
                          f"{scored:5.1f} s: {rate:5.2f} samples/s; 5,000 samples "
                          f"{5000 / rate / 60:5.1f} min", flush=True)  # fmt: skip
        finally:
            for loop in loops:
                loop.kill()
                loop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
