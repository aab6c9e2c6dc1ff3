"""`soakgate report`: per-(label, target) rates, clustering and warnings; optional HTML report."""

from __future__ import annotations

import argparse
from typing import Any

from soakgate.cli.args import positive_int


def add_clustering_arguments(parser: argparse.ArgumentParser) -> None:
    """Cost knobs of the clustering tests, shared with `compare`."""
    parser.add_argument("--window", type=positive_int, default=500, help="requests per window")
    parser.add_argument(
        "--hmm-replicates", type=int, default=0,
        help="also run the (slow) HMM clustering test with this many bootstrap replicates; "
        "at least 60 so that it can count (default 0: skipped)",
    )  # fmt: skip
    parser.add_argument(
        "--gap-permutations", type=int, default=199, help="gap-test permutations (0 skips)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of permutations and bootstrap")


def clustering_options(args: argparse.Namespace) -> Any:
    """ClusteringOptions from the shared arguments."""
    from soakgate.errors import UsageError
    from soakgate.report.model import ClusteringOptions
    from soakgate.stats.clustering import check_hmm_replicates

    if args.hmm_replicates < 0 or args.gap_permutations < 0:
        raise UsageError("--hmm-replicates and --gap-permutations must be >= 0")
    check_hmm_replicates(args.hmm_replicates, 0.05, 3 if args.gap_permutations else 2)
    return ClusteringOptions(
        window=args.window, gap_permutations=args.gap_permutations,
        hmm_replicates=args.hmm_replicates, seed=args.seed,
    )  # fmt: skip


def register(subparsers: Any) -> None:
    """Add the `report` command."""
    parser = subparsers.add_parser(
        "report", help="rates with exact CIs per label and target, clustering, warnings"
    )
    parser.add_argument("db", metavar="DB", help="soakgate SQLite database")
    parser.add_argument("--html", metavar="FILE", help="also write the self-contained HTML report")
    parser.add_argument(
        "--format", choices=("table", "json", "csv", "markdown"), default="table",
        help="table (fits the terminal), or json/csv/markdown for machines and documents",
    )  # fmt: skip
    parser.add_argument(
        "--no-clustering", action="store_true", help="skip the clustering tests (fast)"
    )
    parser.add_argument(
        "--collapse", metavar="ID",
        help="instead of the report, what surrounded one generation (its request id): requests "
        "in flight on its target, server incarnation and uptime, the server's load, nearby events",
    )  # fmt: skip
    add_clustering_arguments(parser)
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Print the report (or one generation's context); write the HTML file when asked."""
    from soakgate.report.api import report
    from soakgate.terminal import echo

    if args.collapse is not None:
        from soakgate.errors import UsageError
        from soakgate.report.api import collapse_report

        if args.html or args.format not in ("table", "json"):
            flag = "--html" if args.html else f"--format {args.format}"
            raise UsageError(
                f"--collapse prints one generation's context as text or --format json; {flag} "
                "is for the whole report (give it without --collapse)"
            )
        context = collapse_report(args.db, args.collapse, args.format)
        (echo if args.format == "table" else print)(context)
        return 0

    text = report(args.db, args.format, args.html, clustering_options(args), not args.no_clustering)
    (echo if args.format == "table" else print)(text.rstrip("\n"))
    if args.html:
        import sys

        print(f"wrote {args.html}", file=sys.stderr)
    return 0
