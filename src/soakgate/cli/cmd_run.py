"""`soakgate run`: soak one or more targets at fixed concurrency and store every generation."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from soakgate.cli.args import (
    add_tls_arguments,
    check_concurrency,
    duration,
    explicit_options,
    fraction,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    tls_from_args,
    top_p,
    track_explicit,
)
from soakgate.cli.metrics import (
    add_metrics_arguments,
    add_progress_argument,
    finish_metrics,
    start_metrics,
)
from soakgate.cli.reference_args import add_reference_arguments, reference_scorer

STRUCTURE_VIA_CHOICES = ("openai", "llamacpp", "vllm", "guided")
"""`targets.spec.STRUCTURE_VIA`, not imported here: the parser is built at every start-up."""


def register(subparsers: Any) -> None:
    """Add the `run` command."""
    parser = subparsers.add_parser(
        "run", help="soak targets with sustained load, scoring and storing every response"
    )
    add_soak_arguments(parser)
    parser.add_argument(
        "--resume", metavar="RUN_ID",
        help="continue a stored run, with its stored settings (a differing flag is refused)",
    )  # fmt: skip
    parser.add_argument("--plan", type=Path, help="pre-registered plan (soakgate plan --write)")
    parser.add_argument(
        "--until-verdict", action="store_true",
        help="judge the plan's group-sequential looks during the soak; stop at a verdict",
    )  # fmt: skip
    parser.add_argument(
        "--arm", action="append", default=[], metavar="LABEL=URL",
        help="soak two arms side by side: a target whose rows carry LABEL (with --plan)",
    )  # fmt: skip
    parser.add_argument(
        "--reference", action="append", default=[], metavar="[NAME=]URL",
        help="reference server for the differential check (repeat for a second instance)",
    )  # fmt: skip
    parser.add_argument(
        "--reference-fraction", type=fraction, default=0.03,
        help="share of requests sent greedy to target and reference",
    )  # fmt: skip
    add_reference_arguments(parser)
    parser.add_argument(
        "--html", type=Path, metavar="FILE",
        help="write the HTML report of the database here when the soak ends (and, with "
        "--report-every, while it runs)",
    )  # fmt: skip
    parser.add_argument(
        "--report-every", type=duration, metavar="DURATION",
        help="refresh the --html report this often during the soak, e.g. 10m",
    )  # fmt: skip
    add_metrics_arguments(parser)
    add_progress_argument(parser)
    track_explicit(parser)  # --resume refuses explicit settings that differ from the stored run
    parser.set_defaults(func=main)


def add_soak_arguments(parser: argparse.ArgumentParser, levels: bool = False) -> None:
    """Load, request and storage options shared by `run` and `sweep` (`levels`: a list of
    concurrency levels instead of one)."""
    parser.add_argument(
        "--target", action="append", default=[], metavar="[NAME=]URL",
        help="an OpenAI-compatible server (one per GPU); repeat for several",
    )  # fmt: skip
    parser.add_argument("--label", default="default", help="configuration label of this run")
    if levels:  # a sweep is bounded by --requests-per-level: no --requests/--duration here
        parser.add_argument("--concurrency", default="24,48,96,192", help="levels, e.g. 24,48,96")
    else:
        parser.add_argument(
            "--concurrency", type=positive_int, default=8, help="requests in flight per target"
        )
        parser.add_argument("--requests", type=positive_int, help="requests per target")
        parser.add_argument("--duration", type=duration, help="how long to soak, e.g. 30m or 2h")
        parser.add_argument(
            "--rate", type=positive_float, metavar="R",
            help="open loop: R requests per second arrive at each target on a schedule of "
            "their own (--concurrency is then the cap in flight; arrivals over it are counted, "
            "not sent); default: closed loop, a new request as soon as one finishes",
        )  # fmt: skip
        parser.add_argument(
            "--arrivals", choices=("poisson", "constant"),
            help="the arrival process of --rate (default poisson: exponential gaps, seeded)",
        )  # fmt: skip
        parser.add_argument(
            "--ramp", type=duration, metavar="DURATION",
            help="raise the load from nothing to full over this long, e.g. 5m: the arrival "
            "rate of --rate rises linearly; in the closed loop the --concurrency workers of "
            "each target start one after another (a resumed run ramps again)",
        )  # fmt: skip
    parser.add_argument("--db", default="runs.sqlite", help="SQLite file (created if absent)")
    parser.add_argument(
        "--allow-foreign-tables", action="store_true",
        help="write into an SQLite file that also holds other programs' tables",
    )  # fmt: skip
    parser.add_argument(
        "--endpoint", choices=("completions", "chat"), default="completions", help="API endpoint"
    )
    parser.add_argument(
        "--no-stream", dest="stream", action="store_false", help="ask for whole answers, not SSE"
    )
    parser.add_argument(
        "--max-tokens", type=positive_int, default=128, help="tokens to generate per request"
    )
    parser.add_argument(
        "--temperature", type=non_negative_float, default=0.8, help="sampling temperature"
    )
    parser.add_argument(
        "--top-p", type=top_p, help="nucleus sampling, in (0, 1] (none: the server's default)"
    )
    parser.add_argument("--seed", type=int, help="sampling seed sent with every request")
    parser.add_argument("--ignore-eos", action="store_true", help="fixed-length generations")
    parser.add_argument(
        "--logprobs", action="store_true",
        help="ask for logprobs (every answer's are checked: inconsistent)",
    )  # fmt: skip
    parser.add_argument(
        "--top-logprobs", type=positive_int, metavar="K",
        help="with --logprobs: also ask for K alternatives per token (their order, their sum "
        "and the sampled token's place among them are checked)",
    )  # fmt: skip
    parser.add_argument("--token-ids", action="store_true", help="ask for token ids (vLLM)")
    parser.add_argument("--timeout", type=positive_float, default=120.0, help="seconds per request")
    parser.add_argument(
        "--max-response-bytes", type=positive_int, metavar="N",
        help="cap on an answer's body; longer is `oversized` (default 256 KiB + 4 KiB per token)",
    )  # fmt: skip
    parser.add_argument("--model", help="model name (default: the target's first model)")
    parser.add_argument("--api-key", help="bearer token (default: $SOAKGATE_API_KEY); not stored")
    add_tls_arguments(parser)
    parser.add_argument(
        "--prompts", type=Path, metavar="FILE", help="JSONL file of prompts (default: built-in)"
    )
    parser.add_argument(
        "--prompt-order", choices=("round-robin", "random"), default="round-robin",
        help="order in which prompts are sent",
    )  # fmt: skip
    parser.add_argument(
        "--prompt-seed", type=int, default=0,
        help="seed of --prompt-order random (and of --prompt-tokens' lengths)",
    )  # fmt: skip
    parser.add_argument(
        "--prompt-tokens", metavar="DIST",
        help="synthetic prompts instead of a prompt set, with lengths in tokens drawn from DIST: "
        "512, uniform:64,2048, normal:512,128 or lognormal:512,0.5 (seeded by --prompt-seed)",
    )  # fmt: skip
    parser.add_argument(
        "--synthetic-prompts", type=positive_int, metavar="N",
        help="how many synthetic prompts --prompt-tokens makes (default 500)",
    )  # fmt: skip
    parser.add_argument(
        "--tokenizer", metavar="PATH",
        help="the served model's tokenizer.json (or its folder), so --prompt-tokens counts its "
        "tokens exactly; without it lengths are estimated at 3/4 of a word per token",
    )  # fmt: skip
    parser.add_argument(
        "--store-text", choices=("all", "flagged"), default="all",
        help="keep every text, or only flagged/errored ones and 1 in 100 clean ones",
    )  # fmt: skip
    parser.add_argument(
        "--canaries", action="store_true",
        help="end every prompt with its request's canary (a unique, checked marker), so that an "
        "answer carrying another request's is flagged crosstalk; changes what is sent",
    )  # fmt: skip
    parser.add_argument(
        "--no-crosstalk-spans", dest="crosstalk_spans", action="store_false",
        help="do not look for spans of other requests' prompts in the answers",
    )  # fmt: skip
    parser.add_argument(
        "--crosstalk-span", type=positive_int, default=8, metavar="WORDS",
        help="words in a row an answer must share with another request's prompt (and with no "
        "other prompt of the window) to be flagged crosstalk (default 8)",
    )  # fmt: skip
    parser.add_argument(
        "--crosstalk-answers", action="store_true",
        help="also flag an answer sharing 16 words in a row with the answer of another prompt "
        "in flight at the same time (off by default: a model that reproduces memorized text "
        "does that by itself)",
    )  # fmt: skip
    parser.add_argument(
        "--crosstalk-window", type=positive_int, default=1024, metavar="N",
        help="requests sent last whose prompts an answer is checked against (default 1024)",
    )  # fmt: skip
    parser.add_argument(
        "--twin-fraction", type=fraction, default=0.0, metavar="F",
        help="send this share of requests twice, the same body with the same seed, to the same "
        "target: a pair whose answers differ is a twin_mismatch (default 0: off)",
    )  # fmt: skip
    parser.add_argument(
        "--twin-gap", type=non_negative_int, default=0, metavar="N",
        help="the target's requests sent between a first and its twin (default 0: the next "
        "slot, usually while the first is in flight)",
    )  # fmt: skip
    parser.add_argument(
        "--twin-at-rest", type=non_negative_int, default=32, metavar="N",
        help="with --twin-fraction: pairs sent one at a time to each target before the soak, "
        "the stack's own mismatch rate the report reads the rate under load against (default "
        "32)",
    )  # fmt: skip
    parser.add_argument(
        "--response-format", metavar="FILE",
        help="a JSON schema (or an OpenAI response_format object) every answer must follow: "
        "sent as the server asks (--structure-via), every answer validated (invalid_structure); "
        "a prompt file's own response_format/regex/tools stand for its prompts",
    )  # fmt: skip
    parser.add_argument(
        "--regex", metavar="PATTERN",
        help="a regular expression every whole answer must match (needs --structure-via vllm "
        "or guided: OpenAI and llama.cpp have no such field)",
    )  # fmt: skip
    parser.add_argument(
        "--tools", metavar="FILE",
        help="a JSON list of function tools sent with every chat request; every tool call is "
        "validated against its tool's parameters",
    )  # fmt: skip
    parser.add_argument(
        "--tool-choice", metavar="CHOICE",
        help="with --tools: auto (default), required, none, or a tool's name",
    )  # fmt: skip
    parser.add_argument(
        "--structure-via", choices=STRUCTURE_VIA_CHOICES, default="openai",
        help="the request field structured prompts are sent in: openai (response_format, "
        "default), llamacpp (json_schema), vllm (structured_outputs), guided (vLLM's older "
        "guided_json/guided_regex)",
    )  # fmt: skip
    parser.add_argument(
        "--char-run-threshold", type=positive_int, default=80,
        help="flag a run of one ordinary character at least this long",
    )  # fmt: skip
    parser.add_argument("--quiet", action="store_true", help="no live progress")
    parser.add_argument(
        "--no-watch-metrics", dest="watch_metrics", action="store_false",
        help="do not scrape the targets' Prometheus /metrics (speculative-decoding watch)",
    )  # fmt: skip
    parser.add_argument(
        "--metrics-interval", type=duration, default=5.0, help="scrape period, s (or 10s, 1m)"
    )


def soak_config(args: argparse.Namespace, targets: list[str]) -> Any:
    """Build and validate a SoakConfig from parsed arguments."""
    import functools

    from soakgate.checks import CrosstalkSettings, open_answer_checks
    from soakgate.checks.twins import TwinSettings, open_twins
    from soakgate.detectors import DetectorConfig
    from soakgate.load import LoadSpec
    from soakgate.load.runner import SoakConfig
    from soakgate.probes.soak import StandardProbes
    from soakgate.targets import RequestSpec, TargetSpec
    from soakgate.targets.parse import check_structures

    api_key = args.api_key or os.environ.get("SOAKGATE_API_KEY")
    top_k = getattr(args, "top_logprobs", None) or 0
    request = RequestSpec(
        endpoint=args.endpoint, stream=args.stream, max_tokens=args.max_tokens,
        temperature=args.temperature, top_p=args.top_p, seed=args.seed,
        ignore_eos=args.ignore_eos, logprobs=args.logprobs or bool(top_k), top_logprobs=top_k,
        return_token_ids=args.token_ids,
        timeout_s=args.timeout, max_response_bytes=args.max_response_bytes,
        structure_via=getattr(args, "structure_via", "openai"),
    )  # fmt: skip
    prompts, context = _prompts(args)
    prompts = structured_prompts(prompts, args)
    structured = check_structures(prompts, request)
    references = getattr(args, "reference", [])
    connections = args.concurrency * len(targets) * (2 if references else 1)
    given = "concurrency" in explicit_options(args)
    check_concurrency(args.concurrency, args.requests, connections, given)
    rate, arrivals = getattr(args, "rate", None), getattr(args, "arrivals", None)
    if arrivals is not None and rate is None:
        from soakgate.errors import UsageError

        raise UsageError("--arrivals needs --rate (the closed loop has no arrival process)")
    tls = tls_from_args(args)
    return SoakConfig(
        targets=[TargetSpec.parse(t, api_key, args.model, tls) for t in targets],
        label=args.label, request=request,
        load=LoadSpec(args.concurrency, args.requests, getattr(args, "duration", None),
                      rate=rate, arrivals=arrivals or "poisson",
                      ramp_s=getattr(args, "ramp", None)),
        db=Path(args.db), prompts=prompts, prompt_order=args.prompt_order,
        seed=args.prompt_seed, detectors=DetectorConfig(char_run_threshold=args.char_run_threshold),
        store_text=args.store_text, resume=getattr(args, "resume", None),
        references=[TargetSpec.parse(r, api_key, args.model) for r in references],
        reference_fraction=getattr(args, "reference_fraction", 0.03),
        watch_metrics=args.watch_metrics, metrics_interval_s=args.metrics_interval,
        plan=getattr(args, "plan", None), until_verdict=getattr(args, "until_verdict", False),
        allow_foreign_tables=args.allow_foreign_tables, explicit=explicit_options(args),
        context=context, progress_every_s=getattr(args, "progress_every", 30.0),
        probes=StandardProbes(),
        answer_check=functools.partial(open_answer_checks, CrosstalkSettings(
            canaries=args.canaries, spans=args.crosstalk_spans, span=args.crosstalk_span,
            window=args.crosstalk_window, answers=args.crosstalk_answers),
            structured,
            request.temperature if request.logprobs else None),
        twin_check=functools.partial(open_twins, TwinSettings(
            getattr(args, "twin_fraction", 0.0), getattr(args, "twin_gap", 0),
            getattr(args, "twin_at_rest", 32)), request),
    )  # fmt: skip


def structured_prompts(prompts: list[Any], args: argparse.Namespace) -> list[Any]:
    """The prompts with the structure `--response-format`, `--regex` or `--tools` asks for
    (prompts with a structure of their own keep it). Whether each can be sent the way requests
    are made is `targets.parse.check_structures`' question (`soak_config` asks it)."""
    import dataclasses

    structure = _structure_flag(args)
    if structure is None:
        return prompts
    return [p if p.structure else dataclasses.replace(p, structure=structure) for p in prompts]


