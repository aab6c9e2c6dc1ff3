"""`soakgate merge`: one database from shards written by independent soakgate processes."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    """Add the `merge` command."""
    parser = subparsers.add_parser(
        "merge", help="merge databases of independent runs (shards) into a new database"
    )
    parser.add_argument("shards", metavar="SHARD", nargs="+", type=Path, help="soakgate databases")
    parser.add_argument(
        "--into", type=Path, required=True, metavar="DB",
        help="the merged database to create (an existing file is refused)",
    )  # fmt: skip
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Merge; a duplicate run or generation, a broken ledger or a file that is not a soakgate
    database is refused (exit 2) with nothing written."""
    from soakgate.store.merge import merge

    result = merge(args.shards, args.into)
    print(
        f"merged {len(args.shards)} shard(s) into {args.into}: {result.runs} runs, "
        f"{result.generations} generations, {result.events} events, "
        f"{result.ledger_entries} ledger entries"
    )
    return 0
