"""Entry point of the `soakgate` command: discovers `cmd_*` modules and maps errors to exit codes.

Each command module exposes `register(subparsers)`, which adds one subparser and sets
`func(args) -> int`. Heavy imports belong inside `func`, so `soakgate --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence
from typing import NoReturn

from soakgate import __version__, secrets
from soakgate.errors import SoakgateError


class _Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are one line and exit 2, with no usage dump."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The full parser with every discovered command registered."""
    parser = _Parser(
        prog="soakgate",
        description="Find silent output corruption in LLM inference servers.",
        epilog="Run `soakgate demo` for a 30 s tour; `soakgate COMMAND --help` for details.",
    )
    parser.add_argument("--version", action="version", version=f"soakgate {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    package = importlib.import_module("soakgate.cli")
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("cmd_"):
            importlib.import_module(f"soakgate.cli.{info.name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit code (0 ok, 1 findings/failure, 2 bad input)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    try:
        code: int = args.func(args)
    except SoakgateError as exc:
        print(f"soakgate: error: {secrets.redact(str(exc))}", file=sys.stderr)
        code = exc.exit_code
    except KeyboardInterrupt:
        print("soakgate: interrupted", file=sys.stderr)
        code = 130
    _exit_now_if_a_database_was_abandoned(code)
    return code


def _exit_now_if_a_database_was_abandoned(code: int) -> None:
    """A database whose files became immutable mid-run must never be closed (SQLite would
    write through its memory map and the kernel would kill the process with SIGBUS, exit 135,
    hiding the one-line error): end the process here, without running finalizers."""
    store = sys.modules.get("soakgate.store.sqlite")
    if store is not None and store.ABANDONED:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
