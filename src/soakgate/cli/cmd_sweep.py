"""`soakgate sweep`: throughput, latency and collapse rate per concurrency level."""

from __future__ import annotations

import argparse
from typing import Any

from soakgate.cli.args import check_concurrency, fraction, positive_int
from soakgate.cli.cmd_run import add_soak_arguments, soak_config, warn_detector_budget


def register(subparsers: Any) -> None:
    """Add the `sweep` command."""
    parser = subparsers.add_parser("sweep", help="find the saturation point of a target")
    add_soak_arguments(parser, levels=True)
    parser.add_argument(
        "--requests-per-level", type=positive_int, required=True,
        help="requests per target at each level (what bounds each level's soak)",
    )  # fmt: skip
    parser.add_argument(
        "--min-gain", type=fraction, default=0.10,
        help="saturation: the level past which throughput rises by less than this fraction",
    )  # fmt: skip
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Run the sweep and print one row per level plus the saturation point."""
    from soakgate.cli import exits
    from soakgate.probes.sweep import (
        acceptance_collapses,
        parse_levels,
        run_sweep,
        saturation_point,
        sweep_table,
    )
    from soakgate.terminal import wide_console

    levels = parse_levels(args.concurrency)
    for level in levels:
        check_concurrency(level, args.requests_per_level, level * max(len(args.target), 1))
    args.concurrency, args.requests = levels[0], args.requests_per_level
    config = soak_config(args, args.target)
    warn_detector_budget(config.detectors, config.request.max_tokens)
    results = run_sweep(config, levels, args.requests_per_level, args.min_gain)
    console = wide_console()
    console.print(sweep_table(results))
    point = saturation_point(results, args.min_gain)
    where = f"concurrency {point}" if point else f"not reached up to {levels[-1]}"
    console.print(f"saturation point (throughput gain < {args.min_gain:.0%}): {where}")
    fallen = acceptance_collapses(results)
    if fallen:
        console.print(f"speculative-decoding acceptance collapsed at concurrency {fallen}")
    if results and results[-1].interrupted:
        console.print(f"interrupted at concurrency {results[-1].concurrency}; stored in {args.db}")
        return exits.INTERRUPTED
    return exits.OK
