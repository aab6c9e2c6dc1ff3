"""Bench (issue 28): per-generation detection of corruption that shifts the whole distribution,
on the shared real model, by soakgate's shipped scores.

The shared model (tiny-llama-8k) samples clean generations and, as a candidate, generations
under one of five corruption controls, each a kind the scores were not tuned on:

- `lost-mlp`: layer 2's MLP output is lost (a dropped or mis-fused kernel), every step;
- `scaled-attn`: layer 0's attention output is scaled by 0.5 (a wrong scale), every step;
- `int4`: every decoder layer's linear weights rounded to 4 bits per output row, symmetric, round
  to nearest (a quantised kernel with a wrong scale would be worse; this is the mild case);
- `late-lost-mlp`: `lost-mlp` only from the 96th generated token on (state that goes bad late in
  a long generation); only generations longer than 96 tokens are counted (the others it did not
  change);
- `one-token`: at one step drawn uniformly in [8, 100), the token is drawn from the clean
  distribution's ranks 5-50 instead (one ordinary but wrong token).

Sampling is at `soakgate run`'s defaults (temperature 0.8, 128 tokens, stopping at EOS), with
and without a nucleus (`--top-p`). Every generation is then scored teacher-forced under the
clean model by soakgate's own in-process reference (`HFReference._forward`: log-probabilities
and the exact entropy at each position) and its own scores (`max_surprisal`,
`typical_surprisal`); the thresholds come from soakgate's `calibrate` on `--calibration` clean
samples at the default rate 0.001, both scores calibrated together as `soakgate run` does. It
prints, per control, with Clopper-Pearson 95% intervals: the share flagged by the shipped rule
(either score), by the worst token alone (the rule before issue 28's typicality), by the
typicality alone at its joint threshold; and, without a nucleus, by the likelihood ratio of the
candidate to the clean model calibrated at the same rate (the Neyman-Pearson test that knows the
corruption exactly: no score can do better per generation). Clean holdout generations give the
false-flag rate.

With `--time-calibration N` it first times the shipped calibration sampler
(`HFReference._sample_all`, batch 16) on N prompts and prints the rate and the time 5,000
samples would take.

Run: python bench/bench_reference_typical.py [--calibration 5000] [--holdout 2000]
     [--generations 500] [--top-p 1.0 0.95] [--time-calibration 160] [--device cuda --batch 128]
Needs torch and transformers (pip install -e '.[torch]').
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import benchlib  # noqa: E402
from bench_calibration_speed import timed  # noqa: E402

from soakgate.prompts import builtin_prompts  # noqa: E402
from soakgate.reference.calibrate import calibrate  # noqa: E402
from soakgate.reference.hf import HFReference  # noqa: E402
from soakgate.reference.score import (  # noqa: E402
    max_surprisal,
    mean_surprisal,
    typical_surprisal,
)
from soakgate.stats.rates import clopper_pearson  # noqa: E402
from soakgate.stats.shift import SHIFTED, score_shift  # noqa: E402
from soakgate.targets import RequestSpec  # noqa: E402

SPEC = RequestSpec()
TEMPERATURE, TOKENS = SPEC.temperature, [SPEC.max_tokens]
RATE = [0.001]
BATCH = [32]
"""Samples per prompt per forward pass (prompts go round-robin, as soakgate's picker's do);
`--batch` sets it."""
LATE = 96
CONTROLS = ("lost-mlp", "scaled-attn", "int4", "late-lost-mlp", "one-token")
MODEL = REPO.parent / "shared" / "models" / "tiny-llama-8k"


class Candidate:
    """The shared model with the controls' hooks (off unless `mode` names one), and its int4
    twin."""

    def __init__(self, reference: HFReference) -> None:
        import torch

        self.torch = torch
        self.model = reference._model
        self.eos = reference._tokenizer.eos_token_id
        self.mode: str | None = None
        self.from_position = 0
        """Absolute position from which a late control acts."""
        self.positions: Any = None
        """Absolute positions of the current forward pass's inputs."""
        layers = self.model.model.layers
        layers[2].mlp.register_forward_hook(self._hook("lost-mlp", lambda out: out * 0.0))
        layers[0].self_attn.register_forward_hook(self._hook("scaled-attn", lambda out: out * 0.5))
        self.int4 = copy.deepcopy(self.model)
        with torch.no_grad():
            for layer in self.int4.model.layers:
                for module in layer.modules():
                    if isinstance(module, torch.nn.Linear):
                        weight = module.weight
                        scale = weight.abs().amax(1, keepdim=True) / 7.0
                        weight.copy_((weight / scale).round().clamp(-8, 7) * scale)

    def _hook(self, name: str, change: Any) -> Any:
        def hook(module: Any, inputs: Any, out: Any) -> Any:
            acting = self.mode == name or (self.mode == "late-" + name)
            if not acting:
                return out
            first = out[0] if isinstance(out, tuple) else out
            changed = change(first)
            if self.mode.startswith("late-"):
                mask = (self.positions >= self.from_position)[None, :, None]
                changed = self.torch.where(mask, changed, first)
            return (changed, *out[1:]) if isinstance(out, tuple) else changed

        return hook

    def net(self) -> Any:
        return self.int4 if self.mode == "int4" else self.model

    def sample(self, prompt_ids: list[int], top_p: float, mode: str | None, generator: Any,
               count: int) -> list[list[int]]:  # fmt: skip
        """`count` generations of one prompt under `mode` (None: clean), cut at EOS."""
        torch = self.torch
        current = torch.tensor([prompt_ids] * count)
        past, steps = None, []
        self.mode, self.from_position = mode, len(prompt_ids) + LATE
        swap = torch.randint(8, 100, (count,), generator=generator)
        with torch.no_grad():
            for step in range(TOKENS[0]):
                start = 0 if past is None else len(prompt_ids) + step - 1
                self.positions = torch.arange(start, start + current.shape[1])
                out = self.net()(current, past_key_values=past, use_cache=True)
                past = out.past_key_values
                probs = benchlib.nucleus(torch, out.logits[:, -1].float(), top_p, TEMPERATURE)
                current = torch.multinomial(probs, 1, generator=generator)
                if mode == "one-token":
                    ordered = probs.argsort(-1, descending=True)
                    other = ordered.gather(1, torch.randint(4, 50, (count, 1), generator=generator))
                    current = torch.where((swap == step)[:, None], other, current)
                steps.append(current[:, 0])
        self.mode = None
        rows = torch.stack(steps, 1).tolist()
        return [row[: row.index(self.eos)] if self.eos in row else row for row in rows]

    def logprobs(self, prompt_ids: list[int], generated: list[list[int]], mode: str | None
                 ) -> list[float]:  # fmt: skip
        """log P(tokens | prompt) of each generation under `mode`'s model at TEMPERATURE, no
        nucleus (one right-padded forward pass)."""
        torch = self.torch
        longest = max(map(len, generated))
        rows = [[*prompt_ids, *g, *[self.eos] * (longest - len(g))] for g in generated]
        self.mode, self.from_position = mode, len(prompt_ids) + LATE
        self.positions = torch.arange(len(rows[0]))
        with torch.no_grad():
            logits = self.net()(torch.tensor(rows)).logits[:, len(prompt_ids) - 1 : -1].float()
        self.mode = None
        logprobs = torch.log_softmax(logits / TEMPERATURE, -1)
        targets = torch.tensor([r[len(prompt_ids) :] for r in rows])
        own = logprobs.gather(2, targets[..., None])[..., 0]
        lengths = torch.tensor([len(g) for g in generated])
        kept = torch.arange(longest)[None, :] < lengths[:, None]
        return (own * kept).sum(1).tolist()


