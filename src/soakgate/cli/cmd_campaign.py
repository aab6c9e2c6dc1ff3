"""`soakgate campaign`: run a matrix of server configurations block by block, guarded, resumable."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from soakgate.cli.args import add_gate_arguments, gate_options
from soakgate.cli.metrics import (
    add_metrics_arguments,
    add_progress_argument,
    finish_metrics,
    start_metrics,
)
from soakgate.load.progress import PlainProgress


def register(subparsers: Any) -> None:
    """Add the `campaign` command."""
    parser = subparsers.add_parser(
        "campaign", help="start servers per config and device, soak them block by block, guarded"
    )
    parser.add_argument("file", help="campaign TOML file")
    parser.add_argument("--db", default="runs.sqlite", help="SQLite file (created if absent)")
    parser.add_argument(
        "--resume", action="store_true", help="continue this campaign; finished blocks are kept"
    )
    parser.add_argument("--quiet", action="store_true", help="no per-block lines")
    parser.add_argument(
        "--allow-foreign-tables", action="store_true",
        help="write into an SQLite file that also holds other programs' tables",
    )  # fmt: skip
    add_gate_arguments(parser, "a configuration (against the baseline)")
    parser.add_argument(
        "--baseline", metavar="LABEL",
        help="the configuration the others are judged against (default: the campaign's "
        "reference, else its first configuration)",
    )  # fmt: skip
    add_metrics_arguments(parser)
    add_progress_argument(parser)
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Run the campaign, print a table of its blocks and why any failed; 1 when a block failed,
    130 when interrupted (resume later)."""
    from rich.table import Table

    from soakgate.campaign import Block, run_campaign
    from soakgate.campaign.model import load_campaign
    from soakgate.campaign.soakcfg import detector_config
    from soakgate.cli import exits
    from soakgate.cli.cmd_run import warn_detector_budget
    from soakgate.terminal import wide_console

    console = wide_console()

    def on_block(block: Block, state: str) -> None:
        if not args.quiet:
            console.print(f"block {block.block_id}: {state}")

    campaign = load_campaign(args.file)
    warn_detector_budget(detector_config(campaign), campaign.load.max_tokens)
    metrics = start_metrics(args, guarded=True)  # a port in use is refused before any server
    ticks = [*([metrics.on_tick] if metrics else []),
             *([] if args.quiet else [PlainProgress(args.progress_every).on_tick])]  # fmt: skip

    def on_tick(tallies: Any, elapsed_s: float) -> None:
        for tick in ticks:
            tick(tallies, elapsed_s)

    try:
        result = run_campaign(
            args.file, args.db, resume=args.resume, on_block=on_block,
            allow_foreign_tables=args.allow_foreign_tables, on_tick=on_tick if ticks else None,
            on_event=metrics.on_event if metrics else None,
        )  # fmt: skip
    except BaseException:
        finish_metrics(metrics, args, interrupted=True)
        raise
    if metrics is not None:
        metrics.close(None)
    table = Table(title=f"campaign {result.campaign.name}")
    for column in ("block", "label", "run", "outcome", "requests", "errors", "collapses", "faults"):
        table.add_column(column)
    for status in result.skipped:
        run_id = status.run.run_id if status.run else "-"
        table.add_row(
            status.block.block_id, status.block.label, run_id, f"{status.outcome} (earlier)"
        )
    for ran in result.ran:
        stored = ran.stored.values()  # from the database: a resumed block's earlier rows too
        table.add_row(
            ran.block.block_id, ran.block.label, ran.run_id, ran.outcome,
            str(sum(c.requests for c in stored)), str(sum(c.errors for c in stored)),
            str(sum(c.collapses for c in stored)), str(ran.faults),
        )  # fmt: skip
    console.print(table)
    for ran in result.ran:
        for warning in ran.warnings:
            print(f"soakgate: warning: block {ran.block.block_id}: {warning}", file=sys.stderr,
                  flush=True)  # fmt: skip
    for block_id, reason in result.failures.items():
        console.print(f"block {block_id} failed: {reason}", soft_wrap=True)
    console.print(
        f"stored in {args.db}"
        + ("; interrupted: rerun with --resume" if result.interrupted else "")
    )
    finish_metrics(metrics, args, interrupted=result.interrupted)
    if result.interrupted:
        return exits.INTERRUPTED
    findings = _verdicts(args, result.campaign.name, console)
    return exits.FINDING if result.failures or findings else exits.OK


def _verdicts(args: argparse.Namespace, campaign: str, console: Any) -> bool:
    """Print the crashes and each configuration's gate; True when they make a finding: a
    configuration crashed (unless --allow-crashes), or a gate failed under --fail-on-differ."""
    from soakgate.errors import UsageError
    from soakgate.report.api import campaign_verdicts

    try:
        found = campaign_verdicts(args.db, campaign, args.baseline, gate=gate_options(args))
    except UsageError as exc:  # e.g. nothing stored: no verdict to give
        console.print(f"no verdict: {exc}")
        return False
    for line in found.lines:
        console.print(line, soft_wrap=True)
    crashed = bool(found.crashed) and not args.allow_crashes
    if crashed:
        console.print("a configuration's servers crashed: exit 1 (--allow-crashes to pass)")
    return crashed or (args.fail_on_differ and found.gate_fails)
