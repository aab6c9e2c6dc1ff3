"""Bench (issue 28): the per-generation flag of reference scoring before and after the soak z,
on the real model's tokens written by `bench_reference_tokens.py`.

For each `top_p` whose files are in DIR it builds soakgate's own `TokenScore`s from the stored
values (float16: the figures can differ from an exact run in the last rank of a threshold),
calibrates with soakgate's own `calibrate` at the default rate on the 5,000 clean calibration
samples, and flags every clean holdout and corrupted generation with soakgate's own `evidence`:

- `before`: the worst token and the typicality calibrated together (the rule shipped until the
  soak z; `whole_score` `typical_surprisal`);
- `after`: the worst token and the soak z calibrated together (`soak.soak_z`, the rule shipped);
- `candidate` (2026-12-07, shipped since): beside those two, the generation's worst
  *standardized* token under the sampling distribution, max over tokens of (s - m) / sqrt(w)
  (`score.token_z`), the three calibrated together by one common rank (`calibrate`: (E(k) + 3)
  / (n + 1) <= the rate), where the soak samples with a nucleus; without one it is the rule
  before (a position's variance can be tiny while a legitimate token sits far down a long tail,
  and the worst token already judges those). Written after issue 28's third held-out set was
  read (where it added 8-17 points with a nucleus and cost 1-6 without one) and frozen, in this
  bench's own code, before the fourth set's tokens were drawn (commit 1954c5a); then moved into
  soakgate with the same figures.

- `normal` (2026-12-08, not shipped): beside the candidate's scores, the generation's *normal
  score z* under the sampling distribution, sum over tokens of nz / sqrt(sum of nv)
  (`bench_reference_tokens.normal_scores`: each token's probability-integral transform, the
  tokens laid out from most to least likely, through the normal quantile; mean 0 and variance nv
  exactly at every position under the reference). Unlike the soak z, a token far down a long tail
  weighs a few standard deviations (~5 for a slice of mass 1e-6 at the end) and a near-certain
  position nothing, so it is judged with and without a nucleus. All the scores calibrated
  together by one common rank ((E(k) + 4) / (n + 1) <= the rate with a nucleus, + 3 without).
  Written with issue 28's fifth held-out set and committed before any normal score was drawn;
  its first run (BENCHMARKS.md section 17): +0 to +1.5 points with a nucleus, 0 to -5.3
  without, on every set. A measured dead end, kept so that the figures can be printed again.

Where the files hold them (`--ratios`, top_p 1.0), a held-out control's row also shows what its
likelihood ratio flags, calibrated at the same rate on the clean calibration samples: the
Neyman-Pearson test that knows the corruption, the ceiling for any score. Controls in
`tuning-*` files are those the soak z was designed on; those in `heldout-*` files
were kept apart until the score was frozen (BENCHMARKS.md section 17 has their first run).
Clopper-Pearson 95% intervals. With `--unit-reps N` (default 200) it also builds units as
`bench_reference_typical.py` does (2,000 scored generations, the control on 1 in 10, each
against a fresh calibration of 5,000 from the clean pool) and prints the share judged SHIFTED by
the unit-level verdict `report` applies (`stats.shift`, on the typicality and, beside it, on the
mean surprisal), with its Monte Carlo error. Last, the client's CPU per scored generation to parse a
reference's answer (88 scored tokens, 20 alternatives each, as vLLM returns them) with and
without the soak values.

Run: python bench/bench_reference_soak.py DIR
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "bench"))

from soakgate.reference.calibrate import Calibration, calibrate  # noqa: E402
from soakgate.reference.score import (  # noqa: E402
    TokenScore,
    evidence,
    max_surprisal,
    token_z,
    typical_surprisal,
    whole_z,
)
from soakgate.stats.rates import clopper_pearson  # noqa: E402

RATE = [0.001]
HELD_OUT_SETS = (("heldout", "held out"), ("heldout2", "held out 2"), ("heldout3", "held out 3"),
                 ("heldout4", "held out 4"), ("heldout5", "held out 5"))  # fmt: skip
"""(file stem, row label) of each held-out set `bench_reference_tokens.py` writes."""


NORMAL: dict[str, Any] = {}
"""group -> each generation's normal score z, where the files hold `nz` and `nv`."""
LLR: dict[str, dict[str, Any]] = {}
"""group -> control -> each generation's log-likelihood ratio of the control's model to the clean
one, where `bench_reference_tokens.py --ratios` stored them."""


