"""`soakgate mock-server`: run the fault-injecting OpenAI-compatible mock server."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    """Add the `mock-server` command."""
    from soakgate.mockserver.config import add_arguments

    parser: argparse.ArgumentParser = subparsers.add_parser(
        "mock-server",
        help="run the fault-injecting mock server",
        description="OpenAI-compatible mock server with injected collapses, faults and quirks.",
    )
    add_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Build the configuration and serve until SIGTERM/SIGINT."""
    from soakgate.mockserver.config import config_from_args
    from soakgate.mockserver.serve import run_server

    return run_server(config_from_args(args))
