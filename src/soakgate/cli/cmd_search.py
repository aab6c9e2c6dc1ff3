"""`soakgate search`: from a clean and a failing configuration to the knobs the failure needs."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    """Add the `search` command."""
    parser = subparsers.add_parser(
        "search",
        help="narrow a failing configuration to the knobs the failure needs, probe by probe",
    )
    parser.add_argument("file", help="search TOML file: a campaign file with a [search] table")
    parser.add_argument("--db", default="runs.sqlite", help="SQLite file (created if absent)")
    parser.add_argument("--resume", action="store_true", help="continue this search")
    parser.add_argument("--quiet", action="store_true", help="no per-block lines")
    parser.add_argument(
        "--write-campaign", metavar="TOML",
        help="write the minimal pair (clean, and clean with the named knobs changed) as a "
        "campaign file; relative paths in it stay relative to the search file's folder",
    )  # fmt: skip
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Print the plan, run the search, print its probes and answer; 0 with a confirmed answer,
    1 without one (no baseline, nothing to explain, not confirmed, a block failed) or when the
    failures cluster beyond the design effect (the bounds do not hold), 130 when interrupted
    (`--resume` continues)."""
    from soakgate.campaign import Block
    from soakgate.cli import exits
    from soakgate.search import load_search, run_search
    from soakgate.search.plan import clustered
    from soakgate.search.summary import (
        answer_line,
        guarantee_line,
        knob_lines,
        minimal_campaign,
        partial_line,
        plan_lines,
        probe_lines,
    )

    search = load_search(args.file)
    print(f"search {search.campaign.name}: {len(search.knobs)} knobs differ between "
          f"{search.clean.label!r} and {search.failing.label!r}", flush=True)  # fmt: skip
    print("\n".join([*knob_lines(search), *plan_lines(search)]), flush=True)

    def on_block(block: Block, state: str) -> None:
        if not args.quiet:
            print(f"block {block.block_id}: {state}", flush=True)

    result = run_search(args.file, args.db, resume=args.resume, on_block=on_block)
    walked = result.walked
    print("probes (in order; knobs changed from the clean configuration):")
    print("\n".join(probe_lines(search, walked)))
    if walked.interrupted:
        print(f"stored in {args.db}; interrupted: rerun with --resume")
        return exits.INTERRUPTED
    print(answer_line(search, walked))
    if (partial := partial_line(walked)) is not None:
        print(partial)
    print(guarantee_line(search, walked))
    if walked.named is not None and args.write_campaign:
        from pathlib import Path

        from soakgate.errors import UsageError

        try:
            Path(args.write_campaign).write_text(minimal_campaign(search, walked.named))
        except OSError as exc:
            raise UsageError(f"cannot write {args.write_campaign}: {exc.strerror}") from None
        print(f"wrote the minimal pair's campaign file: {args.write_campaign}")
    print(f"stored in {args.db}")
    return exits.OK if walked.named is not None and not clustered(walked) else exits.FINDING
