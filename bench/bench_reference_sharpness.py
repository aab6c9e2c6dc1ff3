"""Bench: how sharp reference scoring can be, and what sets it: the sampling, not the score.

The fluent positive control of the vLLM plugin (examples/vllm-dropped-op-plugin, mode `fluent`)
is re-enacted in this process on the shared model: at a decoding step whose most likely next
token is one the control's own rule picks (`soakgate_dropped_op.fluent.selected`), the final
norm's output is misaligned by one feature (the plugin's stale buffer) and the step samples from
the wrong distribution; the model then carries on from the wrong token. Clean samples are the
same loop without the perturbation. Every generation is then scored teacher-forced under the
unperturbed model, as a reference server scores it.

For each `--top-p`, the threshold is calibrated as `soakgate run` does (soakgate's own
`calibrate`, `--calibration` clean samples, the default 0.1% false-flag rate and 1%), and the
bench prints, with Clopper-Pearson 95% intervals:
- the share of corrupted generations flagged by soakgate's score (worst-token surprisal, the
  shipped `max_surprisal`), and by the exact per-token tail probability under the sampling
  distribution (the whole distribution at every step: the best a per-token score can use);
- the false flags on `--holdout` further clean samples.

Run: python bench/bench_reference_sharpness.py [--top-p 1.0 0.95] [--calibration 5000]
     [--rates 0.001 0.01] [--holdout 2000] [--generations 1000]
     [--model ../shared/models/tiny-llama-8k]
Needs torch and transformers (pip install -e '.[torch]'); ~8 min per top-p on one core.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples" / "vllm-dropped-op-plugin"))

import benchlib  # noqa: E402
from soakgate_dropped_op.fluent import MODULUS, RESIDUE  # noqa: E402

from soakgate.prompts import builtin_prompts  # noqa: E402
from soakgate.reference.calibrate import calibrate  # noqa: E402
from soakgate.reference.score import TokenScore, max_surprisal  # noqa: E402
from soakgate.stats.rates import clopper_pearson  # noqa: E402

TEMPERATURE = 0.8
TOKENS = 32
BATCH = 10
"""Samples per prompt per forward pass (prompts go round-robin, as soakgate's picker's do)."""


class Model:
    """The shared model, its control hook, and teacher-forced scoring."""

    def __init__(self, path: Path) -> None:
        import torch
        import transformers

        transformers.logging.set_verbosity_error()  # type: ignore[no-untyped-call]
        transformers.utils.logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        self.torch = torch
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.model = transformers.AutoModelForCausalLM.from_pretrained(
            path, dtype=torch.float32, local_files_only=True
        ).eval()  # type: ignore[no-untyped-call]
        self.corrupting = False
        self.picked: Any = None
        embed = self.model.get_input_embeddings().weight
        self.model.model.norm.register_forward_hook(self._hook(embed))

    def _hook(self, embed: Any) -> Any:
        torch = self.torch

        def hook(module: Any, inputs: Any, out: Any) -> Any:
            if not self.corrupting:
                return out
            picked = (out @ embed.T).argmax(-1) % MODULUS == RESIDUE  # the control's rule
            self.picked = picked[:, -1].clone()
            return torch.where(picked[..., None], out.roll(1, -1), out)

        return hook

    def sample(self, prompt_ids: list[int], top_p: float, corrupt: bool, generator: Any) -> Any:
        """BATCH generations of one prompt; (tokens [B, TOKENS], picked steps [B, TOKENS])."""
        torch = self.torch
        current, past, tokens, picks = torch.tensor([prompt_ids] * BATCH), None, [], []
        with torch.no_grad():
            self.corrupting = corrupt
            for _ in range(TOKENS):
                out = self.model(current, past_key_values=past, use_cache=True)
                past = out.past_key_values
                picks.append(self.picked if corrupt else torch.zeros(BATCH, dtype=torch.bool))
                probs = benchlib.nucleus(torch, out.logits[:, -1].float(), top_p, TEMPERATURE)
                current = torch.multinomial(probs, 1, generator=generator)
                tokens.append(current[:, 0])
            self.corrupting = False
        return torch.stack(tokens, 1), torch.stack(picks, 1)

    def score(self, prompt_ids: list[int], tokens: Any, top_p: float) -> list[tuple[float, float]]:
        """Per generation: (soakgate's score, the exact worst tail score) under the clean model."""
        torch = self.torch
        with torch.no_grad():
            whole = torch.cat([torch.tensor([prompt_ids] * len(tokens)), tokens], 1)
            logits = self.model(whole).logits[:, len(prompt_ids) - 1 : -1].float()
        logprobs = torch.log_softmax(logits, -1)
        own = logprobs.gather(2, tokens[..., None])[..., 0]
        sampling = benchlib.nucleus(torch, logits, top_p, TEMPERATURE)
        # P(a sampled token is at most as likely as this one): ~U(0,1) when sampled correctly
        tail = (sampling * (logprobs <= own[..., None])).sum(-1).clamp_min(1e-300)
        out = []
        for row in range(len(tokens)):
            pairs = enumerate(zip(tokens[row], own[row], strict=True))
            scored = [TokenScore(i, int(t), float(lp), None, "") for i, (t, lp) in pairs]
            out.append((max_surprisal(scored), float(-tail[row].log().min())))
        return out


def draw(model: Model, count: int, top_p: float, corrupt: bool, seed: int,
         offset: int) -> list[tuple[float, float, bool]]:  # fmt: skip
    """`count` generations: (score, tail score, corrupted?) each."""
    torch = model.torch
    generator = torch.Generator().manual_seed(seed)
    prompts = builtin_prompts()
    rows: list[tuple[float, float, bool]] = []
    for index in range(math.ceil(count / BATCH)):
        prompt = prompts[(offset + index) % len(prompts)]
        ids = model.tokenizer(prompt.text).input_ids
        tokens, picked = model.sample(ids, top_p, corrupt, generator)
        hit = picked.any(1).tolist()
        rows += [(s, t, h) for (s, t), h in zip(model.score(ids, tokens, top_p), hit, strict=True)]
    return rows[:count]


def share(k: int, n: int) -> str:
    low, high = clopper_pearson(k, n)
    return f"{k}/{n} = {k / n:.1%} [{low:.1%}, {high:.1%}]" if n else "-"


def run(model: Model, top_p: float, args: argparse.Namespace) -> None:
    began = time.perf_counter()
    calibration = draw(model, args.calibration, top_p, False, args.seed, 0)
    holdout = draw(model, args.holdout, top_p, False, args.seed + 1, 7)
    control = draw(model, args.generations, top_p, True, args.seed + 2, 13)
    corrupted = [row for row in control if row[2]]
    print(f"\n## top-p {top_p} (temperature {TEMPERATURE}, {TOKENS} tokens; "
          f"{time.perf_counter() - began:.0f} s)")  # fmt: skip
    print(f"control: {len(corrupted)} of {len(control)} generations corrupted")
    print("| rate | score | threshold | corrupted flagged | held-out clean flagged |")
    print("| --- | --- | --- | --- | --- |")
    for rate in args.rates:
        for name, column in (("soakgate (worst surprisal)", 0), ("exact tail, whole dist.", 1)):
            threshold = calibrate([row[column] for row in calibration], rate).threshold
            caught = sum(row[column] > threshold for row in corrupted)
            false = sum(row[column] > threshold for row in holdout)
            print(f"| {rate:g} | {name} | {threshold:.2f} | {share(caught, len(corrupted))} | "
                  f"{share(false, len(holdout))} |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top-p", type=float, nargs="+", default=[1.0, 0.95])
    parser.add_argument("--calibration", type=int, default=5000)
    parser.add_argument("--rates", type=float, nargs="+", default=[0.001, 0.01])
    parser.add_argument("--holdout", type=int, default=2000)
    parser.add_argument("--generations", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--model", type=Path, default=REPO.parent / "shared/models/tiny-llama-8k")
    args = parser.parse_args()
    if not (args.model / "config.json").is_file():
        sys.exit(f"bench_reference_sharpness: no model at {args.model}")
    model = Model(args.model)
    model.torch.set_num_threads(args.threads)
    print(f"# reference sharpness: {args.model.name}, calibration {args.calibration}, "
          f"held-out {args.holdout}, control generations {args.generations}")  # fmt: skip
    for top_p in args.top_p:
        run(model, top_p, args)


if __name__ == "__main__":
    main()