def draw(candidate: Candidate, reference: HFReference, count: int, top_p: float,
         mode: str | None, seed: int, ratios: tuple[str, ...] = ()
         ) -> list[tuple[float, float, dict[str, float], float]]:  # fmt: skip
    """`count` generations under `mode`, scored by the clean reference: (worst token,
    typicality, {control: log-likelihood ratio of its model to the clean one} for `ratios`,
    mean surprisal)."""
    torch = candidate.torch
    generator = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    prompts = builtin_prompts()
    rows: list[tuple[float, float, dict[str, float], float]] = []
    index = 0
    while len(rows) < count:
        ids = reference._tokenizer(prompts[(seed + index) % len(prompts)].text).input_ids
        index += 1
        generated = [g for g in candidate.sample(ids, top_p, mode, generator, BATCH[0]) if g]
        if mode is not None and mode.startswith("late-"):  # only those the control changed
            generated = [g for g in generated if len(g) > LATE]
        if not generated:
            continue
        scored = reference._forward([([*ids, *g], len(ids)) for g in generated])
        clean = candidate.logprobs(ids, generated, None) if ratios else []
        ratio = {r: candidate.logprobs(ids, generated, r) for r in ratios}
        for i, tokens_scored in enumerate(scored):
            llr = {r: ratio[r][i] - clean[i] for r in ratios}
            rows.append((max_surprisal(tokens_scored), typical_surprisal(tokens_scored) or 0.0,
                         llr, mean_surprisal(tokens_scored)))  # fmt: skip
    return rows[:count]


