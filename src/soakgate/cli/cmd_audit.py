"""`soakgate audit`: find custom-op schemas that let torch.compile drop or corrupt writes.

soakgate audit PATH... [--format text|json|sarif] [--fail-on SEVERITY] [--fix [--write]]
soakgate audit --compare OLD.so NEW.so
soakgate audit verify MODULE[:ns::op] --inputs "f32[4,8]; f32[8]; 1e-5"
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    """Add the `audit` command."""
    parser = subparsers.add_parser(
        "audit",
        help="audit PyTorch custom-op schemas for writes torch.compile cannot see",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="source trees, files or .so libraries; or `verify TARGET`",
    )
    parser.add_argument(
        "--format", choices=("text", "json", "sarif"), default="text", help="output format"
    )
    parser.add_argument(
        "--fail-on",
        default="error",
        metavar="SEVERITY",
        help="exit 1 at or above: note, warning, error, critical",
    )
    parser.add_argument(
        "--fix", action="store_true", help="print a unified diff that fixes schemas"
    )
    parser.add_argument("--write", action="store_true", help="with --fix: edit files in place")
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar=("OLD", "NEW"),
        help="show schema changes between two builds of a library",
    )
    parser.add_argument(
        "--inputs", metavar="SPEC", help="verify: sample inputs, `f32[4,8]; 3; 1e-5`"
    )
    parser.add_argument("--device", default="cpu", help="verify: device for the sample tensors")
    parser.add_argument("--no-opcheck", action="store_true", help="verify: skip torch opcheck")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Dispatch to scan, compare or verify and print the outcome."""
    from soakgate.audit.run import run_compare, run_scan, run_verify
    from soakgate.errors import UsageError

    paths: list[str] = args.paths
    if paths[:1] == ["verify"]:
        if len(paths) != 2 or not args.inputs:
            raise UsageError("usage: soakgate audit verify MODULE[:ns::op] --inputs SPEC")
        fmt = "json" if args.format == "json" else "text"
        outcome = run_verify(paths[1], args.inputs, args.device, not args.no_opcheck, fmt)
    elif args.compare:
        if paths:
            raise UsageError("--compare takes two libraries and no PATH")
        old, new = args.compare
        outcome = run_compare(old, new, "json" if args.format == "json" else "text")
    else:
        if args.inputs:
            raise UsageError("--inputs belongs to `soakgate audit verify`")
        outcome = run_scan(paths, args.format, args.fail_on, args.fix, args.write)
    sys.stdout.write(outcome.stdout)
    sys.stderr.write(outcome.stderr)
    return outcome.code
