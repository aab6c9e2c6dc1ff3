"""`soakgate plan`: sample size and power for a comparison, and writing a pre-registration."""

from __future__ import annotations

import argparse
from typing import Any

from soakgate.cli.args import positive_int


def register(subparsers: Any) -> None:
    """Add the `plan` command."""
    parser = subparsers.add_parser(
        "plan", help="n per arm or blocks (or power for a given n); --write a pre-registration"
    )
    parser.add_argument("--baseline-rate", type=float, help="expected rate of A (or --pilot)")
    parser.add_argument("--ratio", type=float, required=True, help="rate ratio B/A to detect")
    parser.add_argument("--power", type=float, default=0.8, help="probability of detecting it")
    parser.add_argument("--alpha", type=float, default=0.05, help="two-sided level")
    parser.add_argument("--n", type=int, help="generations per arm: print achieved power")
    parser.add_argument("--design-effect", type=float, help="variance inflation (default 1)")
    parser.add_argument(
        "--pilot", metavar="DB",
        help="take the design effect (and, without --baseline-rate, the rate) from a soak",
    )  # fmt: skip
    parser.add_argument("--label", help="with --pilot: the label to learn from (default: all)")
    parser.add_argument("--blocks", type=positive_int, help="replicate-block design: blocks/arm")
    parser.add_argument(
        "--requests-per-block", type=positive_int, help="replicate-block design: block length"
    )
    parser.add_argument("--write", metavar="PLAN_TOML", help="write a pre-registration")
    parser.add_argument("--arms", nargs=2, metavar=("A", "B"), help="arm labels (with --write)")
    parser.add_argument("--hypothesis", help="hypothesis in words (with --write)")
    parser.add_argument("--test", default="auto", help="verdict test")
    parser.add_argument("--sequential", action="store_true", help="group-sequential design")
    parser.add_argument("--looks", type=int, default=5, help="looks of a sequential design")
    parser.add_argument(
        "--matched-targets", action="store_true",
        help="compare --plan refuses arms that ran on different targets",
    )  # fmt: skip
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the figures (with a note when the sample size is out of reach); write the plan
    when asked."""
    from soakgate.stats.planning import PlanRequest, plan_summary

    pilot = None
    if args.pilot is not None:
        from soakgate.report.api import load_pilot

        pilot = load_pilot(args.pilot, args.label)
    elif args.label is not None:
        from soakgate.errors import UsageError

        raise UsageError("--label needs --pilot DB")
    request = PlanRequest(
        baseline_rate=args.baseline_rate, ratio=args.ratio, alpha=args.alpha, power=args.power,
        design_effect=args.design_effect, n=args.n, write=args.write, arms=args.arms,
        hypothesis=args.hypothesis, test=args.test,
        looks=args.looks if args.sequential else None, blocks=args.blocks,
        requests_per_block=args.requests_per_block, matched_targets=args.matched_targets,
        pilot=pilot,
    )  # fmt: skip
    print(plan_summary(request))
    if args.n is None and args.baseline_rate is not None and pilot is None:
        note = reach_note(
            args.baseline_rate, args.ratio, args.alpha, args.power, args.design_effect or 1.0
        )
        if note:
            print(note)
    return 0


FAST_SOAK_PER_S = 1000.0
"""Generations per second per arm of a fast soak (several GPUs): the yardstick of `reach_note`."""
REACHABLE_S = 7 * 86400.0
"""A week of such soaking: past it, a sample size is a sign of a mistyped rate or ratio."""


def reach_note(
    baseline_rate: float, ratio: float, alpha: float, power: float, design_effect: float
) -> str | None:
    """A sanity note when n per arm would take more than a week even at 1,000 generations/s."""
    from soakgate.stats.power import n_per_arm

    n = n_per_arm(baseline_rate, ratio, alpha, power, design_effect)
    seconds = n / FAST_SOAK_PER_S
    if seconds <= REACHABLE_S:
        return None
    days = seconds / 86400.0
    span = f"{days / 365.25:,.3g} years" if days > 365.25 else f"{days:,.0f} days"
    return (
        f"note: {n:.3g} generations per arm is out of reach: {span} per arm even at "
        f"{FAST_SOAK_PER_S:,.0f} generations/s; check --baseline-rate {baseline_rate:g} and "
        f"--ratio {ratio:g} (a ratio this close to 1, or a rate this small, cannot be detected "
        "by soaking)"
    )