def load(stem: Path) -> dict[str, list[list[TokenScore]]]:
    """Each group's generations as soakgate's TokenScores (likelihood ratios into LLR)."""
    import numpy as np

    arrays: dict[str, dict[str, Any]] = {}
    for part in ("ref", "soak"):
        with np.load(f"{stem}-{part}.npz") as data:
            for key in data.files:
                name, field = key.split("/")
                if field.startswith("llr-"):
                    LLR.setdefault(name, {})[field[4:]] = data[key].astype(np.float64)
                    continue
                arrays.setdefault(name, {})[field] = data[key].astype(np.float64)
    groups = {}
    for name, fields in arrays.items():
        offsets = fields["offsets"].astype(int)
        if "nz" in fields:
            starts = offsets[:-1]
            spread = np.sqrt(np.maximum(np.add.reduceat(fields["nv"], starts), 1e-6))
            NORMAL[name] = np.add.reduceat(fields["nz"], starts) / spread
        lp, h, ls, m, w = (fields[f].tolist() for f in ("lp", "h", "ls", "m", "w"))
        groups[name] = [
            [TokenScore(i - a, None, lp[i], None, "", h[i], (-ls[i], m[i], w[i]))
             for i in range(a, b)]
            for a, b in itertools.pairwise(offsets)
        ]  # fmt: skip
    return groups


def _share(hits: int, n: int) -> str:
    low, high = clopper_pearson(hits, n, 0.95)
    return f"{100 * hits / n:5.1f}% [{100 * low:4.1f}, {100 * high:5.1f}]"


def flagged(rows: list[list[TokenScore]], made: Calibration) -> int:
    return sum(
        evidence(tokens, made.threshold, "token_ids", made.typical_threshold,
                 whole_score=made.whole_score, token_z_threshold=made.token_z_threshold)[1]
        for tokens in rows
    )  # fmt: skip


def normal_rule(scores: list[list[float]]) -> list[float] | None:
    """The `normal` column's thresholds from the calibration's scores (worst token, soak z,
    [token z,] normal z): each score's order statistic at one common rank, or None."""
    from soakgate.reference.calibrate import joint_rank

    found = joint_rank(scores[0], scores[1], RATE[0], *scores[2:])
    if found is None:
        return None
    rank = found[0]
    return [sorted(column)[rank - 1] for column in scores]


def normal_scores(
    rows: list[list[TokenScore]], name: str, nucleus: bool
) -> list[list[float]] | None:
    """Per score of the `normal` column, each generation's value (None: no normal score)."""
    if name not in NORMAL:
        return None
    columns = [[max_surprisal(t) for t in rows], [whole_z(t) or 0.0 for t in rows]]
    if nucleus:
        columns.append([token_z(t) or 0.0 for t in rows])
    columns.append([float(z) for z in NORMAL[name]])
    return columns


def normal_flagged(rows: list[list[TokenScore]], name: str, nucleus: bool,
                   cuts: list[float] | None) -> int | None:  # fmt: skip
    """Generations the `normal` column flags (None: no normal score)."""
    columns = normal_scores(rows, name, nucleus)
    if columns is None or cuts is None:
        return None
    hits = [
        any(v > cut for v, cut in zip(values, cuts, strict=True))
        for values in zip(*columns, strict=True)
    ]
    return sum(hits)


