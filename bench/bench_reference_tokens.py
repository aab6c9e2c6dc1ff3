"""Bench (issue 28): every scored token of clean and corrupted generations of the shared real
model, written to a file, so that per-generation scores can be designed on some controls and
measured once on controls they were not designed on.

The generations are those of `bench_reference_typical.py` (the same sampler, prompts and
controls), plus three controls that are kept apart for a held-out measurement (`--held-out`
writes them to their own file):

- `wrong-norm`: layer 1's post-attention RMSNorm weight × 1.3 (a norm kernel with a wrong
  weight or epsilon), every step;
- `attn-scale`: every layer's query projection × 1.25 (an attention kernel with the wrong
  softmax scale), every step;
- `fp8-act`: every layer's MLP output rounded to float8 e4m3 (an activation-quantised kernel),
  every step.

A second held-out set (`--held-out-2`, its own file `heldout2-*`) was added with issue 28's unit
verdict on the soak z and kept apart until that code was frozen:

- `lost-head`: the first attention head's output of every layer dropped (zero into `o_proj`: a
  kernel that skips part of the attention), every step;
- `kv-int4`: every layer's key and value projections rounded to 4 bits per row (a KV-cache
  quantisation kernel), every step;
- `logit-sharp`: the final logits x 1.2 (a sampler or fused-head kernel with the wrong scale:
  sharper, not flatter), every step;
- `resid-noise`: every layer's output plus Gaussian noise of 5% of its RMS (a race reading
  half-written memory), every step. Its likelihood ratio is that of one draw of the noise.

A third held-out set (`--held-out-3`, file `heldout3-*`), written after the two-sided unit
verdict was frozen and run once (2026-12-07), of kinds none of the others is:

- `rope-gap`: every generated token's rotary position 4 past where it is (prompt positions
  right): a position bug between prefill and decode, every step;
- `swapped-heads`: in layer 3 the first two attention heads' outputs swapped before `o_proj`
  (a fused kernel's head layout wrong in one layer), every step;
- `hardswish`: every layer's MLP activation computed as hard-swish instead of SiLU (a kernel with
  a cheaper approximation), every step;
- `flaky-attn`: layer 3's attention output lost on a random quarter of the forward passes (a
  kernel dropped intermittently, as the compiled graph of the issue did); no likelihood ratio.

A fifth held-out set (`--held-out-5`, file `heldout5-*`), written together with a fourth
per-generation score (`nz`, `nv` below; `bench_reference_soak.py`'s `normal` column), both
committed before any of their values were drawn:

- `embed-int4`: every embedding row rounded to 4 bits (a quantized embedding table), every step;
- `vocab-bias`: a fixed random sixteenth of the vocabulary's logits lowered by 1.0 (a bias or
  lm_head row loaded wrong for part of the vocabulary), every step;
- `norm-ripple`: every layer's input RMSNorm output times (1 + 0.2 sin(channel)) (a norm weight
  read with the wrong stride), every step;
- `q-scale-late`: every layer's queries x 1.15 from the answer's 33rd token on (a kernel whose
  attention scale goes wrong past a length), only late.

A fourth held-out set (`--held-out-4`, file `heldout4-*`), written after the third set's run,
together with a candidate per-generation rule (`bench_reference_soak.py`'s third column), both
committed before its tokens were drawn:

- `stale-kv`: on every fourth step of the answer, the last layer's newest value is the previous
  token's (a cache write that sometimes lands one step late);
- `mlp-half`: layer 4's MLP loses the last quarter of its intermediate channels (a kernel that
  covers three of its four tiles), every step;
- `softcap`: the final logits soft-capped, 20 tanh(logits / 20) (a capping applied where the
  model has none), every step;
- `repeat-penalty`: a repetition penalty of 1.1 on every token already in the prompt or the
  answer (a sampler default the server should not apply); no likelihood ratio.

Each generation is scored teacher-forced under the clean model; per generated token the file
holds, under the reference at temperature 1 (what soakgate's in-process reference computes):
its log-probability `lp`, the entropy `h` and the varentropy `v` (variance of the surprisal)
at that position, and `tail`, the probability of a token less likely than it; and as the soak's
sampling distribution sees it (temperature 0.8, the nucleus; `soakgate.reference.soak`, the
shipped computation): `ls` (minus the tempered surprisal), `m` and `w` (its mean and variance
under the sampling distribution), and `lq`, the token's log-probability under the sampling
distribution itself (minus infinity outside the nucleus, stored as -60); `nz`, the token's
expected normal score under the sampling distribution (its probability-integral transform, the
tokens laid out from most to least likely, mapped through the normal quantile and averaged over
the token's own slice), and `nv`, that score's variance at the position (`normal_scores`).
Arrays are flat float16 over tokens with `offsets` per generation, one group per name.

Run: python bench/bench_reference_tokens.py --device cuda --batch 128 --out DIR
     [--calibration 5000 --holdout 3000 --generations 600 --top-p 1.0 0.95]
Needs torch and transformers.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import bench_reference_typical as typical  # noqa: E402
import benchlib  # noqa: E402

from soakgate.prompts import builtin_prompts  # noqa: E402
from soakgate.reference.hf import HFReference  # noqa: E402
from soakgate.reference.soak import Sampling, soak_stats_torch  # noqa: E402

HELD_OUT = ("wrong-norm", "attn-scale", "fp8-act")
HELD_OUT_2 = ("lost-head", "kv-int4", "logit-sharp", "resid-noise")
HELD_OUT_3 = ("rope-gap", "swapped-heads", "hardswish", "flaky-attn")
HELD_OUT_4 = ("stale-kv", "mlp-half", "softcap", "repeat-penalty")
NO_RATIO = ("flaky-attn", "repeat-penalty")
SOFTCAP = 20.0
STALE_LAYER, STALE_EVERY = 5, 4
PENALTY = 1.1
"""Controls whose likelihood ratio is that of one random draw: not computed."""
ROPE_GAP = 4
FLAKY_SHARE = 0.25
HELD_OUT_5 = ("embed-int4", "vocab-bias", "norm-ripple", "q-scale-late")
EMBED_BITS_MAX = 7.0
VOCAB_SHARE, VOCAB_BIAS = 16, 1.0
RIPPLE = 0.2
LATE_Q, LATE_Q_FROM = 1.15, 32
FIELDS = ("lp", "h", "v", "tail", "ls", "m", "w", "lq", "nz", "nv")
FLOOR = -60.0
"""Log-probabilities below this (a token outside the nucleus: minus infinity) are stored as this."""


class Candidate(typical.Candidate):
    """`bench_reference_typical`'s candidate with the held-out controls' hooks."""

    def __init__(self, reference: HFReference) -> None:
        super().__init__(reference)
        torch = self.torch
        layers = self.model.model.layers
        norm = layers[1].post_attention_layernorm
        norm.register_forward_hook(self._hook("wrong-norm", lambda out: out * 1.3))
        for layer in layers:
            layer.self_attn.q_proj.register_forward_hook(
                self._hook("attn-scale", lambda out: out * 1.25)
            )
            layer.mlp.register_forward_hook(
                self._hook("fp8-act", lambda out: out.to(torch.float8_e4m3fn).to(out.dtype))
            )
        config = self.model.config
        heads = config.num_attention_heads
        width = getattr(config, "head_dim", None) or config.hidden_size // heads

        def drop_head(module: Any, args: Any) -> Any:
            if self.mode != "lost-head":
                return None
            first = args[0]
            return (torch.cat([first[..., :width] * 0.0, first[..., width:]], -1), *args[1:])

        def int4(out: Any) -> Any:
            scale = out.abs().amax(-1, keepdim=True).clamp_min(1e-8) / 7.0
            return (out / scale).round().clamp(-8, 7) * scale

        def noise(out: Any) -> Any:
            return out + 0.05 * out.pow(2).mean(-1, keepdim=True).sqrt() * torch.randn_like(out)

        for layer in layers:
            layer.self_attn.o_proj.register_forward_pre_hook(drop_head)
            layer.self_attn.k_proj.register_forward_hook(self._hook("kv-int4", int4))
            layer.self_attn.v_proj.register_forward_hook(self._hook("kv-int4", int4))
            layer.register_forward_hook(self._hook("resid-noise", noise))
        self.model.lm_head.register_forward_hook(self._hook("logit-sharp", lambda out: out * 1.2))
        self._third_set(layers, width)

    @property
    def prompt_length(self) -> int:
        """Tokens of the current prompt (the candidate's late controls start `LATE` past it)."""
        return int(self.from_position - typical.LATE)

    def _third_set(self, layers: Any, width: int) -> None:
        """The hooks of `HELD_OUT_3`."""
        torch = self.torch
        functional = torch.nn.functional

        def rope_gap(module: Any, args: Any, kwargs: Any) -> Any:
            if self.mode != "rope-gap":
                return None
            prompt = self.prompt_length
            if "position_ids" in kwargs:
                ids = kwargs["position_ids"]
                kwargs = {**kwargs, "position_ids": ids + ROPE_GAP * (ids >= prompt)}
            else:
                ids = args[1]
                args = (args[0], ids + ROPE_GAP * (ids >= prompt), *args[2:])
            return args, kwargs

        self.model.model.rotary_emb.register_forward_pre_hook(rope_gap, with_kwargs=True)

        def swap_heads(module: Any, args: Any) -> Any:
            if self.mode != "swapped-heads":
                return None
            first = args[0]
            heads = (first[..., width : 2 * width], first[..., :width], first[..., 2 * width :])
            return (torch.cat(heads, -1), *args[1:])

        layers[3].self_attn.o_proj.register_forward_pre_hook(swap_heads)

        def hardswish(module: Any, inputs: Any, out: Any) -> Any:
            return functional.hardswish(inputs[0]) if self.mode == "hardswish" else out

        for layer in layers:
            layer.mlp.act_fn.register_forward_hook(hardswish)
        self.flaky = torch.Generator(device="cpu").manual_seed(2807)

        def flaky(out: Any) -> Any:
            lost = torch.rand((), generator=self.flaky, device="cpu").item() < FLAKY_SHARE
            return out * 0.0 if lost else out

        layers[3].self_attn.register_forward_hook(self._hook("flaky-attn", flaky))
        self._fourth_set(layers)

    def _fourth_set(self, layers: Any) -> None:
        """The hooks of `HELD_OUT_4`."""
        torch = self.torch
        fresh: dict[int, Any] = {}

        def stale(module: Any, inputs: Any, out: Any) -> Any:
            if self.mode != "stale-kv":
                return None
            prompt = self.prompt_length
            if out.shape[1] == 1:  # a decode step: the cache gets the previous step's projection
                previous = fresh.get(id(module), out)
                fresh[id(module)] = out
                late = (int(self.positions[0]) - prompt) % STALE_EVERY == STALE_EVERY - 1
                return previous if late else None
            fresh[id(module)] = out[:, -1:]
            if out.shape[1] <= prompt:
                return None  # the prefill: the prompt's own values are right
            shifted = out.clone()  # teacher-forced: those positions of the answer hold t - 1's
            late = torch.arange(out.shape[1]) - prompt
            picked = (late >= 0) & (late % STALE_EVERY == STALE_EVERY - 1)
            index = torch.nonzero(picked)[:, 0]
            shifted[:, index] = out[:, index - 1]
            return shifted

        layers[STALE_LAYER].self_attn.v_proj.register_forward_hook(stale)
        self._fifth_set(layers)

        def half(module: Any, args: Any) -> Any:
            if self.mode != "mlp-half":
                return None
            first = args[0]
            cut = first.shape[-1] * 3 // 4
            return (torch.cat([first[..., :cut], first[..., cut:] * 0.0], -1), *args[1:])

        layers[4].mlp.down_proj.register_forward_pre_hook(half)
        self.model.lm_head.register_forward_hook(
            self._hook("softcap", lambda out: SOFTCAP * torch.tanh(out / SOFTCAP))
        )
        seen: list[Any] = [None]

        def record(module: Any, args: Any) -> None:
            if self.mode != "repeat-penalty":
                return
            ids = args[0]
            hits = torch.zeros(ids.shape[0], module.num_embeddings, dtype=torch.bool)
            hits.scatter_(1, ids, True)
            seen[0] = hits if ids.shape[1] > 1 or seen[0] is None else seen[0] | hits

        self.model.model.embed_tokens.register_forward_pre_hook(record)

        def penalty(out: Any) -> Any:
            mask = seen[0][:, None, :]
            return torch.where(mask, torch.where(out > 0, out / PENALTY, out * PENALTY), out)

        self.model.lm_head.register_forward_hook(self._hook("repeat-penalty", penalty))

    def _fifth_set(self, layers: Any) -> None:
        """The hooks of `HELD_OUT_5` (written with the normal-score candidate, before either
        was run)."""
        torch = self.torch

        def embed_int4(out: Any) -> Any:  # each embedding row rounded to 4 bits
            scale = out.abs().amax(-1, keepdim=True).clamp_min(1e-8) / EMBED_BITS_MAX
            return (out / scale).round().clamp(-8, 7) * scale

        self.model.model.embed_tokens.register_forward_hook(self._hook("embed-int4", embed_int4))
        vocab = self.model.lm_head.out_features
        picked = torch.Generator(device="cpu").manual_seed(2808)
        chosen = torch.randperm(vocab, generator=picked, device="cpu")[: vocab // VOCAB_SHARE]
        bias = torch.zeros(vocab, device="cpu")
        bias[chosen] = -VOCAB_BIAS
        bias = bias.to(torch.get_default_device())
        self.model.lm_head.register_forward_hook(
            self._hook("vocab-bias", lambda out: out + bias.to(out.dtype))
        )

        def ripple_for(out: Any) -> Any:
            channels = torch.arange(out.shape[-1], device=out.device, dtype=out.dtype)
            return out * (1.0 + RIPPLE * torch.sin(channels))

        for layer in layers:
            layer.input_layernorm.register_forward_hook(self._hook("norm-ripple", ripple_for))

        def late_q(module: Any, inputs: Any, out: Any) -> Any:
            if self.mode != "q-scale-late":
                return None
            late = self.positions.to(out.device) >= self.prompt_length + LATE_Q_FROM
            return torch.where(late[None, :, None], out * LATE_Q, out)

        for layer in layers:
            layer.self_attn.q_proj.register_forward_hook(late_q)


def _stats(torch: Any, logp: Any, targets: Any) -> list[Any]:
    """(lp, h, v, tail) of each target under the distributions `logp` (rows: positions)."""
    p = logp.exp()
    safe = logp.clamp_min(FLOOR)
    chosen = safe.gather(1, targets[:, None])[:, 0]
    h = -(p * safe).sum(1)
    v = (p * safe * safe).sum(1) - h * h
    tail = (p * (safe < chosen[:, None])).sum(1)
    return [chosen, h, v.clamp_min(0.0), tail]


def normal_scores(torch: Any, q: Any, targets: Any) -> tuple[Any, Any]:
    """(nz, nv) of each target under the sampling distributions `q` (rows: positions): the
    token's expected normal score E[Phi^-1(U) | token], U uniform on the token's slice [a, a +
    q] of the unit interval when tokens are laid out from the most to the least likely (a: the
    mass of the tokens before it), and its variance at that position, sum over tokens of q x
    score^2. Under the sampling distribution a drawn token's score has mean 0 and variance nv
    (exactly), so a generation's sum over its tokens divided by the root of the sum of nv is
    standardized whatever the positions' shapes; an unlikely token scores high (~5 for a slice
    of mass 1e-6 at the end, ~8 for 1e-15), a token at a near-certain position ~0. A token
    outside the nucleus gets the score of the nucleus's least likely token (as the soak z
    judges such a token by its tempered surprisal: a reference whose numbers differ a little
    from the server's finds tokens just past the edge in clean generations)."""
    ordered, index = q.double().sort(-1, descending=True)
    # the integral of Phi^-1 over [a, b] is g(a) - g(b), g = phi(Phi^-1(.)) = g(1 - .): each end
    # taken as the smaller of the mass before and after it, the head's from the front, the tail's
    # from the back (1 - a cumulative sum would lose a tail's small masses); float64 throughout
    front = ordered.cumsum(-1)
    back = ordered.flip(-1).cumsum(-1).flip(-1)  # mass of this token and every unlikelier one
    start = torch.minimum(front - ordered, back)
    end = torch.minimum(front, back - ordered)
    tiny = 1e-300

    def density_at(mass: Any) -> Any:  # g(mass), mass <= 1/2; 0 at an end of the interval
        z = torch.special.ndtri(mass.clamp(tiny, 0.5))  # exact in the tail, where erfinv is not
        return torch.where(mass <= tiny, 0.0, torch.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi))

    score = (density_at(start) - density_at(end)) / ordered.clamp_min(tiny)
    score = torch.where(ordered > 0.0, score, 0.0)
    nv = (ordered * score * score).sum(-1)
    nz = torch.zeros_like(score).scatter(-1, index, score).gather(1, targets[:, None])[:, 0]
    inside = q.gather(1, targets[:, None])[:, 0] > 0.0
    edge = torch.where(ordered > 0.0, score, -math.inf).amax(-1)  # the nucleus's last token's
    return torch.where(inside, nz, edge).float(), nv.float()


def token_stats(candidate: Candidate, prompt_ids: list[int], generated: list[list[int]],
                top_p: float) -> list[list[list[float]]]:  # fmt: skip
    """Per generation, per FIELDS, the values at each generated token under the clean model."""
    torch = candidate.torch
    longest = max(map(len, generated))
    rows = [[*prompt_ids, *g, *[candidate.eos] * (longest - len(g))] for g in generated]
    with torch.no_grad():
        logits = candidate.model(torch.tensor(rows)).logits[:, len(prompt_ids) - 1 : -1].float()
    out = []
    sampling = Sampling(typical.TEMPERATURE, top_p)
    for i, g in enumerate(generated):
        row = logits[i, : len(g)]
        targets = torch.tensor(g)
        plain = _stats(torch, torch.log_softmax(row, -1), targets)
        own, mean, variance = soak_stats_torch(torch, row, targets, sampling)
        sampled = benchlib.nucleus(torch, row, top_p, typical.TEMPERATURE)
        lq = sampled.log().clamp_min(FLOOR).gather(1, targets[:, None])[:, 0]
        nz, nv = normal_scores(torch, sampled, targets)
        out.append([t.tolist() for t in (*plain, -own, mean, variance, lq, nz, nv)])
    return out


Rows = list[list[list[float]]]


def draw(candidate: Candidate, reference: HFReference, count: int, top_p: float,
         mode: str | None, seed: int, ratios: tuple[str, ...] = ()
         ) -> tuple[Rows, dict[str, list[float]]]:  # fmt: skip
    """`count` generations under `mode` (None: clean), each as FIELDS' per-token lists; and for
    each control in `ratios`, each generation's log-likelihood ratio of that control's model to
    the clean one (at the temperature, no nucleus: `bench_reference_typical`'s ceiling)."""
    torch = candidate.torch
    generator = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    prompts = builtin_prompts()
    found: Rows = []
    llr: dict[str, list[float]] = {r: [] for r in ratios}
    index = 0
    while len(found) < count:
        ids = reference._tokenizer(prompts[(seed + index) % len(prompts)].text).input_ids
        index += 1
        batch = typical.BATCH[0]
        generated = [g for g in candidate.sample(ids, top_p, mode, generator, batch) if g]
        if mode is not None and mode.startswith("late-"):
            generated = [g for g in generated if len(g) > typical.LATE]
        if generated:
            found += token_stats(candidate, ids, generated, top_p)
            clean = candidate.logprobs(ids, generated, None) if ratios else []
            for r in ratios:
                changed = candidate.logprobs(ids, generated, r)
                llr[r] += [a - b for a, b in zip(changed, clean, strict=True)]
    return found[:count], {r: v[:count] for r, v in llr.items()}


def save(stem: Path, groups: dict[str, Rows], ratios: dict[str, dict[str, list[float]]]) -> None:
    """Two files per stem (each under the device's 16 MiB): the reference's fields (and the
    likelihood ratios, `NAME/llr-CONTROL`, float32) and the sampling distribution's, float16."""
    import numpy as np

    for part, fields in (("ref", FIELDS[:4]), ("soak", FIELDS[4:])):
        arrays: dict[str, Any] = {}
        for name, rows in groups.items():
            lengths = [len(r[0]) for r in rows]
            arrays[f"{name}/offsets"] = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            for field in fields:
                j = FIELDS.index(field)
                flat = [x for r in rows for x in r[j]]
                arrays[f"{name}/{field}"] = np.asarray(flat, dtype=np.float16)
            if part == "ref":
                for control, values in ratios.get(name, {}).items():
                    arrays[f"{name}/llr-{control}"] = np.asarray(values, dtype=np.float32)
        np.savez_compressed(f"{stem}-{part}.npz", **arrays)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calibration", type=int, default=5000)
    parser.add_argument("--holdout", type=int, default=3000)
    parser.add_argument("--generations", type=int, default=600)
    parser.add_argument("--top-p", type=float, nargs="+", default=[1.0, 0.95])
    parser.add_argument("--model", type=Path, default=typical.MODEL)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=typical.TOKENS[0])
    parser.add_argument("--controls", nargs="+", default=list(typical.CONTROLS),
                        choices=typical.CONTROLS)  # fmt: skip
    parser.add_argument("--held-out", nargs="+", default=list(HELD_OUT), choices=HELD_OUT)
    parser.add_argument("--held-out-2", nargs="*", default=list(HELD_OUT_2), choices=HELD_OUT_2)
    parser.add_argument("--held-out-3", nargs="*", default=list(HELD_OUT_3), choices=HELD_OUT_3)
    parser.add_argument("--held-out-4", nargs="*", default=list(HELD_OUT_4), choices=HELD_OUT_4)
    parser.add_argument("--held-out-5", nargs="*", default=list(HELD_OUT_5), choices=HELD_OUT_5)
    parser.add_argument(
        "--ratios", action="store_true", help="top_p 1.0: held-out controls' likelihood ratios"
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    typical.BATCH[0], typical.TOKENS[0] = args.batch, args.max_tokens
    reference = HFReference(args.model)
    reference.threads = reference.calibration_threads
    reference._load()
    import torch

    torch.manual_seed(0)  # `resid-noise` draws its noise from torch's global generator
    if args.device != "cpu":
        torch.set_default_device(args.device)
        reference._model.to(args.device)
    candidate = Candidate(reference)
    args.out.mkdir(parents=True, exist_ok=True)
    for top_p in args.top_p:
        began = time.perf_counter()
        # the Neyman-Pearson ceiling of each held-out control, without a nucleus (as
        # bench_reference_typical computes it for the others)
        chosen_ratios = (*args.held_out, *args.held_out_2, *args.held_out_3, *args.held_out_4,
                         *args.held_out_5)  # fmt: skip
        ratios = chosen_ratios if args.ratios and top_p >= 1.0 else ()
        ratios = tuple(r for r in ratios if r not in NO_RATIO)
        found: dict[str, dict[str, list[float]]] = {}
        tuning: dict[str, Rows] = {}
        tuning["calibration"], found["calibration"] = draw(
            candidate, reference, args.calibration, top_p, None, 1, ratios
        )
        tuning["holdout"], found["holdout"] = draw(
            candidate, reference, args.holdout, top_p, None, 2, ratios
        )
        for i, control in enumerate(typical.CONTROLS):
            if control in args.controls:
                tuning[control], _ = draw(candidate, reference, args.generations, top_p, control,
                                          10 + i)  # fmt: skip
        sets = (("heldout", HELD_OUT, args.held_out, 40),
                ("heldout2", HELD_OUT_2, args.held_out_2, 60),
                ("heldout3", HELD_OUT_3, args.held_out_3, 80),
                ("heldout4", HELD_OUT_4, args.held_out_4, 100),
                ("heldout5", HELD_OUT_5, args.held_out_5, 120))  # fmt: skip
        held: dict[str, dict[str, Rows]] = {}
        for stem, names, chosen, seed in sets:
            group = held[stem] = {}
            for i, control in enumerate(names):
                if control in chosen:
                    own = (control,) if control in ratios else ()
                    group[control], found[control] = draw(
                        candidate, reference, args.generations, top_p, control, seed + i, own
                    )
        save(args.out / f"tuning-p{top_p}", tuning, found)
        for stem, group in held.items():
            if group or stem == "heldout":  # the first set has at least one control
                save(args.out / f"{stem}-p{top_p}", group, found)
        groups = (*tuning.values(), *(g for group in held.values() for g in group.values()))
        drawn = sum(len(g) for g in groups)
        print(f"top_p {top_p}: {drawn} generations in {time.perf_counter() - began:.0f} s",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