def _structure_flag(args: argparse.Namespace) -> Any:
    """The structure one of --response-format, --regex, --tools asks for (None: none does)."""
    import json

    from soakgate.errors import ConfigError, UsageError
    from soakgate.prompts import Structure

    given = [f for f in ("response_format", "regex", "tools") if getattr(args, f, None)]
    choice = getattr(args, "tool_choice", None)
    if len(given) > 1:
        raise UsageError("give one of --response-format, --regex, --tools")
    if choice is not None and given != ["tools"]:
        raise UsageError("--tool-choice needs --tools")
    if not given:
        return None
    if given == ["regex"]:
        return Structure.of("regex", args.regex)
    path = Path(getattr(args, given[0]))
    flag = "--" + given[0].replace("_", "-")
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{flag}: cannot read {path}: {exc.strerror}") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{flag}: {path} is not a JSON file ({exc})") from exc
    if given == ["tools"] and choice not in (None, "auto", "required", "none"):
        choice = {"type": "function", "function": {"name": choice}}
    try:
        kind = "json_schema" if given == ["response_format"] else "tools"
        return Structure.of(kind, value, choice)
    except ConfigError as exc:
        raise ConfigError(f"{flag} {path}: {exc}") from exc


def _prompts(args: argparse.Namespace) -> tuple[list[Any], dict[str, Any]]:
    """The prompts to send (a file, the built-in set or synthetic lengths) and what the run
    records of synthetic ones."""
    from soakgate.errors import UsageError
    from soakgate.prompts import builtin_prompts, load_prompts
    from soakgate.prompts.synthetic import LengthDistribution, described, synthetic_prompts

    dist = getattr(args, "prompt_tokens", None)
    count, tokenizer = getattr(args, "synthetic_prompts", None), getattr(args, "tokenizer", None)
    if dist is None:
        if count is not None or tokenizer is not None:
            flag = "--synthetic-prompts" if count is not None else "--tokenizer"
            raise UsageError(f"{flag} needs --prompt-tokens (the synthetic prompts' lengths)")
        return (load_prompts(args.prompts) if args.prompts else list(builtin_prompts())), {}
    if args.prompts:
        raise UsageError("--prompt-tokens makes synthetic prompts: leave out --prompts")
    lengths = LengthDistribution.parse(dist)
    count = count or 500
    prompts = synthetic_prompts(lengths, count, args.prompt_seed, tokenizer)
    return prompts, {"synthetic_prompts": described(lengths, count, tokenizer)}


