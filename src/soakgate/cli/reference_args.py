"""`soakgate run`'s reference-scoring flags, and the scorer they build."""

from __future__ import annotations

import argparse
import math
import os
from typing import Any

from soakgate.cli.args import fraction, positive_float, positive_int

MAX_ALTERNATIVES = 1000
"""The most alternatives a position may ask for (a server caps them lower: vLLM's
--max-logprobs; a refused number falls back to none, the worst token alone)."""


def add_reference_arguments(parser: argparse.ArgumentParser) -> None:
    """Add --score-reference, --reference-model and their settings."""
    add = parser.add_argument
    add(
        "--score-reference", metavar="URL",
        help="score every generation under this reference server's prompt log-probabilities "
        "(vLLM, the mock) and flag implausible ones `suspect`",
    )  # fmt: skip
    add(
        "--reference-model", metavar="PATH",
        help="score under a Hugging Face transformers model loaded here (in-process reference)",
    )  # fmt: skip
    add(
        "--reference-alternatives", type=int, metavar="N",
        help="top alternatives asked of --score-reference per position, for the entropy behind "
        "the typicality score (default 20, vLLM's --max-logprobs default; 0: the worst token "
        "alone, at a fraction of the client's and the reference's cost)",
    )  # fmt: skip
    add(
        "--reference-threads", type=positive_int, metavar="N",
        help="torch threads of --reference-model (default: every core but one, at least one)",
    )  # fmt: skip
    add(
        "--reference-batch", type=positive_int, metavar="N",
        help="generations per forward pass of --reference-model, sampling and scoring "
        "(default: 48 calibration samples, 16 scored rows)",
    )  # fmt: skip
    add(
        "--score-fraction", action="append", default=[], metavar="[NAME=]F",
        help="share of generations scored, for all targets or one (repeatable; default 1.0)",
    )  # fmt: skip
    add(
        "--false-flag-rate", type=fraction, default=0.001,
        help="calibrated false-flag rate per scored generation (default 0.001)",
    )  # fmt: skip
    add(
        "--calibration", type=positive_int, default=5000,
        help="reference samples drawn at the soak's settings to set the threshold (default 5000)",
    )  # fmt: skip
    add(
        "--recalibrate", action="store_true",
        help="draw a new calibration even when the database holds one made with identical "
        "settings (reference, its model files, prompts, sampling, sample count, rate)",
    )  # fmt: skip
    add(
        "--score-timeout", type=positive_float, default=30.0,
        help="seconds a row waits for its score before it is stored unscored (default 30)",
    )  # fmt: skip
    add(
        "--score-backlog", type=positive_int,
        help="rows waiting for the reference at most (default 4 x concurrency x targets)",
    )  # fmt: skip


def _fractions(values: list[str]) -> tuple[float, dict[str, float]]:
    """`F` and `NAME=F` items as the default share and the per-target ones."""
    from soakgate.errors import UsageError

    default, per_target = 1.0, {}
    for item in values:
        name, sep, value = item.rpartition("=")
        try:
            share = fraction(value)
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"--score-fraction {item!r}: {exc}") from None
        if sep:
            per_target[name] = share
        else:
            default = share
    return default, per_target


def reference_scorer(args: argparse.Namespace, config: Any) -> Any:
    """The ReferenceScorer the flags ask for (None without --score-reference/--reference-model)."""
    from soakgate.errors import UsageError

    url, model_path = args.score_reference, args.reference_model
    alternatives = args.reference_alternatives
    if alternatives is not None and not 0 <= alternatives <= MAX_ALTERNATIVES:
        raise UsageError(
            f"--reference-alternatives must be between 0 and {MAX_ALTERNATIVES}, got {alternatives}"
        )
    if alternatives is not None and url is None and model_path is not None:
        raise UsageError("--reference-alternatives is for --score-reference: --reference-model "
                         "computes the exact entropy")  # fmt: skip
    for flag in ("reference_threads", "reference_batch"):
        if getattr(args, flag) is not None and model_path is None:
            raise UsageError(f"--{flag.replace('_', '-')} is for --reference-model")
    if url is None and model_path is None:
        for flag in ("score_fraction", "score_backlog", "recalibrate", "reference_alternatives"):
            value = getattr(args, flag)
            if value is not None and value is not False and value != []:
                raise UsageError(f"--{flag.replace('_', '-')} needs --score-reference or "
                                 "--reference-model")  # fmt: skip
        return None
    if url is not None and model_path is not None:
        raise UsageError("give --score-reference URL or --reference-model PATH, not both")
    if not 0 < args.false_flag_rate < 1:
        raise UsageError(f"--false-flag-rate must be between 0 and 1, got {args.false_flag_rate}")
    default, per_target = _fractions(args.score_fraction)
    unknown = set(per_target) - {t.name for t in config.targets}
    if unknown:
        raise UsageError(f"--score-fraction: no target named {', '.join(sorted(unknown))}")
    need = math.ceil(1 / args.false_flag_rate) - 1
    if args.calibration < need:
        raise UsageError(
            f"--calibration {args.calibration} cannot support --false-flag-rate "
            f"{args.false_flag_rate:g}: at least {need} samples are needed"
        )
    from soakgate.reference.scorer import ReferenceScorer, ScoringSettings
    from soakgate.reference.soak import Sampling

    backlog = args.score_backlog or 4 * config.load.concurrency * len(config.targets)
    settings = ScoringSettings(
        fraction=default, per_target=per_target, false_flag_rate=args.false_flag_rate,
        calibration=args.calibration, budget_s=args.score_timeout, backlog=backlog,
        recalibrate=args.recalibrate,
    )  # fmt: skip
    if url is not None:
        from soakgate.reference.http import TOP_ALTERNATIVES, HttpReference
        from soakgate.reference.sampling import ServerSampler
        from soakgate.targets import TargetSpec

        api_key = args.api_key or os.environ.get("SOAKGATE_API_KEY")
        tls = config.targets[0].tls
        spec = TargetSpec.parse(url, api_key, args.model, tls)
        connections = config.load.concurrency * len(config.targets)
        reference = HttpReference(
            spec.url, spec.model, api_key, args.score_timeout, connections,
            TOP_ALTERNATIVES if alternatives is None else alternatives, tls,
        )  # fmt: skip
        reference.sampling = Sampling.of(config.request.temperature, config.request.top_p)
        return ReferenceScorer(reference, settings, ServerSampler(spec))
    from pathlib import Path

    from soakgate.reference.hf import HFReference

    if not (Path(model_path) / "config.json").is_file():  # refused before any load
        raise UsageError(f"--reference-model {model_path}: no config.json (not a model folder)")
    hf = HFReference(model_path, args.reference_batch, args.reference_threads)
    hf.sampling = Sampling.of(config.request.temperature, config.request.top_p)
    return ReferenceScorer(hf, settings, hf)
