"""`soakgate import`: load the rows a failed database could not take (its sidecar files)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    """Add the `import` command."""
    parser = subparsers.add_parser(
        "import", help="load a failed soak's unstored rows (*.unstored.jsonl) into a database"
    )
    parser.add_argument("db", metavar="DB", help="soakgate SQLite database (created if absent)")
    parser.add_argument("files", metavar="FILE", nargs="+", type=Path, help="sidecar file(s)")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Import; rows the database already holds are skipped, so a second import adds nothing.
    Every file is checked whole before the database is opened: a bad file creates no database
    and stores nothing."""
    from soakgate.store import open_store
    from soakgate.store.unstored import import_unstored, scan_unstored

    runs = [scan_unstored(path) for path in args.files]
    store = open_store(args.db)
    try:
        result = import_unstored(store, args.files, runs)
    finally:
        store.close()
    names = ", ".join(dict.fromkeys(result.runs))
    print(
        f"imported {result.generations} generations ({result.already_present} already present) "
        f"and {result.events} events of run {names} into {args.db}"
    )
    return 0