def execute(
    config: Any, quiet: bool, observers: Sequence[Any] = (), progress_every: float = 60.0
) -> Any:
    """Run the soak with live progress (on a terminal; else a line every `progress_every` s),
    print the summary table; return the SoakResult."""
    from soakgate.load.progress import LiveProgress, PlainProgress, summary_table
    from soakgate.load.runner import run_soak
    from soakgate.terminal import TextConsole, wide_console

    warn_detector_budget(config.detectors, config.request.max_tokens)
    if quiet:
        result = run_soak(config, observers=observers)
    elif not TextConsole(stderr=True).is_terminal:  # a log: a line now and then, not a redraw
        plain = PlainProgress(progress_every, config.load.duration_s)
        result = run_soak(config, observers=[*observers, plain])
    else:
        with LiveProgress(config.label, config.load.duration_s) as live:
            result = run_soak(config, on_tick=live.update, observers=observers)
    console = wide_console()
    console.print(summary_table(config.label, result.tallies, result.elapsed_s))
    for warning in result.warnings:
        print(f"soakgate: warning: {warning}", file=sys.stderr, flush=True)
    console.print(f"run {result.run.run_id} ({result.stopped_by}) stored in {config.db}")
    if config.until_verdict:
        console.print(_verdict_line(config.db, result.run.run_id, result.stopped_by))
    return result