SHARE, UNIT_REPS, UNIT_SIZE = 0.1, [1000], [2000]
"""Unit level: scored generations per unit, the share a control changes, units per row."""


def unit_verdicts(clean: list[Any], corrupted: list[Any] | None, calibration: int, seed: int
                  ) -> tuple[float, float]:  # fmt: skip
    """Shares of units judged SHIFTED by soakgate's unit-level verdict (`stats.shift`, as
    `report` applies it) on the typicality and on the mean surprisal. Each unit: a calibration of
    `calibration` samples and a unit of UNIT_SIZE scored generations, drawn without replacement from
    the clean pool (calibration + holdout, so each unit's calibration is a fresh draw too), the
    unit's rows replaced by the control's on 1 in 10 (Bernoulli) when `corrupted` is given.
    Rows are reused across units (finite pools): the Monte Carlo error printed is that of the
    units, not of the pools."""
    import numpy as np

    rng = np.random.default_rng(seed)
    pool = np.array([(w, t, m) for w, t, _, m in clean])
    bad = None if corrupted is None else np.array([(w, t, m) for w, t, _, m in corrupted])
    found = [0, 0]
    for _ in range(UNIT_REPS[0]):
        order = rng.permutation(len(pool))
        cal, unit = (
            pool[order[:calibration]],
            pool[order[calibration : calibration + UNIT_SIZE[0]]].copy(),
        )
        if bad is not None:
            hit = np.flatnonzero(rng.random(UNIT_SIZE[0]) < SHARE)
            unit[hit] = bad[rng.choice(len(bad), len(hit), replace=len(hit) > len(bad))]
        made = calibrate(list(cal[:, 0]), RATE[0], list(cal[:, 2]), list(cal[:, 1]))
        for i, (column, quantiles) in enumerate(((1, made.typical_quantiles),
                                                 (2, made.mean_quantiles))):  # fmt: skip
            verdict = score_shift(unit[:, column], quantiles["p90"], calibration).verdict
            found[i] += verdict == SHIFTED
    return found[0] / UNIT_REPS[0], found[1] / UNIT_REPS[0]


def _unit_share(share: float) -> str:
    import math

    error = math.sqrt(max(share * (1 - share), 1 / UNIT_REPS[0]) / UNIT_REPS[0])
    return f"{100 * share:5.1f} ± {100 * error:3.1f}%"


def _share(hits: int, n: int) -> str:
    low, high = clopper_pearson(hits, n, 0.95)
    return f"{100 * hits / n:5.1f}% [{100 * low:4.1f}, {100 * high:5.1f}]"


