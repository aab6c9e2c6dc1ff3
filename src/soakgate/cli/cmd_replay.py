"""`soakgate replay`: send stored collapsed requests again, alone and under load, and classify."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from soakgate.cli import exits
from soakgate.cli.args import add_tls_arguments, duration, positive_int, tls_from_args


def register(subparsers: Any) -> None:
    """Add the `replay` command."""
    parser = subparsers.add_parser(
        "replay",
        help="re-send stored collapsed requests alone and under load: input-triggered, "
        "only under load, or never",
        description="Re-send the stored requests of collapsed rows N times alone (greedy, and "
        "with their own sampling settings), each pair followed by a control prompt, then N "
        "times inside a background soak at the original concurrency, and classify each "
        "collapse against the control and the background. The replays are stored in DB as a "
        "probe run that `soakgate report` shows. Exit 1 when a collapse is tied to its input, "
        "the load or the server's state, 0 when none is, 2 when the replay could not be done "
        "(the target kept failing, the time bound, too few answers to classify).",
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
    parser.add_argument(
        "--max-failures", type=positive_int, default=3, metavar="K",
        help="stop (exit 2) after K replays in a row failed (default 3)",
    )  # fmt: skip
    parser.add_argument(
        "--max-time", type=duration, default=3600.0, metavar="DURATION",
        help="stop (exit 2) when the replay has taken this long, e.g. 30m (default 1h)",
    )  # fmt: skip
    parser.add_argument(
        "--timeout", type=duration, metavar="DURATION",
        help="longest wait for one replay (default: the run's own --timeout)",
    )  # fmt: skip
    parser.add_argument("--model", help="model name to send (default: the one the run sent)")
    parser.add_argument("--api-key", help="bearer token (default: $SOAKGATE_API_KEY); not stored")
    add_tls_arguments(parser)
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Replay, print one line per collapsed row and the evidence; exit 1 when a collapse is tied
    to its input, the load or the server's state, 2 when the replay stopped early or too few
    replays answered to classify a row."""
    from soakgate.errors import UsageError
    from soakgate.probes.replay import ReplayConfig, replay
    from soakgate.probes.replay_send import Bounds
    from soakgate.probes.replay_text import summary_lines
    from soakgate.probes.reproduce import FINDINGS, NO_ANSWER
    from soakgate.prompts import load_prompts
    from soakgate.targets import TargetSpec
    from soakgate.terminal import echo

    if not args.collapsed:
        raise UsageError("say what to replay: --collapsed (the collapsed rows)")
    api_key = args.api_key or os.environ.get("SOAKGATE_API_KEY")
    target = TargetSpec.parse(args.target, api_key, args.model, tls_from_args(args))
    config = ReplayConfig(
        db=Path(args.db), target=target,
        run_id=args.run, repeats=args.repeats, max_rows=args.max_rows,
        prompts=load_prompts(args.prompts) if args.prompts else None,
        bounds=Bounds(args.max_failures, args.max_time, args.timeout),
    )  # fmt: skip
    if not config.db.is_file():
        raise UsageError(f"no database at {config.db}")
    result = replay(config, progress=lambda line: echo(line, sys.stderr))
    echo("\n".join(summary_lines(result, config)))
    unanswered = sum(i.verdict == NO_ANSWER for i in result.replayed)
    if result.stopped or unanswered:
        why = result.stopped or (
            f"{unanswered} of {len(result.replayed)} replayed collapse(s) had too few answered "
            "replays to classify"
        )
        echo(f"soakgate: error: {why}", sys.stderr)
        return exits.FAILED
    return exits.FINDING if any(i.verdict in FINDINGS for i in result.replayed) else exits.OK