def warn_detector_budget(detectors: Any, max_tokens: int) -> None:
    """One `warning:` line on stderr when the token budget is too small for a detector."""
    from soakgate.detectors import budget_warning

    warning = budget_warning(detectors, max_tokens)
    if warning:
        print(f"soakgate: warning: {warning}", file=sys.stderr, flush=True)


def _verdict_line(db: Path, run_id: str, stopped_by: str) -> str:
    """Which look and verdict stopped an --until-verdict run (or that none did)."""
    from soakgate.load.preregistration import stopping_line
    from soakgate.store import open_analysis

    store = open_analysis(db)
    try:
        line = stopping_line(store, run_id)
    finally:
        store.close()
    if line is None:
        return "sequential plan: no look was reached"
    prefix = "stopped by the plan's verdict at" if stopped_by == "verdict" else "last look:"
    return f"{prefix} {line}"


def arm_targets(arms: list[str]) -> tuple[list[str], dict[str, str]]:
    """`LABEL=URL` arms as target arguments and the target-name -> label map."""
    from soakgate.errors import UsageError
    from soakgate.targets import TargetSpec

    targets, labels = [], {}
    for arm in arms:
        label, sep, url = arm.partition("=")
        if not sep or not label or "://" in label:
            raise UsageError(f"--arm {arm!r} must look like LABEL=http://host:port")
        targets.append(url)
        labels[TargetSpec.parse(url).name] = label
    return targets, labels


