"""`soakgate export`: every generation as Parquet, CSV or JSON Lines."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    """Add the `export` command."""
    parser = subparsers.add_parser("export", help="export generations: parquet, csv or jsonl")
    parser.add_argument("db", metavar="DB", help="soakgate SQLite database")
    parser.add_argument("--format", choices=("parquet", "csv", "jsonl"), required=True)
    parser.add_argument("--out", metavar="FILE", help="output file (csv/jsonl: default stdout)")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Export; the row count goes to stderr so stdout stays pure data."""
    from soakgate.report.api import export

    count = export(args.db, args.format, args.out)
    print(f"exported {count} generations", file=sys.stderr)
    return 0