def parse_cost(rounds: int = 200) -> None:
    """CPU per generation of `http.parse_prompt_logprobs` with and without the soak values."""
    import math
    import random
    import time

    from soakgate.reference.http import parse_prompt_logprobs
    from soakgate.reference.soak import Sampling

    rng = random.Random(1)
    ids = list(range(1, 130))
    entries: list[Any] = [None]
    for token in ids[1:]:
        top = sorted((math.log(rng.random() * 0.3 + 1e-6) for _ in range(20)), reverse=True)
        entry = {str(1000 + k): {"logprob": lp, "rank": k + 1, "decoded_token": "x"}
                 for k, lp in enumerate(top)}  # fmt: skip
        entry[str(token)] = {"logprob": -3.0, "rank": 30, "decoded_token": "y"}
        entries.append(entry)
    body = {"choices": [{"prompt_logprobs": entries}]}
    cost = {}
    for sampling in (None, Sampling(0.8, 0.95)):
        began = time.process_time()
        for _ in range(rounds):
            parse_prompt_logprobs(body, ids, 41, sampling)
        cost[sampling is not None] = (time.process_time() - began) / rounds * 1e6
    print(f"client CPU to parse a reference's answer (88 scored tokens, 20 alternatives): "
          f"{cost[False]:,.0f} us per generation without the soak values, {cost[True]:,.0f} us "
          "with them")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("dir", type=Path, help="bench_reference_tokens.py's --out")
    parser.add_argument("--rate", type=float, default=RATE[0], help="false-flag rate")
    parser.add_argument("--unit-reps", type=int, default=200, help="units per row (0: none)")
    parser.add_argument("--unit-size", type=int, default=2000, help="scored generations per unit")
    parser.add_argument(
        "--groups", help="only these kinds of row (e.g. 'held out 3'), beside the clean holdout"
    )
    args = parser.parse_args()
    RATE[0] = args.rate
    stems = sorted(args.dir.glob("tuning-p*-ref.npz"), reverse=True)
    if not stems:
        raise SystemExit(f"no tuning-p*-ref.npz in {args.dir}: run bench_reference_tokens.py")
    for ref in stems:
        top_p = ref.name[len("tuning-p") : -len("-ref.npz")]
        LLR.clear()
        NORMAL.clear()
        groups = load(args.dir / f"tuning-p{top_p}")
        calibration = groups.pop("calibration")
        worst = [max_surprisal(t) for t in calibration]
        typicals = [typical_surprisal(t) for t in calibration]
        zs = [whole_z(t) for t in calibration]
        before = calibrate(worst, RATE[0], (), typicals)
        after = calibrate(worst, RATE[0], (), typicals, zs)
        nucleus = float(top_p) < 1.0  # the worst standardized token is judged under one
        token_zs = [token_z(t) for t in calibration] if nucleus else []
        shipped = calibrate(worst, RATE[0], (), typicals, zs, token_zs)
        cuts = [shipped.threshold, shipped.typical_threshold, shipped.token_z_threshold]
        print(f"top_p {top_p}: calibration {len(calibration):,} clean samples, rate {RATE[0]}; "
              f"before: worst token > {before.threshold:.3f} or typicality > "
              f"{before.typical_threshold:.4f}; after: worst token > {after.threshold:.3f} or "
              f"soak z > {after.typical_threshold:.3f}; candidate: worst token > {cuts[0]:.3f}, "
              f"soak z > {cuts[1]:.3f} or token z > {cuts[2] or math.inf:.3f}")  # fmt: skip
        normal_cuts = None
        if "calibration" in NORMAL:  # the calibration's scores as `normal_scores` lists them
            extra = [[z or 0.0 for z in token_zs]] if nucleus else []
            normal_cuts = normal_rule([worst, [z or 0.0 for z in zs], *extra,
                                       [float(z) for z in NORMAL["calibration"]]])  # fmt: skip
        if normal_cuts is None and "calibration" in NORMAL:
            print(f"  normal: no common rank holds the rate with {len(calibration):,} samples")
        if normal_cuts is not None:
            print(f"  normal: thresholds {', '.join(f'{c:.3f}' for c in normal_cuts)} (worst "
                  f"token, soak z, {'token z, ' if nucleus else ''}normal z)")  # fmt: skip
        header = (f"{'before (worst + typicality)':<29} {'after (worst + soak z)':<29} "
                  f"{'candidate (+ token z)':<29} normal (+ normal z)")  # fmt: skip
        print(f"  {'generations':<16} {'':<9} {header}")
        rows = [("tuning", "clean holdout" if n == "holdout" else n, g) for n, g in groups.items()]
        for stem, kind in HELD_OUT_SETS:
            held = args.dir / f"{stem}-p{top_p}"
            if Path(f"{held}-ref.npz").is_file():
                rows += [(kind, n, g) for n, g in load(held).items()]
        if args.groups:
            kinds = {k.strip() for k in args.groups.split(",")}
            rows = [r for r in rows if r[0] in kinds or r[1] == "clean holdout"]
        for kind, name, generations in rows:
            n = len(generations)
            line = (f"  {name:<16} {kind:<10} {_share(flagged(generations, before), n):<29} "
                    f"{_share(flagged(generations, after), n):<29} "
                    f"{_share(flagged(generations, shipped), n):<29} ")  # fmt: skip
            group = "holdout" if name == "clean holdout" else name
            normal = normal_flagged(generations, group, nucleus, normal_cuts)
            line += "" if normal is None else _share(normal, n)
            ceiling = LLR.get("calibration", {}).get(name)
            if ceiling is not None and name in LLR.get(name, {}):
                cut = calibrate(list(ceiling), RATE[0]).threshold
                line += f"   {_share(int((LLR[name][name] > cut).sum()), n)} likelihood ratio"
            print(line, flush=True)
        if args.unit_reps:
            units(calibration, rows, args.unit_reps, args.unit_size)
    parse_cost()


