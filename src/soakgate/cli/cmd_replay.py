"""`soakgate replay`: send stored collapsed requests again, alone and under load, and classify."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from soakgate.cli import exits
from soakgate.cli.args import positive_int


def register(subparsers: Any) -> None:
    """Add the `replay` command."""
    parser = subparsers.add_parser(
        "replay",
        help="re-send stored collapsed requests alone and under load: input-triggered, "
        "only under load, or never",
        description="Re-send the stored requests of collapsed rows N times alone (greedy, and "
        "with their own sampling settings), then N times inside a background soak at the "
        "original concurrency, and classify each collapse. The replays are stored in DB as a "
        "probe run that `soakgate report` shows. Exit 1 when a collapse reproduced, 0 when "
        "none did, 2 when the replay could not be done.",
    )  # fmt: skip
    parser.add_argument(
        "db", metavar="DB", help="soakgate SQLite database (the replay is stored in it)"
    )
    parser.add_argument(
        "--collapsed", action="store_true", help="replay the collapsed rows (required)"
    )
    parser.add_argument("--run", metavar="R", help="only the collapses of this run")
    parser.add_argument("--target", required=True, metavar="[NAME=]URL", help="server to replay on")
    parser.add_argument(
        "--repeats", type=positive_int, default=5, metavar="N", help="replays per phase per row"
    )
    parser.add_argument(
        "--max-rows", type=positive_int, default=10, help="collapsed rows replayed at most"
    )
    parser.add_argument(
        "--prompts", metavar="FILE",
        help="the run's prompts file, for a database written before prompts were stored",
    )  # fmt: skip
    parser.add_argument("--model", help="model name to send (default: the one the run sent)")
    parser.add_argument("--api-key", help="bearer token (default: $SOAKGATE_API_KEY); not stored")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Replay, print one line per collapsed row, exit 1 when any reproduced."""
    from soakgate.errors import UsageError
    from soakgate.probes.replay import ReplayConfig, replay, summary_lines
    from soakgate.probes.reproduce import NEVER, NO_ANSWER
    from soakgate.prompts import load_prompts
    from soakgate.targets import TargetSpec
    from soakgate.terminal import echo

    if not args.collapsed:
        raise UsageError("say what to replay: --collapsed (the collapsed rows)")
    api_key = args.api_key or os.environ.get("SOAKGATE_API_KEY")
    config = ReplayConfig(
        db=Path(args.db), target=TargetSpec.parse(args.target, api_key, args.model),
        run_id=args.run, repeats=args.repeats, max_rows=args.max_rows,
        prompts=load_prompts(args.prompts) if args.prompts else None,
    )  # fmt: skip
    if not config.db.is_file():
        raise UsageError(f"no database at {config.db}")
    result = replay(config, progress=lambda line: echo(line, sys.stderr))
    echo("\n".join(summary_lines(result, config)))
    reproduced = any(i.verdict not in (NEVER, NO_ANSWER) for i in result.replayed)
    return exits.FINDING if reproduced else exits.OK
