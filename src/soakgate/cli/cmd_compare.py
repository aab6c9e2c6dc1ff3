"""`soakgate compare`: two arms (LABEL or LABEL@TARGET), a --baseline family, or a --plan."""

from __future__ import annotations

import argparse
from typing import Any

from soakgate.cli.args import add_gate_arguments, gate_options
from soakgate.cli.cmd_report import add_clustering_arguments, clustering_options

COMPARE_OUTCOMES = (
    "all", "crash", "error", "collapse", "suspect", "shifted", "crosstalk", "invalid_structure",
    "inconsistent", "twin_mismatch", "divergence", "any_failure",
)  # fmt: skip


def register(subparsers: Any) -> None:
    """Add the `compare` command."""
    parser = subparsers.add_parser(
        "compare",
        help="judge every failure outcome of B against A (the release gate), and "
        "collapse rates in detail",
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
    add_gate_arguments(parser, "B")
    parser.add_argument(
        "--outcome", choices=COMPARE_OUTCOMES, default="all",
        help="what is judged: every outcome both arms measured (default), or one: crash, "
        "error (server errors), collapse, suspect (reference scoring; the detail shows suspect "
        "/ scored rows), divergence (from a greedy reference), any_failure",
    )  # fmt: skip
    add_clustering_arguments(parser)
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Print the gate and the comparison(s); with --fail-on-differ, exit 1 when the gate fails."""
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
        gate=gate_options(args),
    )
    echo(text)
    return 1 if differ and args.fail_on_differ else 0