def time_calibration(reference: HFReference, count: int) -> None:
    sampled, scored, _ = timed(reference, count, SPEC)
    per = (sampled + scored) / count
    print(f"calibration sampler (HFReference, batch {reference.batch_size}, temperature "
          f"{TEMPERATURE}, {SPEC.max_tokens} tokens): {count} samples drawn in {sampled:.1f} s and "
          f"scored in {scored:.1f} s = {1 / per:.2f} samples/s; 5,000 samples would take "
          f"{5000 * per / 60:.1f} min")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calibration", type=int, default=5000)
    parser.add_argument("--holdout", type=int, default=2000)
    parser.add_argument("--generations", type=int, default=500)
    parser.add_argument("--top-p", type=float, nargs="+", default=[1.0, 0.95])
    parser.add_argument("--controls", nargs="+", default=list(CONTROLS), choices=CONTROLS)
    parser.add_argument("--time-calibration", type=int, default=0)
    parser.add_argument("--unit-reps", type=int, default=1000, help="units per row (0: none)")
    parser.add_argument("--unit-size", type=int, default=2000, help="scored generations per unit")
    parser.add_argument("--model", type=Path, default=MODEL)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rate", type=float, default=0.001, help="false-flag rate")
    parser.add_argument("--max-tokens", type=int, default=SPEC.max_tokens)
    parser.add_argument(
        "--device", default="cpu", help="torch device (cuda: the same code on a GPU)"
    )
    args = parser.parse_args()
    BATCH[0], RATE[0], TOKENS[0] = args.batch, args.rate, args.max_tokens
    UNIT_REPS[0], UNIT_SIZE[0] = args.unit_reps, args.unit_size
    reference = HFReference(args.model)
    reference.threads = reference.calibration_threads  # nothing else runs: every core
    reference._load()
    if args.device != "cpu":
        import torch

        torch.set_default_device(args.device)
        reference._model.to(args.device)
    print(f"device {args.device}, {args.batch} samples per prompt and pass")
    if args.time_calibration:
        time_calibration(reference, args.time_calibration)
    candidate = Candidate(reference)
    for top_p in args.top_p:
        began = time.perf_counter()
        exact = top_p >= 1.0
        cal = draw(candidate, reference, args.calibration, top_p, None, 1)
        made = calibrate([r[0] for r in cal], RATE[0], (), [r[1] for r in cal])
        alone = calibrate([r[0] for r in cal], RATE[0]).threshold
        assert made.typical_threshold is not None

        def flags(row: tuple[float, float, Any, float], made: Any = made, alone: float = alone
                  ) -> tuple[bool, bool, bool]:  # fmt: skip
            worst, typical = row[0], row[1]
            return (worst > made.threshold or typical > made.typical_threshold,
                    worst > alone, typical > made.typical_threshold)  # fmt: skip

        print(f"\ntop_p {top_p} ({time.perf_counter() - began:.0f} s): calibration "
              f"{args.calibration} clean samples, rate {RATE[0]}: "
              f"worst-token threshold {made.threshold:.3f} nats (alone: {alone:.3f}), "
              f"typicality threshold {made.typical_threshold:.4f} nats; {made.flagged} "
              "calibration samples flagged by either")  # fmt: skip
        header = "shipped (either)          worst token alone         typicality alone"
        print(f"  {'generations':<14} {header}         likelihood ratio (knows the control)")
        # the Neyman-Pearson test of each control: its LLR calibrated on clean samples
        ratios = tuple(c for c in args.controls if exact and c != "one-token")
        cuts: dict[str, float] = {}
        if ratios:
            clean = draw(candidate, reference, args.calibration, top_p, None, 3, ratios)
            cuts = {r: calibrate([c[2][r] for c in clean], RATE[0]).threshold for r in ratios}
        work = [("clean holdout", None, args.holdout, 2)]
        work += [(c, c, args.generations, 10 + i) for i, c in enumerate(args.controls)]
        drawn: dict[str, list[Any]] = {}
        for name, mode, count, seed in work:
            mine = (name,) if name in ratios else ()
            rows = drawn[name] = draw(candidate, reference, count, top_p, mode, seed, mine)
            hits = [sum(flags(r)[i] for r in rows) for i in range(3)]
            line = "   ".join(_share(h, len(rows)) for h in hits)
            if name in cuts:
                line += "   " + _share(sum(r[2][name] > cuts[name] for r in rows), len(rows))
            print(f"  {name:<14} {line}", flush=True)
        if args.unit_reps:
            pool = [*cal, *drawn["clean holdout"]]
            print(f"  unit level: {UNIT_REPS[0]} units of {UNIT_SIZE[0]:,} scored generations, the "
                  f"control on 1 in {round(1 / SHARE)}, each against a fresh calibration of "
                  f"{args.calibration:,} (stats.shift, one-sided 5%)")  # fmt: skip
            print(f"  {'units':<14} {'SHIFTED by typicality':<22} SHIFTED by mean surprisal")
            for index, (name, mode, _, _) in enumerate(work):
                shares = unit_verdicts(pool, None if mode is None else drawn[name],
                                       args.calibration, 50 + index)  # fmt: skip
                print(f"  {name:<14} {_unit_share(shares[0]):<22} {_unit_share(shares[1])}",
                      flush=True)  # fmt: skip
        print(f"  ({time.perf_counter() - began:.0f} s)")


if __name__ == "__main__":
    main()