def live_report(args: argparse.Namespace) -> list[Any]:
    """The live HTML report observer asked for by --html / --report-every (none without)."""
    from soakgate.errors import UsageError

    if args.report_every is not None and args.html is None:
        raise UsageError("--report-every needs --html FILE (where to write the report)")
    if args.html is None:
        return []
    if not args.html.parent.is_dir():
        raise UsageError(f"cannot write {args.html}: folder {args.html.parent} does not exist")
    from soakgate.report.live import LiveReport

    return [LiveReport(Path(args.db), args.html, args.report_every)]


def main(args: argparse.Namespace) -> int:
    """Validate, soak, print the summary; 0 when the soak ran (findings are in the store)."""
    targets, labels = arm_targets(args.arm)
    config = soak_config(args, args.target + targets)
    config.labels = labels
    config.scorer = reference_scorer(args, config)
    if config.scorer is not None:  # the reference scores exactly the sampled ids, when it gets them
        import dataclasses

        config.request = dataclasses.replace(config.request, return_token_ids=True)
    if labels and args.label == "default":
        config.label = " vs ".join(dict.fromkeys(labels.values()))
    observers = live_report(args)
    # a port in use is refused here, before any load; every unit's series from the first scrape
    units = [(labels.get(t.name, config.label), t.name) for t in config.targets]
    metrics = start_metrics(args, units=units)
    try:
        result = execute(config, args.quiet, [*observers, *([metrics] if metrics else [])],
                         args.progress_every)  # fmt: skip
    except BaseException:
        finish_metrics(metrics, args, interrupted=True)
        raise
    finish_metrics(metrics, args, interrupted=result.stopped_by == "stop")
    for observer in observers:
        if observer.refreshes:
            print(f"soakgate: wrote {args.html} (refreshed {observer.refreshes} time(s))",
                  file=sys.stderr)  # fmt: skip
    return 130 if result.stopped_by == "stop" else 0
