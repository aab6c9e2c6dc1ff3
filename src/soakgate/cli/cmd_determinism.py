"""`soakgate determinism`: the stack's nondeterminism baseline from repeated greedy generations."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from soakgate.cli.args import add_tls_arguments, positive_float, positive_int, tls_from_args


def register(subparsers: Any) -> None:
    """Add the `determinism` command."""
    parser = subparsers.add_parser(
        "determinism", help="greedy generations repeated within and across instances"
    )
    parser.add_argument(
        "--target", action="append", default=[], metavar="[NAME=]URL",
        help="an OpenAI-compatible server; repeat for cross-instance agreement",
    )  # fmt: skip
    parser.add_argument(
        "--prompt-count", type=positive_int, default=20, metavar="N",
        help="how many built-in prompts to send",
    )  # fmt: skip
    parser.add_argument(  # the old spelling: `--prompts` is a FILE in `run`
        "--prompts", type=positive_int, dest="prompt_count", action=_DeprecatedPrompts,
        help=argparse.SUPPRESS,
    )  # fmt: skip
    parser.add_argument(
        "--repeats", type=positive_int, default=2, help="generations per prompt per target"
    )
    parser.add_argument(
        "--max-tokens", type=positive_int, default=128, help="tokens to generate per request"
    )
    parser.add_argument(
        "--endpoint", choices=("completions", "chat"), default="completions", help="API endpoint"
    )
    parser.add_argument("--token-ids", action="store_true", help="compare token ids (vLLM)")
    parser.add_argument("--timeout", type=positive_float, default=120.0, help="seconds per request")
    parser.add_argument("--model", help="model name (default: the target's first model)")
    parser.add_argument("--api-key", help="bearer token (default: $SOAKGATE_API_KEY); not stored")
    add_tls_arguments(parser)
    parser.set_defaults(func=main)


class _DeprecatedPrompts(argparse.Action):
    """`determinism --prompts N`, the spelling before `--prompt-count`: still works, with a
    warning, because `--prompts` means a prompts FILE everywhere else."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
        option_string: str | None = None,
    ) -> None:  # fmt: skip
        print(
            f"soakgate: warning: determinism --prompts N is deprecated; use --prompt-count "
            f"{values} (in `run`, --prompts is a prompts FILE)",
            file=sys.stderr,
        )
        setattr(namespace, self.dest, values)


def main(args: argparse.Namespace) -> int:
    """Run the probe and print agreement rates with the caveat."""
    import asyncio

    from rich.table import Table

    from soakgate.errors import UsageError
    from soakgate.probes.determinism import CAVEAT, probe
    from soakgate.prompts import builtin_prompts
    from soakgate.targets import RequestSpec, TargetSpec
    from soakgate.terminal import wide_console

    if not args.target:
        raise UsageError("give at least one --target")
    api_key = args.api_key or os.environ.get("SOAKGATE_API_KEY")
    tls = tls_from_args(args)
    targets = [TargetSpec.parse(t, api_key, args.model, tls) for t in args.target]
    spec = RequestSpec(
        endpoint=args.endpoint, max_tokens=args.max_tokens, stream=False,
        return_token_ids=args.token_ids, timeout_s=args.timeout,
    )  # fmt: skip
    prompts = list(builtin_prompts())[: args.prompt_count]
    report = asyncio.run(probe(targets, prompts, spec, args.repeats))
    table = Table(title="soakgate determinism (greedy)")
    for column in ("scope", "pairs", "exact match", "median first divergence", "errors"):
        table.add_column(column, justify="left" if column == "scope" else "right")
    for row in report:
        median = "-" if row.median_divergence is None else f"{row.median_divergence:.0f}"
        rate = f"{row.exact_match_rate:.0%}" if row.pairs else "-"
        table.add_row(row.scope, str(row.pairs), rate, median, str(row.errors))
    console = wide_console()
    console.print(table)
    console.print(CAVEAT)
    return 0
