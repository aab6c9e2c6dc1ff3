"""`soakgate export`: every generation as Parquet, CSV or JSON Lines."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    """Add the `export` command."""
    parser = subparsers.add_parser("export", help="export generations: parquet, csv or jsonl")
    parser.add_argument("db", metavar="DB", help="soakgate SQLite database")
    parser.add_argument(
        "--format", choices=("parquet", "csv", "jsonl"), required=True, help="output format"
    )
    parser.add_argument(
        "--out", metavar="FILE",
        help="output file (default: csv/jsonl to stdout, parquet to DB-STEM.parquet here)",
    )  # fmt: skip
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Export; the row count (and the file written) go to stderr so stdout stays pure data."""
    from soakgate.report.api import export
    from soakgate.report.export import default_output

    out = args.out or default_output(args.db, args.format)
    count = export(args.db, args.format, out)
    print(f"exported {count} generations" + (f" to {out}" if out else ""), file=sys.stderr)
    return 0
