"""Bench (issue 30 item 3): how close synthetic prompts (`run --prompt-tokens DIST`) come to the
lengths asked for, re-tokenized by the served model's own tokenizer.

For each length distribution, makes the prompts as `run` does (seeded by --prompt-seed 0), once
cut at the model's token boundaries (`--tokenizer`) and once by the word estimate (no
tokenizer), and prints per prompt the tokens the model's tokenizer counts against the length
drawn: the share within ±2 tokens, the mean absolute error, and for the estimate the ratio
counted / asked (mean, min, max). The tokenizer is a Hugging Face tokenizer.json (default: the
shared test model beside the checkout).

Run: python bench/bench_synthetic_prompts.py [--tokenizer PATH] [--count 300]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from soakgate.prompts.synthetic import LengthDistribution, synthetic_prompts

REPO = Path(__file__).resolve().parents[1]
DISTRIBUTIONS = ("64", "uniform:16,512", "normal:512,128", "lognormal:300,0.8", "4096")


def asked(prompt_id: str) -> int:
    return int(prompt_id.rsplit("-", 1)[1].removesuffix("t"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", default=str(REPO.parent / "shared/models/tiny-llama-8k"))
    parser.add_argument("--count", type=int, default=300)
    args = parser.parse_args()
    from tokenizers import Tokenizer

    path = Path(args.tokenizer)
    tokenizer = Tokenizer.from_file(str(path / "tokenizer.json" if path.is_dir() else path))

    def counted(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    print(f"tokenizer {args.tokenizer}, {args.count} prompts per distribution")
    print(
        "| lengths | with --tokenizer: within ±2 | mean abs error | without: counted/asked "
        "mean [min, max] |"
    )
    print("|---|---|---|---|")
    for text in DISTRIBUTIONS:
        lengths = LengthDistribution.parse(text)
        cut = synthetic_prompts(lengths, args.count, 0, args.tokenizer)
        errors = [abs(counted(p.text) - asked(p.prompt_id)) for p in cut]
        within = sum(e <= 2 for e in errors) / len(errors)
        estimated = synthetic_prompts(lengths, args.count, 0, None)
        ratios = [counted(p.text) / asked(p.prompt_id) for p in estimated]
        print(
            f"| {text} | {within:.1%} | {statistics.fmean(errors):.2f} | "
            f"{statistics.fmean(ratios):.2f} [{min(ratios):.2f}, {max(ratios):.2f}] |"
        )


if __name__ == "__main__":
    main()
