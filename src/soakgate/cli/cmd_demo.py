"""`soakgate demo`: a ~30 s soak of the built-in mock server, checked against its ground truth."""

from __future__ import annotations

import argparse
from typing import Any

from soakgate.cli.args import duration, positive_int


def register(subparsers: Any) -> None:
    """Add the `demo` command."""
    parser = subparsers.add_parser(
        "demo", help="soak the built-in mock server (~30 s) and show what soakgate finds"
    )
    parser.add_argument("--duration", type=duration, default=30.0, help="seconds (or 30s, 2m)")
    parser.add_argument("--concurrency", type=positive_int, default=32, help="requests in flight")
    parser.add_argument("--db", default="soakgate-demo.sqlite", help="where to store the run")
    parser.add_argument("--quiet", action="store_true", help="no live progress")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Run the demo; exit 0 when the detected collapses match the mock's ground truth exactly."""
    from pathlib import Path

    from rich.text import Text

    from soakgate.load import LoadSpec
    from soakgate.load.demo import run_demo
    from soakgate.load.progress import LiveProgress, summary_table
    from soakgate.load.runner import SoakConfig
    from soakgate.probes.soak import StandardProbes
    from soakgate.targets import RequestSpec, TargetSpec
    from soakgate.terminal import wide_console

    config = SoakConfig(
        targets=[TargetSpec("http://127.0.0.1:1", "mock-gpu0")], label="demo-bursty",
        request=RequestSpec(max_tokens=128, return_token_ids=True, timeout_s=30),
        load=LoadSpec(args.concurrency, duration_s=args.duration, grace_s=10), db=Path(args.db),
        probes=StandardProbes(),
    )  # fmt: skip
    if args.quiet:
        result, check = run_demo(config)
    else:
        with LiveProgress(config.label, args.duration) as live:
            result, check = run_demo(config, on_tick=live.update)
    console = wide_console()
    console.print(summary_table(config.label, result.tallies, result.elapsed_s))
    # the console shows strings as text (no markup): the verdict's colour is a styled span
    verdict = ("exact match", "green") if check.exact else ("MISMATCH", "red")
    console.print(Text.assemble(
        f"ground truth: {check.injected} collapses injected, {check.detected} detected, "
        f"{check.missed} missed, {check.false_alarms} false alarms — ", verdict,
        f"; {check.faults_injected} faults injected, {check.errors_recorded} errors recorded",
    ))  # fmt: skip
    console.print(f"stored in {config.db} (run {result.run.run_id})")
    if result.stopped_by == "stop":
        return 130  # interrupted: the ground-truth check covers only what ran
    return 0 if check.exact else 1
