"""`soakgate plan`: sample size and power for a comparison, and writing a pre-registration."""

from __future__ import annotations

import argparse
from typing import Any

from soakgate.cli.args import positive_int


def register(subparsers: Any) -> None:
    """Add the `plan` command."""
    parser = subparsers.add_parser(
        "plan", help="designs with the power their verdict delivers, the one to run; --write a plan"
    )
    parser.add_argument("--baseline-rate", type=float, help="expected rate of A (or --pilot)")
    parser.add_argument("--ratio", type=float, help="rate ratio B/A to detect (required)")
    parser.add_argument("--power", type=float, default=0.8, help="probability of detecting it")
    parser.add_argument("--alpha", type=float, default=0.05, help="two-sided level")
    parser.add_argument("--n", type=int, help="requests per arm: the power each design delivers")
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
        "--side-by-side", action="store_true",
        help="also size both arms soaked at the same time in one run, as compare judges them "
        "(window by window where the pairing's checks allow)",
    )  # fmt: skip
    parser.add_argument(
        "--matched-targets", action="store_true",
        help="compare --plan refuses arms that ran on different targets",
    )  # fmt: skip
    parser.add_argument(
        "--search", metavar="SEARCH_TOML",
        help="instead: the cost and error rates of `soakgate search SEARCH_TOML`, simulated, "
        "beside the full factorial's",
    )  # fmt: skip
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the designs and their delivered power (with a note when none is within reach);
    write the plan when asked."""
    from soakgate.errors import UsageError
    from soakgate.stats.planning import PlanRequest, plan_summary

    if args.search is not None:
        return _search_plan(args.search)
    if args.ratio is None:
        raise UsageError("plan needs --ratio (the rate ratio B/A to detect), or --search FILE")
    pilot = None
    if args.pilot is not None:
        from soakgate.report.api import load_pilot

        pilot = load_pilot(args.pilot, args.label)
    elif args.label is not None:
        raise UsageError("--label needs --pilot DB")
    request = PlanRequest(
        baseline_rate=args.baseline_rate, ratio=args.ratio, alpha=args.alpha, power=args.power,
        design_effect=args.design_effect, n=args.n, write=args.write, arms=args.arms,
        hypothesis=args.hypothesis, test=args.test,
        looks=args.looks if args.sequential else None, blocks=args.blocks,
        requests_per_block=args.requests_per_block, matched_targets=args.matched_targets,
        pilot=pilot, side_by_side=args.side_by_side,
    )  # fmt: skip
    print(plan_summary(request))
    return 0


def _search_plan(path: str) -> int:
    """Print a search file's knobs and its simulated plan."""
    from soakgate.search import load_search
    from soakgate.search.summary import knob_lines, plan_lines

    search = load_search(path)
    print(f"search {search.campaign.name}: {len(search.knobs)} knobs differ between "
          f"{search.clean.label!r} and {search.failing.label!r}")  # fmt: skip
    print("\n".join([*knob_lines(search), *plan_lines(search)]))
    return 0
