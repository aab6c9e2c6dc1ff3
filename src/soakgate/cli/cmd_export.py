"""`soakgate export`: generations, runs or events as Parquet, CSV or JSON Lines."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    """Add the `export` command."""
    parser = subparsers.add_parser(
        "export", help="export generations, runs or events: parquet, csv or jsonl"
    )
    parser.add_argument("db", metavar="DB", help="soakgate SQLite database")
    parser.add_argument(
        "--format", choices=("parquet", "csv", "jsonl"), required=True, help="output format"
    )
    parser.add_argument(
        "--table", choices=("generations", "runs", "events"), default="generations",
        help="what to export: one row per generation (default), per run (its settings), or "
        "per event (faults, restarts, looks, calibrations...)",
    )  # fmt: skip
    parser.add_argument(
        "--run", metavar="ID", action="append", default=[],
        help="only this run (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--label", metavar="L", action="append", default=[],
        help="only the runs of this configuration label (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--out", metavar="FILE",
        help="output file (default: csv/jsonl to stdout, parquet to DB-STEM.parquet here, "
        "DB-STEM-runs.parquet or DB-STEM-events.parquet for those tables)",
    )  # fmt: skip
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Export; the row count (and the file written) go to stderr so stdout stays pure data."""
    from soakgate.report.api import export
    from soakgate.report.export import Selection, default_output

    out = args.out or default_output(args.db, args.format, args.table)
    selection = Selection(tuple(args.run), tuple(args.label))
    count = export(args.db, args.format, out, table=args.table, selection=selection)
    print(f"exported {count} {args.table}" + (f" to {out}" if out else ""), file=sys.stderr)
    return 0
