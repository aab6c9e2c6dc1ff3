"""`soakgate compare`: two arms (LABEL or LABEL@TARGET), a --baseline family, or a --plan."""

from __future__ import annotations

import argparse
from typing import Any

from soakgate.cli.cmd_report import add_clustering_arguments, clustering_options


def register(subparsers: Any) -> None:
    """Add the `compare` command."""
    parser = subparsers.add_parser(
        "compare", help="compare collapse rates: naive, exact and cluster-robust tests"
    )
    parser.add_argument("db", metavar="DB", help="soakgate SQLite database")
    parser.add_argument("a", metavar="A", nargs="?", help="reference arm: LABEL or LABEL@TARGET")
    parser.add_argument("b", metavar="B", nargs="?", help="other arm: LABEL or LABEL@TARGET")
    parser.add_argument("--baseline", metavar="LABEL", help="compare every label with it (Holm)")
    parser.add_argument("--plan", metavar="PLAN_TOML", help="apply a registered plan's rule")
    parser.add_argument("--alpha", type=float, default=0.05, help="two-sided level")
    parser.add_argument(
        "--allow-unit-mismatch", action="store_true",
        help="compare an aggregate over targets with one target anyway (output is labelled)",
    )  # fmt: skip
    parser.add_argument(
        "--fail-on-differ", action="store_true",
        help="exit 1 when a verdict is DIFFER (to gate a pipeline); 0 otherwise",
    )  # fmt: skip
    parser.add_argument(
        "--outcome", choices=("collapse", "suspect"), default="collapse",
        help="what is compared: collapses among clean generations (default), or reference "
        "scoring's suspect generations among scored ones",
    )  # fmt: skip
    add_clustering_arguments(parser)
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Print the comparison(s); with --fail-on-differ, exit 1 when any verdict is DIFFER."""
    from soakgate.report.api import compare
    from soakgate.terminal import echo

    text, differ = compare(
        args.db,
        args.a,
        args.b,
        baseline=args.baseline,
        plan=args.plan,
        allow_unit_mismatch=args.allow_unit_mismatch,
        alpha=args.alpha,
        options=clustering_options(args),
        outcome=args.outcome,
    )
    echo(text)
    return 1 if differ and args.fail_on_differ else 0
