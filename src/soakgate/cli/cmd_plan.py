"""`soakgate plan`: sample size and power for a comparison, and writing a pre-registration."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    """Add the `plan` command."""
    parser = subparsers.add_parser(
        "plan", help="n per arm (or power for a given n); --write a pre-registration"
    )
    parser.add_argument("--baseline-rate", type=float, required=True, help="expected rate of A")
    parser.add_argument("--ratio", type=float, required=True, help="rate ratio B/A to detect")
    parser.add_argument("--power", type=float, default=0.8)
    parser.add_argument("--alpha", type=float, default=0.05, help="two-sided level")
    parser.add_argument("--n", type=int, help="generations per arm: print achieved power")
    parser.add_argument("--design-effect", type=float, default=1.0, help="variance inflation")
    parser.add_argument("--write", metavar="PLAN_TOML", help="write a pre-registration")
    parser.add_argument("--arms", nargs=2, metavar=("A", "B"), help="arm labels (with --write)")
    parser.add_argument("--hypothesis", help="hypothesis in words (with --write)")
    parser.add_argument("--test", default="auto", help="verdict test (default: auto)")
    parser.add_argument("--sequential", action="store_true", help="group-sequential design")
    parser.add_argument("--looks", type=int, default=5, help="looks of a sequential design")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the figures; write the plan when asked."""
    from soakgate.stats.plan import plan_summary

    print(
        plan_summary(
            baseline_rate=args.baseline_rate,
            ratio=args.ratio,
            alpha=args.alpha,
            power=args.power,
            design_effect=args.design_effect,
            n=args.n,
            write=args.write,
            arms=args.arms,
            hypothesis=args.hypothesis,
            test=args.test,
            looks=args.looks if args.sequential else None,
        )
    )
    return 0