def units(calibration: list[list[TokenScore]], rows: list[tuple[str, str, Any]], reps: int,
          size: int) -> None:  # fmt: skip
    """The unit-level verdict per control: `reps` units of `size` scored generations, each
    against a fresh calibration of up to 5,000 drawn without replacement from the clean pool
    (calibration + holdout), the unit's rows replaced by the control's on 1 in 10 (Bernoulli).
    Columns: the verdict `report` applies (`report.reference._shift`: the soak z, its share
    above the calibration's 90th percentile and its mean, each at half the level), and the share
    test alone on the typicality and on the mean surprisal (the verdicts shipped before)."""
    import numpy as np

    from soakgate.reference.score import mean_surprisal
    from soakgate.stats.shift import SHIFTED, score_shift, score_shift_z

    def summary(generations: list[list[TokenScore]]) -> Any:
        return np.array([(max_surprisal(t), typical_surprisal(t) or 0.0, mean_surprisal(t),
                          whole_z(t) or 0.0) for t in generations])  # fmt: skip

    holdout = next(g for _, n, g in rows if n == "clean holdout")
    pool = np.concatenate([summary(calibration), summary(holdout)])
    cal = min(5000, len(pool) - size)
    print(f"  unit level: {reps} units of {size:,} scored generations, the control on 1 in 10, "
          f"each against a fresh calibration of {cal:,} (level 5%)")  # fmt: skip
    print(f"  {'units':<16} {'':<10} {'SHIFTED: soak z (shipped)':<27} {'typicality share':<18} "
          "mean surprisal share")  # fmt: skip
    for index, (kind, name, generations) in enumerate(rows):
        rng = np.random.default_rng(50 + index)
        bad = None if name == "clean holdout" else summary(generations)
        found = [0, 0, 0]
        for _ in range(reps):
            order = rng.permutation(len(pool))
            sample, unit = pool[order[:cal]], pool[order[cal : cal + size]].copy()
            if bad is not None:
                hit = np.flatnonzero(rng.random(size) < 0.1)
                unit[hit] = bad[rng.choice(len(bad), len(hit), replace=len(hit) > len(bad))]
            made = calibrate(list(sample[:, 0]), RATE[0], list(sample[:, 2]), list(sample[:, 1]),
                             list(sample[:, 3]))  # fmt: skip
            moments = made.soak_z_moments
            verdicts = (
                score_shift_z(unit[:, 3], made.soak_z_quantiles["p90"], cal, moments["mean"],
                              moments["variance"]),
                score_shift(unit[:, 1], made.typical_quantiles["p90"], cal),
                score_shift(unit[:, 2], made.mean_quantiles["p90"], cal),
            )  # fmt: skip
            for i, verdict in enumerate(verdicts):
                found[i] += verdict.verdict == SHIFTED
        shares = [f / reps for f in found]
        errors = [(max(x * (1 - x), 1 / reps) / reps) ** 0.5 for x in shares]
        cells = [f"{100 * x:5.1f} ± {100 * e:3.1f}%" for x, e in zip(shares, errors, strict=True)]
        print(f"  {name:<16} {kind:<10} {cells[0]:<27} {cells[1]:<18} {cells[2]}", flush=True)


if __name__ == "__main__":
    main()
